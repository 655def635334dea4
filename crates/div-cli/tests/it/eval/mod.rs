//! Models and eval runs end to end: the real `div` on the local control plane pushing model
//! versions, placing eval runs that read them, and reading the evaluations back
//! (`docs/eval.md`).
//!
//! `versions.rs`: two versions pushed and evaluated, references, variables, read-only, the
//! evaluations and their gate; `pushes.rs`: what a push sends, pushes at once, a version in
//! use; `proxy.rs`: a byte-counting proxy in front of the control plane's socket.

mod proxy;
mod pushes;
mod versions;

use std::path::Path;
use std::process::Output;

use crate::support::{Local, text};

/// The eval script: reads the model's weights, says what it was given, tries to write into
/// the model, and scores v2's weights above v1's.
pub(crate) const EVAL_PY: &str = r#"import json, os, pathlib, sys
p = pathlib.Path(os.environ["DIVERGENT_MODEL_PATH"])
w = (p / "weights.bin").read_text().strip()
for k in ["DIVERGENT_MODEL", "DIVERGENT_MODEL_VERSION_ID", "DIVERGENT_MODEL_PATH", "DIVERGENT_MODEL_DIGEST", "DIVERGENT_EVALUATION"]:
    print(f"{k}={os.environ[k]}")
print("weights", w)
try:
    (p / "written-by-the-run").write_text("no")
    print("WROTE INTO THE MODEL")
except OSError as e:
    print("write:", e.strerror)
acc = 0.91 if w == "weights-v2" else 0.72
json.dump({"metrics": {"accuracy": acc, "loss": 0.3}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"#;

/// The project `evals` with `eval.py`.
fn project() -> Local {
    Local::new("evals", &[("eval.py", EVAL_PY)])
}

/// Writes a model folder at `dir`: `weights.bin` holding `weights`, a nested config and an
/// executable script.
pub(crate) fn model_folder(dir: &Path, weights: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("weights.bin"), format!("{weights}\n")).expect("write");
    std::fs::write(dir.join("sub/config.json"), "{\"layers\": 50}\n").expect("write");
    std::fs::write(dir.join("load.sh"), "#!/bin/sh\necho load\n").expect("write");
    std::fs::set_permissions(dir.join("load.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
}

/// The shell block under "The digest" in `docs/eval.md`, run in `dir`: the digest a reader
/// computes with standard tools.
fn documented_digest(dir: &Path) -> String {
    let doc = include_str!("../../../../../docs/eval.md");
    let after = doc
        .split_once("## The digest")
        .expect("docs/eval.md has a section on the digest")
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("the section holds a sh block")
        .0;
    let block = block.replacen("cd ./checkpoints/best &&", "", 1);
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&block)
        .current_dir(dir)
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sum = text(&out.stdout);
    format!(
        "sha256:{}",
        sum.split_whitespace().next().unwrap_or_default()
    )
}

/// `div models push NAME PATH` from the project: the version line's `(version, digest)`.
pub(crate) fn push(local: &Local, name: &str, dir: &Path) -> (String, String) {
    let out = local.div(&["models", "push", name, &dir.to_string_lossy()]);
    version_line(&out)
}

/// `mask-rcnn v3 sha256:…` read from a push's stdout.
fn version_line(out: &Output) -> (String, String) {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{line}");
    (words[1].to_owned(), words[2].to_owned())
}

/// Every run of the project, as `div runs --all --json` lists them.
fn runs(local: &Local) -> Vec<serde_json::Value> {
    let out = local.div(&["runs", "--all", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("runs as JSON")
}
