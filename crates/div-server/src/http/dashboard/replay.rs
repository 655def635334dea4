//! The `div run …` that places a run again, from where its code is now: what was typed
//! (the entrypoint, never the `cd` into the run's copy of the code) and the flags that size,
//! bound and judge it the same way (an eval run's model pinned by its digest).

use div_api::Run;
use div_pricing::{Catalogue, SizeRequest};
use div_spec::{Entrypoint, Sku};

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
    if let Some(model) = &run.model {
        // The very version it judged, by its digest: a name alone would be the latest.
        flag("model", format!("{}@{}", model.name, model.digest));
    }
    if run.code.is_none() {
        words.push("--no-upload".into());
    }
    words.extend(entrypoint_words(run));
    words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
}

/// The words after `div run`'s flags that give the run's entrypoint again: what `div run`
/// reads back as the same typed entrypoint and the same command (div-spec's
/// [`Entrypoint::from_parts`], tried on each way of writing it). Every word is a word of its
/// own, to be quoted: an entrypoint like `pip install … && python train.py` stays one word,
/// never a line the shell splits and runs in part here.
fn entrypoint_words(run: &Run) -> Vec<String> {
    let typed = run.entrypoint.as_str();
    let same = |head: &[String], args: &[String]| {
        Entrypoint::from_parts(head, args)
            .is_ok_and(|e| e.typed() == typed && e.command() == run.command)
    };
    // Several words after `--` (`-- torchrun --nproc-per-node 8 train.py`), when `div run`
    // joined them into what was typed.
    if let Some(words) = unquote(typed)
        && words.len() > 1
        && same(&[], &words)
    {
        return [vec!["--".to_owned()], words].concat();
    }
    // A script and its arguments (`train.py -- --epochs 3`).
    for (at, _) in typed.match_indices(" -- ") {
        let head = typed[..at].to_owned();
        let Some(args) = unquote(&typed[at + 4..]) else {
            continue;
        };
        if !head.starts_with('-') && same(std::slice::from_ref(&head), &args) {
            return [vec![head, "--".to_owned()], args].concat();
        }
    }
    // One word: a script, a function, or a command of one's own as one word (which `div run`
    // reads as that command, whether or not the run was placed with that `command`).
    if !typed.contains(char::is_whitespace) && !typed.starts_with('-') && !typed.is_empty() {
        vec![typed.to_owned()]
    } else {
        vec!["--".to_owned(), typed.to_owned()]
    }
}

/// The words of `line` when it is words [`quote`]d and joined with single spaces (as `div
/// run` writes several words it was given), and nothing else: `None` for anything a shell
/// would read otherwise (`&&`, `>`, `$`, double quotes…).
fn unquote(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' => words.push(std::mem::take(&mut word)),
            '\\' => match chars.next() {
                Some('\'') => word.push('\''),
                _ => return None,
            },
            '\'' => loop {
                match chars.next() {
                    Some('\'') => break,
                    Some(c) => word.push(c),
                    None => return None,
                }
            },
            c => word.push(c),
        }
    }
    words.push(word);
    let again: Vec<String> = words.iter().map(|w| quote(w)).collect();
    (again.join(" ") == line).then_some(words)
}

/// `word` as a shell reads it back (div-spec's quoting, the same `div` prints).
fn quote(word: &str) -> String {
    div_spec::shell_quote(word)
}

#[cfg(test)]
mod tests {
    use super::{command, quote, unquote};

    fn run() -> div_api::Run {
        serde_json::from_value(serde_json::json!({
            "id": "r_1", "name": "run-1", "project": "quickstart", "status": "succeeded",
            "entrypoint": "train.py::run",
            "command": "python -u -c 'from train import run; run()'",
            "sku": "cpu", "gpus": 0, "cores": 2, "memory_gib": 8, "cents_per_hour": 30,
            "max_spend_cents": 500, "image": div_spec::DEFAULT_IMAGE,
            "env": [{"key": "MODE", "value": "fast run"}],
            "checks": ["metrics.accuracy >= 0.8"],
            "code": {"volume": "quickstart-code", "path": "code/9f31c2ab"},
            "created_at": "2026-01-01T00:00:00Z"
        }))
        .expect("a run")
    }

    /// A run whose entrypoint is what `div run` made of `head` and `args`.
    fn placed(head: &[&str], args: &[&str]) -> div_api::Run {
        let own = |w: &[&str]| w.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        let e = div_spec::Entrypoint::from_parts(&own(head), &own(args)).expect("an entrypoint");
        let mut r = run();
        r.entrypoint = e.typed().to_owned();
        r.command = e.command().to_owned();
        r
    }

    /// The arguments `sh` hands `div` for `line`: a function `div` prints them, NUL-separated.
    fn shell_words(line: &str) -> Vec<String> {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("div() {{ printf '%s\\0' \"$@\"; }}; {line}"))
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "{line}: {out:?}");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        text.split_terminator('\0').map(str::to_owned).collect()
    }

    /// What `div run` reads from `argv` (after `div`): each flag's value, and the entrypoint
    /// from the words before and after `--`, read the way `div run` reads them.
    fn read_back(argv: &[String]) -> (Vec<(String, String)>, div_spec::Entrypoint) {
        assert_eq!(argv[0], "run");
        let mut flags = Vec::new();
        let mut i = 1;
        while i < argv.len() && argv[i].starts_with("--") && argv[i] != "--" {
            if argv[i] == "--no-upload" {
                flags.push((argv[i].clone(), String::new()));
                i += 1;
            } else {
                flags.push((argv[i].clone(), argv[i + 1].clone()));
                i += 2;
            }
        }
        let rest = &argv[i..];
        let (head, args) = match rest.iter().position(|w| w == "--") {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        let e = div_spec::Entrypoint::from_parts(head, args).expect("div run reads it");
        (flags, e)
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

    /// An eval run is placed again on the very version it judged: its digest, not its name
    /// (the latest by now, perhaps).
    #[test]
    fn an_eval_run_is_placed_again_on_the_version_it_judged() {
        let mut r = run();
        let digest = format!("sha256:{}", "ab".repeat(32));
        r.model = Some(div_api::RunModel {
            name: "mask-rcnn".into(),
            version: 3,
            digest: digest.clone(),
            path: "/mnt/div-models/code/mask-rcnn/9f31c2ab".into(),
            evaluation: "ev_1".into(),
            extra: Default::default(),
        });
        let line = command(&r);
        assert!(
            line.contains(&format!(" --model mask-rcnn@{digest} ")),
            "{line}"
        );
        assert!(line.ends_with(" train.py::run"), "{line}");
    }

    #[test]
    fn an_own_command_follows_a_double_dash_and_no_upload_is_kept() {
        let mut r = placed(&[], &["torchrun", "--nproc-per-node", "8", "train.py"]);
        r.code = None;
        let line = command(&r);
        assert!(
            line.ends_with(" --no-upload -- torchrun --nproc-per-node 8 train.py"),
            "{line}"
        );
    }

    #[test]
    fn a_command_of_one_word_with_shell_operators_is_one_quoted_word() {
        let r = placed(
            &[],
            &["pip install -q -r requirements.txt 2>/dev/null && CKPT_DIR=/ckpt python train.py"],
        );
        let line = command(&r);
        assert!(
            line.ends_with(
                " -- 'pip install -q -r requirements.txt 2>/dev/null && CKPT_DIR=/ckpt python train.py'"
            ),
            "{line}"
        );
    }

    /// Every way of placing a run: the line, run by `sh`, gives `div` the words that `div run`
    /// reads back as the same entrypoint, the same command and the same flags' values.
    #[test]
    fn the_replay_run_by_a_shell_places_the_same_entrypoint_and_flags() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["train.py::run"], &[]),
            (&["train.py"], &[]),
            (&["train.py"], &["--epochs", "3", "--note", "it's a 'test'"]),
            (&["train.py::main"], &["--out", "a b", "$HOME", "`id`"]),
            (&[], &["torchrun", "--nproc-per-node", "8", "train.py"]),
            (&[], &["sh", "-c", "echo hi && echo there; exit 3"]),
            (
                &[],
                &["pip install -q -r requirements.txt 2>/dev/null && CKPT_DIR=/x python train.py"],
            ),
            (&["torchrun x.py"], &["--lr", "0.1"]),
            (&["torchrun", "x.py"], &["--lr", "0.1"]),
            (&[], &["torchrun", "x.py", "--", "--lr", "0.1"]),
            (&[], &["-weird"]),
            (&[], &["echo", "a -- b", "--", "c d"]),
            (&[], &["python3 -c 'print(1)' > out.txt"]),
        ];
        for (head, args) in cases {
            let mut r = placed(head, args);
            r.env = vec![
                div_api::EnvVar {
                    key: "GREETING".into(),
                    value: "hello world && echo leaked".into(),
                },
                div_api::EnvVar {
                    key: "Q".into(),
                    value: "it's $(id)".into(),
                },
            ];
            r.checks = vec!["metrics.loss < 0.5".into()];
            r.image = "ghcr.io/org/img:tag with space".into();
            let line = command(&r);
            let argv = shell_words(&line);
            assert_eq!(argv.first().map(String::as_str), Some("run"), "{line}");
            let (flags, e) = read_back(&argv);
            assert_eq!(
                (e.typed(), e.command()),
                (r.entrypoint.as_str(), r.command.as_str()),
                "{head:?} -- {args:?}: {line}"
            );
            let values = |name: &str| -> Vec<&str> {
                flags
                    .iter()
                    .filter(|(f, _)| f == name)
                    .map(|(_, v)| v.as_str())
                    .collect()
            };
            assert_eq!(
                values("--env"),
                ["GREETING=hello world && echo leaked", "Q=it's $(id)"],
                "{line}"
            );
            assert_eq!(values("--check"), ["metrics.loss < 0.5"], "{line}");
            assert_eq!(
                values("--image"),
                ["ghcr.io/org/img:tag with space"],
                "{line}"
            );
            assert_eq!(values("--gpu"), ["cpu"], "{line}");
            assert_eq!(values("--project"), ["quickstart"], "{line}");
        }
    }

    #[test]
    fn quoted_words_are_read_back_and_anything_else_is_not() {
        assert_eq!(
            unquote(r"a 'b c' 'it'\''s'"),
            Some(vec!["a".into(), "b c".into(), "it's".into()])
        );
        assert_eq!(unquote("a && b"), None);
        assert_eq!(unquote("a  b"), None);
        assert_eq!(unquote("'open"), None);
        assert_eq!(unquote(r"a\b"), None);
    }

    #[test]
    fn quoting_survives_quotes_and_markup() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
        assert_eq!(quote("<script>"), "'<script>'");
    }
}
