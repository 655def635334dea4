//! The hint a run that died of `ModuleNotFoundError` ends with: which Python it used, and
//! how to install the module into the run.

use div_api::{Run, RunStatus};

/// The most of a log's end that [`missing_module_hint`] needs to see.
pub const LOG_TAIL_BYTES: usize = 16 << 10;

/// Import names whose package on PyPI has another name.
const PACKAGES: &[(&str, &str)] = &[
    ("sklearn", "scikit-learn"),
    ("skimage", "scikit-image"),
    ("cv2", "opencv-python-headless"),
    ("PIL", "pillow"),
    ("yaml", "pyyaml"),
    ("bs4", "beautifulsoup4"),
    ("dotenv", "python-dotenv"),
    ("attr", "attrs"),
    ("google.protobuf", "protobuf"),
    ("Crypto", "pycryptodome"),
    ("jwt", "pyjwt"),
    ("serial", "pyserial"),
    ("dateutil", "python-dateutil"),
];

/// For a failed run whose log ends in `ModuleNotFoundError: No module named 'x'`, the hint:
/// the module, the Python the run used when the traceback shows it (a path like
/// `/opt/conda/lib/python3.11/…`), and the `div run` that installs it into the run first.
/// `tail` is the end of the log (the last [`LOG_TAIL_BYTES`] are enough).
pub fn missing_module_hint(tail: &[u8], run: &Run) -> Option<String> {
    if run.status != RunStatus::Failed {
        return None;
    }
    let text = String::from_utf8_lossy(tail);
    const MARK: &str = "ModuleNotFoundError: No module named '";
    let at = text.rfind(MARK)? + MARK.len();
    let module = &text[at..];
    let module = &module[..module.find('\'')?];
    if module.is_empty()
        || !module
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
    {
        return None;
    }
    let package = PACKAGES
        .iter()
        .find(|(m, _)| module == *m || module.starts_with(&format!("{m}.")))
        .map(|(_, p)| (*p).to_string())
        .unwrap_or_else(|| module.split('.').next().unwrap_or(module).replace('_', "-"));
    let python = python_used(&text[..at]);
    let install = format!("python -m pip install {package} && {}", run.command);
    let used = match python {
        Some((version, lib)) => format!("the run's Python {version} ({lib})"),
        None => "the image's `python`".to_string(),
    };
    Some(format!(
        "`{module}` is not installed in {used}; install it into the run first: `div run -- {}`, \
         or add `{package}` to a requirements.txt the command installs",
        div_spec::shell_quote(&install)
    ))
}

/// The Python a traceback shows, from its last `…/lib/pythonX.Y/…` path: (`3.11`,
/// `/opt/conda/lib/python3.11`).
fn python_used(text: &str) -> Option<(String, String)> {
    const LIB: &str = "/lib/python";
    let at = text.rfind(LIB)?;
    let start = text[..at]
        .rfind(['"', '\'', ' ', '\n'])
        .map_or(0, |i| i + 1);
    let after = &text[at + LIB.len()..];
    let version: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    if version.is_empty() || !version.contains('.') {
        return None;
    }
    let lib = format!("{}{LIB}{version}", &text[start..at]);
    // From the run's log: printed only when it is a plain path.
    if !lib
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
    {
        return None;
    }
    Some((version, lib))
}

#[cfg(test)]
mod tests {
    use div_api::RunStatus;

    use super::*;

    fn failed() -> Run {
        let mut run: Run = serde_json::from_value(serde_json::json!({
            "id": "r_1", "name": "run-k4t9", "project": "p", "status": "failed",
            "entrypoint": "train.py -- --epochs 3", "command": "python -u train.py --epochs 3",
            "sku": "cpu", "gpus": 0, "cores": 1, "memory_gib": 2, "cents_per_hour": 30,
            "image": "i", "created_at": "2025-01-01T00:00:00Z", "duration_seconds": 1,
            "spent_cents": 0,
        }))
        .expect("a run");
        run.exit_code = Some(1);
        run
    }

    #[test]
    fn names_the_python_and_the_install() {
        let log = b"Traceback (most recent call last):\n  File \"/workspace/train.py\", line 1, in <module>\n    import sklearn.neural_network\n  File \"/opt/conda/lib/python3.11/importlib/__init__.py\", line 126\nModuleNotFoundError: No module named 'sklearn'\n";
        assert_eq!(
            missing_module_hint(log, &failed()).as_deref(),
            Some(
                "`sklearn` is not installed in the run's Python 3.11 (/opt/conda/lib/python3.11); \
                 install it into the run first: `div run -- 'python -m pip install scikit-learn && \
                 python -u train.py --epochs 3'`, or add `scikit-learn` to a requirements.txt the \
                 command installs"
            )
        );
    }

    #[test]
    fn without_a_path_it_says_the_images_python() {
        let log = b"ModuleNotFoundError: No module named 'tqdm'\n";
        let hint = missing_module_hint(log, &failed()).unwrap_or_default();
        assert!(
            hint.starts_with("`tqdm` is not installed in the image's `python`;"),
            "{hint}"
        );
    }

    #[test]
    fn only_for_a_failed_run_that_says_so() {
        let mut run = failed();
        assert_eq!(missing_module_hint(b"exit 1\n", &run), None);
        run.status = RunStatus::Succeeded;
        assert_eq!(
            missing_module_hint(b"ModuleNotFoundError: No module named 'x'\n", &run),
            None
        );
        run.status = RunStatus::Failed;
        assert_eq!(
            missing_module_hint(b"ModuleNotFoundError: No module named 'x; rm -rf'\n", &run),
            None
        );
    }
}
