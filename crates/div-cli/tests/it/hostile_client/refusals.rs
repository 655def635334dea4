//! Refusals that leave the control plane as it was: every refusal of `div run`, names,
//! volumes, environments past their limits, a secret with a NUL.

use super::{Local, text};
use crate::support::World;

/// Every refusal of `div run` leaves the control plane as it was: no code volume, no tree,
/// no volume the command names. Each one's state is compared before and after.
#[test]
fn every_refusal_of_div_run_leaves_the_control_plane_unchanged() {
    let local = Local::new();
    std::fs::write(local.project().join("bad.toml"), "[chart]\n").expect("write");
    std::fs::write(local.project().join("bad-utf8.toml"), b"\xff\xfe").expect("write");
    // One run that is there, so that its name is taken.
    let first = local.div(&["run", "--gpu", "cpu", "--name", "taken", "train.py"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let before = local.state();
    assert!(before.contains("proj-code"), "{before}");

    let names_a_volume = "python train.py && ls /mnt/newvol";
    let refusals: &[(&[&str], &str)] = &[
        (&["--name", "A/B"], "`A/B` is not a run name"),
        (&["--name", "r_abc"], "`r_abc` is not a run name"),
        (&["--name", "taken"], "a run named `taken` already exists"),
        (
            &["--telemetry", "bad.toml"],
            "bad.toml` is not a valid telemetry layout",
        ),
        (
            &["--telemetry", "bad-utf8.toml"],
            "bad-utf8.toml` is not a valid telemetry layout: it is not UTF-8",
        ),
        (
            &["--gpu", "h100", "--gpus", "3"],
            "this control plane has 2 H100; the run asks for 3",
        ),
        (&["--volume", "Code"], "`Code` is not a volume name"),
    ];
    for (flags, says) in refusals {
        let mut args = vec!["run"];
        if !flags.contains(&"--gpu") {
            args.extend_from_slice(&["--gpu", "cpu"]);
        }
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", names_a_volume]);
        let out = local.div(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(200), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(local.state(), before, "{args:?} left something behind");
    }

    // A shipped `telemetry.toml` that is not a layout: refused before anything is made.
    std::fs::write(local.project().join("telemetry.toml"), "[[chart]]\n").expect("write");
    std::fs::write(local.project().join("new.py"), "print(2)\n").expect("write");
    let out = local.div(&["run", "--gpu", "cpu", "--", names_a_volume]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("telemetry.toml` is not a valid telemetry layout"),
        "{stderr}"
    );
    assert_eq!(local.state(), before, "a bad shipped telemetry.toml");
}

/// `div logs ''` (and `stop`, `result`, `telemetry`) says what is wrong with the word, and
/// asks the control plane nothing.
#[tokio::test]
async fn an_empty_run_name_is_refused_with_what_is_wrong() {
    let world = World::new().await;
    for command in ["logs", "stop", "result", "telemetry"] {
        for word in ["", " ", "a/b"] {
            let done = world.div(&[command, word]).await;
            assert_eq!(done.code, 200, "{command} {word:?}: {}", done.stderr);
            assert!(
                done.stderr
                    .starts_with(&format!("error: `{word}` does not name a run: ")),
                "{command} {word:?}: {}",
                done.stderr
            );
            assert!(!done.stderr.contains("missing field"), "{}", done.stderr);
        }
    }
    assert!(world.requests().await.is_empty());
}

/// `--volume` errors say it once.
#[tokio::test]
async fn a_bad_volume_is_named_once() {
    let world = World::new().await;
    let done = world.div(&["run", "--volume", "A", "train.py"]).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert_eq!(
        done.stderr.matches("is not a volume name").count(),
        1,
        "{}",
        done.stderr
    );
}

/// A value past 128 KiB less 256 bytes is refused as `--env` is parsed (one argument cannot be
/// much longer: the kernel refuses arguments past 128 KiB).
#[tokio::test]
async fn an_env_value_past_the_limit_is_refused_when_typed() {
    let world = World::new().await;
    let big = format!("BIG={}", "x".repeat(131_000));
    let done = world.div(&["run", "--env", &big, "train.py"]).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert!(
        done.stderr.contains(
            "the value of `BIG` is 131000 bytes; an environment variable holds at most 130816 bytes"
        ),
        "{}",
        done.stderr
    );
    assert!(world.requests().await.is_empty());
}

/// An `--env` or secret name past 255 bytes, and `--env` variables past 1 MiB together, are
/// refused as typed, saying which bound, before the control plane is asked.
#[tokio::test]
async fn env_names_past_255_bytes_and_env_past_1_mib_are_refused_when_typed() {
    let world = World::new().await;
    let name = "K".repeat(256);
    let done = world
        .div(&["run", "--env", &format!("{name}=v"), "train.py"])
        .await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert!(
        done.stderr
            .contains("the variable name `KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKK…` is 256 bytes; a name holds at most 255 bytes"),
        "{}",
        done.stderr
    );
    std::fs::write(world.project().join("token"), b"secret").expect("write");
    let done = world
        .div(&["secrets", "set", &name, "--from-file", "token"])
        .await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert!(
        done.stderr
            .contains("the secret's name is refused: the variable name `KKKK")
            && done
                .stderr
                .contains("is 256 bytes; a name holds at most 255 bytes"),
        "{}",
        done.stderr
    );
    // Nine variables of 120,000 bytes: each is fine, together they are 1,080,036 bytes.
    let vars: Vec<String> = (1..=9)
        .map(|i| format!("V{i}={}", "x".repeat(120_000)))
        .collect();
    let mut args = vec!["run"];
    for v in &vars {
        args.extend(["--env", v.as_str()]);
    }
    args.push("train.py");
    let done = world.div(&args).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert!(
        done.stderr.contains(
            "the run's --env variables hold 1080036 bytes together (`KEY=value` and a NUL each, the largest `V1`); a run's environment holds at most 1048576 bytes (1 MiB)"
        ),
        "{}",
        done.stderr
    );
    assert!(world.requests().await.is_empty());
}

/// A secret's value with a NUL byte is refused before the control plane is asked.
#[tokio::test]
async fn a_secret_with_a_nul_is_refused_when_set() {
    let world = World::new().await;
    std::fs::write(world.project().join("token"), b"ab\0cd").expect("write");
    let done = world
        .div(&["secrets", "set", "TOKEN", "--from-file", "token"])
        .await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert!(
        done.stderr
            .contains("the value of `TOKEN` holds a NUL byte (at byte 2)"),
        "{}",
        done.stderr
    );
    assert!(world.requests().await.is_empty());
}
