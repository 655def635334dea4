//! The hint a run that died of `ModuleNotFoundError` ends with: which Python it used, and
//! how to install the module into the run.

use std::path::Path;

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

/// What the hint keeps of how the run was placed, so that pasting it places the same run: the
/// flags typed before the entrypoint (each a word, unquoted), and the `requirements.txt` shipped
/// beside the entrypoint, when there is one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacedWith {
    /// `div run`'s own flags, as words: `["--gpu", "cpu", "--check", "metrics.accuracy >= 0.8"]`.
    pub flags: Vec<String>,
    /// The text of the `requirements.txt` that was shipped, when one was.
    pub requirements: Option<String>,
}

impl PlacedWith {
    /// The flags a run's record shows it was placed with (for a run followed after the fact,
    /// whose typed flags are not at hand): its SKU and GPUs, ceiling, image, environment and
    /// checks.
    pub fn from_record(run: &Run) -> PlacedWith {
        let flags = PlacedFlags {
            gpu: (run.sku != "h100").then_some(run.sku.as_str()),
            gpus: (run.gpus != 1 && run.sku != "cpu").then_some(run.gpus),
            max_spend: run.max_spend_cents.map(div_spec::Money::from_cents),
            image: (run.image != div_spec::DEFAULT_IMAGE).then_some(run.image.as_str()),
            env: run
                .env
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect(),
            checks: run.checks.clone(),
            ..PlacedFlags::default()
        };
        PlacedWith {
            flags: flags.words(),
            requirements: None,
        }
    }
}

/// `div run`'s flags as a hint writes them back. Each one given is written, in the order `div
/// run --help` lists them: the one writer behind [`PlacedWith::from_record`] and
/// `PlacedWith::from_options` (`run/options.rs`), so that a flag reads alike from either.
#[derive(Debug, Default)]
pub(crate) struct PlacedFlags<'a> {
    pub(crate) gpu: Option<&'a str>,
    pub(crate) gpus: Option<u32>,
    pub(crate) cpu: Option<u32>,
    pub(crate) memory: Option<div_spec::MemoryGib>,
    pub(crate) max_spend: Option<div_spec::Money>,
    pub(crate) project: Option<&'a str>,
    pub(crate) image: Option<&'a str>,
    pub(crate) pull: Option<div_api::PullPolicy>,
    /// `KEY`, `value`.
    pub(crate) env: Vec<(&'a str, &'a str)>,
    pub(crate) checks: Vec<String>,
    pub(crate) telemetry: Option<&'a Path>,
    pub(crate) volume: Option<&'a str>,
    pub(crate) no_upload: bool,
    pub(crate) detach: bool,
}

impl PlacedFlags<'_> {
    /// The flags as words: `["--gpu", "cpu", "--check", "metrics.accuracy >= 0.8"]`.
    pub(crate) fn words(&self) -> Vec<String> {
        let mut flags = Vec::new();
        let mut flag = |name: &str, value: String| {
            flags.push(format!("--{name}"));
            flags.push(value);
        };
        if let Some(gpu) = self.gpu {
            flag("gpu", gpu.to_owned());
        }
        if let Some(gpus) = self.gpus {
            flag("gpus", gpus.to_string());
        }
        if let Some(cpu) = self.cpu {
            flag("cpu", cpu.to_string());
        }
        if let Some(memory) = self.memory {
            flag("memory", memory.to_string());
        }
        if let Some(money) = self.max_spend {
            flag("max-spend", money.to_string());
        }
        if let Some(project) = self.project {
            flag("project", project.to_owned());
        }
        if let Some(image) = self.image {
            flag("image", image.to_owned());
        }
        if let Some(pull) = self.pull {
            flag("pull", pull.to_string());
        }
        for (key, value) in &self.env {
            flag("env", format!("{key}={value}"));
        }
        for check in &self.checks {
            flag("check", check.clone());
        }
        if let Some(telemetry) = self.telemetry {
            flag("telemetry", telemetry.display().to_string());
        }
        if let Some(volume) = self.volume {
            flag("volume", volume.to_owned());
        }
        if self.no_upload {
            flags.push("--no-upload".into());
        }
        if self.detach {
            flags.push("--detach".into());
        }
        flags
    }
}

/// For a failed run whose log ends in `ModuleNotFoundError: No module named 'x'`, the hint:
/// the module, the Python the run used when the traceback shows it (a path like
/// `/opt/conda/lib/python3.11/…`), and the `div run` that installs it into the run first,
/// with every flag the run was placed with. Where a `requirements.txt` was shipped, it says
/// whether the file lists the package and installs from it. `tail` is the end of the log
/// (the last [`LOG_TAIL_BYTES`] are enough).
pub fn missing_module_hint(tail: &[u8], run: &Run, placed: &PlacedWith) -> Option<String> {
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
    let used = match python {
        Some((version, lib)) => format!("the run's Python {version} ({lib})"),
        None => "the image's `python`".to_string(),
    };
    let again = |install: &str| {
        let mut words: Vec<String> = vec!["div".into(), "run".into()];
        words.extend(placed.flags.iter().map(|w| div_spec::shell_quote(w)));
        words.push("--".into());
        words.push(div_spec::shell_quote(&format!(
            "{install} && {}",
            run.command
        )));
        words.join(" ")
    };
    const FROM_FILE: &str = "python -m pip install -r requirements.txt";
    let advice = match &placed.requirements {
        None => format!(
            "install it into the run first: `{}`, or add `{package}` to a requirements.txt the \
             command installs",
            again(&format!("python -m pip install {package}"))
        ),
        Some(file) => {
            let listed = lists(file, &package);
            let installs = run.command.contains("requirements");
            match (listed, installs) {
                (true, false) => format!(
                    "requirements.txt lists it, but the command does not install it: `{}`",
                    again(FROM_FILE)
                ),
                (false, false) => format!(
                    "add `{package}` to requirements.txt and install from it in the run: `{}`",
                    again(FROM_FILE)
                ),
                (false, true) => {
                    format!("add `{package}` to requirements.txt, which the command installs")
                }
                (true, true) => format!(
                    "requirements.txt lists `{package}` and the command installs it: pip's lines \
                     above say why it did not reach {used}"
                ),
            }
        }
    };
    Some(format!("`{module}` is not installed in {used}; {advice}"))
}

/// Whether a requirements file names `package` (PEP 503's normalised names: case, `-`, `_`
/// and `.` alike), on a line of its own with any version, extras or markers after it.
fn lists(file: &str, package: &str) -> bool {
    let norm = |name: &str| -> String {
        name.chars()
            .map(|c| match c {
                '_' | '.' => '-',
                c => c.to_ascii_lowercase(),
            })
            .collect()
    };
    let want = norm(package);
    file.lines().any(|line| {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('-') {
            return false;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
            .collect();
        !name.is_empty() && norm(&name) == want
    })
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
            missing_module_hint(log, &failed(), &PlacedWith::default()).as_deref(),
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
        let hint = missing_module_hint(log, &failed(), &PlacedWith::default()).unwrap_or_default();
        assert!(
            hint.starts_with("`tqdm` is not installed in the image's `python`;"),
            "{hint}"
        );
    }

    #[test]
    fn only_for_a_failed_run_that_says_so() {
        let mut run = failed();
        assert_eq!(
            missing_module_hint(b"exit 1\n", &run, &PlacedWith::default()),
            None
        );
        run.status = RunStatus::Succeeded;
        assert_eq!(
            missing_module_hint(
                b"ModuleNotFoundError: No module named 'x'\n",
                &run,
                &PlacedWith::default()
            ),
            None
        );
        run.status = RunStatus::Failed;
        assert_eq!(
            missing_module_hint(
                b"ModuleNotFoundError: No module named 'x; rm -rf'\n",
                &run,
                &PlacedWith::default()
            ),
            None
        );
    }

    /// Every flag typed is kept, so the hint places the same run (not an H100 one).
    #[test]
    fn keeps_every_flag_the_run_was_placed_with() {
        let placed = PlacedWith {
            flags: ["--gpu", "cpu", "--check", "metrics.accuracy >= 0.8"]
                .map(String::from)
                .to_vec(),
            requirements: None,
        };
        let hint = missing_module_hint(
            b"ModuleNotFoundError: No module named 'numpy'\n",
            &failed(),
            &placed,
        )
        .unwrap_or_default();
        assert!(
            hint.contains(
                "`div run --gpu cpu --check 'metrics.accuracy >= 0.8' -- 'python -m pip install \
                 numpy && python -u train.py --epochs 3'`"
            ),
            "{hint}"
        );
    }

    /// A shipped requirements.txt is what the hint installs from, and what it asks to edit
    /// only when it does not list the package already.
    #[test]
    fn a_shipped_requirements_file_is_installed_from() {
        let log = b"ModuleNotFoundError: No module named 'sklearn'\n";
        let with = |file: &str, command: &str| {
            let mut run = failed();
            run.command = command.into();
            let placed = PlacedWith {
                flags: vec!["--gpu".into(), "cpu".into()],
                requirements: Some(file.into()),
            };
            missing_module_hint(log, &run, &placed).unwrap_or_default()
        };
        let listed = "numpy==2.1\nScikit_Learn>=1.5 ; python_version>'3.8'\n";
        assert_eq!(
            with(listed, "python train.py"),
            "`sklearn` is not installed in the image's `python`; requirements.txt lists it, \
             but the command does not install it: `div run --gpu cpu -- 'python -m pip install \
             -r requirements.txt && python train.py'`"
        );
        assert_eq!(
            with("numpy\n# scikit-learn\n", "python train.py"),
            "`sklearn` is not installed in the image's `python`; add `scikit-learn` to \
             requirements.txt and install from it in the run: `div run --gpu cpu -- 'python -m \
             pip install -r requirements.txt && python train.py'`"
        );
        assert_eq!(
            with(
                "numpy\n",
                "pip install -r requirements.txt && python train.py"
            ),
            "`sklearn` is not installed in the image's `python`; add `scikit-learn` to \
             requirements.txt, which the command installs"
        );
    }

    #[test]
    fn a_record_gives_back_the_flags_it_was_placed_with() {
        let mut run = failed();
        run.max_spend_cents = Some(250);
        run.checks = vec!["metrics.accuracy >= 0.8".into()];
        assert_eq!(
            PlacedWith::from_record(&run).flags,
            [
                "--gpu",
                "cpu",
                "--max-spend",
                "$2.50",
                "--image",
                "i",
                "--check",
                "metrics.accuracy >= 0.8"
            ]
        );
    }
}
