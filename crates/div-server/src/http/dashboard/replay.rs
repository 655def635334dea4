//! The `div run …` that places a run again, from where its code is now: what was typed
//! (the entrypoint, never the `cd` into the run's copy of the code) and the flags that size,
//! bound and judge it the same way.

use div_api::Run;
use div_pricing::{Catalogue, SizeRequest};
use div_spec::Sku;

/// The command line, each word quoted for a POSIX shell where it needs it.
pub(crate) fn command(run: &Run) -> String {
    let mut words: Vec<String> = vec!["div".into(), "run".into()];
    let mut flag = |name: &str, value: String| {
        words.push(format!("--{name}"));
        words.push(value);
    };
    flag("project", run.project.clone());
    flag("gpu", run.sku.clone());
    if run.gpus != 1 && run.sku != "cpu" {
        flag("gpus", run.gpus.to_string());
    }
    // Cores and memory only when they are not what comes with the SKU.
    let default = run.sku.parse::<Sku>().ok().and_then(|sku| {
        Catalogue::standard()
            .size(&SizeRequest {
                sku,
                gpus: run.gpus.max(1),
                cpu: None,
                memory: None,
            })
            .ok()
    });
    if default.is_none_or(|d| d.cores != run.cores) {
        flag("cpu", run.cores.to_string());
    }
    if default.is_none_or(|d| d.memory_gib != run.memory_gib) {
        flag("memory", format!("{}G", run.memory_gib));
    }
    if let Some(cents) = run.max_spend_cents {
        let sign = if cents < 0 { "-" } else { "" };
        let c = cents.unsigned_abs();
        flag("max-spend", format!("{sign}{}.{:02}", c / 100, c % 100));
    }
    if run.image != div_spec::DEFAULT_IMAGE {
        flag("image", run.image.clone());
    }
    for env in &run.env {
        flag("env", format!("{}={}", env.key, env.value));
    }
    for check in &run.checks {
        flag("check", check.clone());
    }
    if run.code.is_none() {
        words.push("--no-upload".into());
    }
    // Anything with a space in it is the user's own command, given after `--`.
    if run.entrypoint.contains(char::is_whitespace) {
        words.push("--".into());
    }
    let mut line: Vec<String> = words.iter().map(|w| quote(w)).collect();
    line.push(if run.entrypoint.contains(char::is_whitespace) {
        // Typed as words: the shell splits it the same way again.
        run.entrypoint.clone()
    } else {
        quote(&run.entrypoint)
    });
    line.join(" ")
}

/// `word` as a shell reads it back (div-spec's quoting, the same `div` prints).
fn quote(word: &str) -> String {
    div_spec::shell_quote(word)
}

#[cfg(test)]
mod tests {
    use super::{command, quote};

    fn run() -> div_api::Run {
        serde_json::from_value(serde_json::json!({
            "id": "r_1", "name": "run-1", "project": "quickstart", "status": "succeeded",
            "entrypoint": "train.py::run",
            "command": "cd /code && python -u -c 'from train import run; run()'",
            "sku": "cpu", "gpus": 0, "cores": 2, "memory_gib": 8, "cents_per_hour": 30,
            "max_spend_cents": 500, "image": div_spec::DEFAULT_IMAGE,
            "env": [{"key": "MODE", "value": "fast run"}],
            "checks": ["metrics.accuracy >= 0.8"],
            "code": {"volume": "quickstart-code", "path": "code/9f31c2ab"},
            "created_at": "2026-01-01T00:00:00Z"
        }))
        .expect("a run")
    }

    #[test]
    fn the_replay_is_what_was_typed_with_the_flags_that_place_it_the_same_way() {
        let line = command(&run());
        assert!(
            line.starts_with("div run --project quickstart --gpu cpu "),
            "{line}"
        );
        assert!(line.contains(" --max-spend 5.00 "), "{line}");
        assert!(line.contains(" --env 'MODE=fast run' "), "{line}");
        assert!(
            line.contains(" --check 'metrics.accuracy >= 0.8' "),
            "{line}"
        );
        assert!(line.ends_with(" train.py::run"), "{line}");
        assert!(!line.contains("cd /code"), "{line}");
    }

    #[test]
    fn an_own_command_follows_a_double_dash_and_no_upload_is_kept() {
        let mut r = run();
        r.entrypoint = "torchrun --nproc-per-node 8 train.py".into();
        r.code = None;
        let line = command(&r);
        assert!(
            line.ends_with(" --no-upload -- torchrun --nproc-per-node 8 train.py"),
            "{line}"
        );
    }

    #[test]
    fn quoting_survives_quotes_and_markup() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
        assert_eq!(quote("<script>"), "'<script>'");
    }
}
