//! `xtask/gpu-check.sh`, the check of div on a real NVIDIA GPU (docs/gpus.md), without one:
//! bash reads it, its judging of a run's transcript passes a good one and fails each of the
//! bad ones (`--self-test`), and shellcheck finds nothing where it is installed.

use std::path::PathBuf;
use std::process::Command;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../xtask/gpu-check.sh")
}

#[test]
fn the_gpu_check_script_parses_and_judges_transcripts_as_it_should() {
    let parse = Command::new("bash")
        .arg("-n")
        .arg(script())
        .output()
        .unwrap();
    assert!(parse.status.success(), "{parse:?}");
    let out = Command::new("bash")
        .arg(script())
        .arg("--self-test")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("gpu-check: self-test passed"), "{text}");
    match Command::new("shellcheck").arg(script()).output() {
        Ok(lint) => assert!(
            lint.status.success(),
            "{}",
            String::from_utf8_lossy(&lint.stdout)
        ),
        Err(_) => eprintln!("shellcheck is not installed: the script is not linted"),
    }
}
