//! An entrypoint checked against the shipment before anything is created: its `.py` file
//! shipped, its function defined ([`module_names`]), its script runnable by `sh`.

use div_spec::did_you_mean;

use super::{Defines, module_names};

/// A `.py` file larger than this is not scanned (its run is placed).
const MOST_SCANNED: u64 = 4 << 20;

/// What can be known wrong with an entrypoint once the shipment is known, found before
/// anything is created:
///
/// - the `.py` file it names is not shipped (with the shipped `.py` file it most likely
///   meant);
/// - `file.py::function` where the file surely defines no such name at module level (with
///   the name it most likely meant);
/// - the user's own command starts with a shipped `.py` file that `sh` cannot run (no `/`,
///   so `sh` looks for it on `PATH`, or not executable), with the `python` form that works.
pub(crate) fn check_shipped(
    entrypoint: &div_spec::Entrypoint,
    shipment: &div_ship::Shipment,
    dir: &std::path::Path,
) -> Result<(), crate::RunError> {
    use crate::RunError;
    use div_spec::EntrypointKind;
    let shipped_py = || {
        shipment
            .manifest
            .entries
            .iter()
            .map(|e| e.path.as_str())
            .filter(|p| p.ends_with(".py"))
    };
    if let Some(file) = entrypoint.python_file() {
        if !shipment.contains(file) {
            return Err(match did_you_mean(file, shipped_py()) {
                Some(meant) => RunError::EntrypointMisspelled {
                    file: file.to_string(),
                    meant: meant.to_string(),
                },
                None => RunError::EntrypointNotShipped {
                    file: file.to_string(),
                    dir: dir.to_path_buf(),
                },
            });
        }
        if let EntrypointKind::PythonFunction { function, .. } = entrypoint.kind()
            && let Some(entry) = shipment.manifest.get(file)
            && entry.size <= MOST_SCANNED
            && let Ok(source) = shipment.read(file)
            && let Defines::Names(names) = module_names(&source)
            && !names.contains(function)
        {
            let meant =
                did_you_mean(function, names.iter().map(String::as_str)).map(|m| m.to_string());
            return Err(RunError::NoSuchFunction {
                file: file.to_string(),
                function: function.clone(),
                meant,
                defined: names.into_iter().collect(),
            });
        }
        return Ok(());
    }
    if *entrypoint.kind() != EntrypointKind::Command {
        return Ok(());
    }
    let command = entrypoint.command();
    let Some(first) = command.split_whitespace().next() else {
        return Ok(());
    };
    let path = first.strip_prefix("./").unwrap_or(first);
    if !path.ends_with(".py") {
        return Ok(());
    }
    let Some(entry) = shipment.manifest.get(path) else {
        return Ok(());
    };
    let why = if !first.contains('/') {
        format!("`sh` looks for `{first}` on PATH, not in the shipped code")
    } else if !entry.executable {
        format!("`{path}` is not executable")
    } else {
        return Ok(());
    };
    let rest = command[command.find(first).unwrap_or(0) + first.len()..].trim_start();
    let python = if rest.is_empty() {
        format!("python {path}")
    } else {
        format!("python {path} {rest}")
    };
    let plain = python
        .bytes()
        .all(|b| !b"&|;<>$`()\\\"'*?!#~{}".contains(&b));
    let meant = if plain {
        format!("div run -- {python}")
    } else {
        format!("div run -- {}", div_spec::shell_quote(&python))
    };
    Err(RunError::ScriptNotRunnable {
        first: first.to_string(),
        why,
        meant,
    })
}
