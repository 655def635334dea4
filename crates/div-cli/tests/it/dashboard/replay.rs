//! Place it again, as `div` reads it: the line a run's page shows, run by a shell, gives `div`
//! the words and flags' values the run was placed with, and given to the real `div` places
//! the same run. (The rest of a run's page is tested where it is served: div-server's
//! `dashboard` tests.)

use std::process::Command;

use div_test_support::dashboard::{origin, text_of, with_browser};

use super::{FAKE_DIV, vision};

#[test]
fn place_it_again_is_a_command_a_shell_runs_as_the_run_was_placed() {
    let local = vision();
    let own = "echo installing 2>/dev/null && CKPT_DIR=/tmp/ckpt echo trained";
    let placed = [
        "run",
        "--detach",
        "--gpu",
        "cpu",
        "--cpu",
        "2",
        "--max-spend",
        "1",
        "--name",
        "replayed",
        "--env",
        "GREETING=hello world && echo leaked",
        "--env",
        "QUOTE=it's $(echo leaked)",
        "--check",
        "metrics.accuracy>=0.8",
        "--no-upload",
        "--",
        own,
    ];
    local.ok(&placed);
    let run = local.run_json("replayed");
    let url = local.dashboard();
    let replay = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shown = std::sync::Arc::clone(&replay);
    let sized = run.clone();
    with_browser(|b| async move {
        let run = sized;
        b.goto(&url).await;
        b.goto(&format!("{}/runs/replayed", origin(&url))).await;
        b.until(
            "the replay",
            "return document.getElementById('replay').textContent.startsWith('div run ')",
        )
        .await;
        *shown.lock().expect("the replay") = text_of(&b, "replay").await;
        assert_eq!(
            text_of(&b, "sku").await,
            format!("cpu · 2 cores · {} GiB", run["memory_gib"])
        );
    });
    let replay = replay.lock().expect("the replay").clone();
    if replay.is_empty() {
        return; // no browser
    }
    // What the page shows, run by a shell, with a `div` on PATH that writes down its words.
    let bin = local.tmp.path().join("fake-bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let fake = bin.join("div");
    std::fs::write(&fake, FAKE_DIV).expect("write");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let args_file = local.tmp.path().join("args");
    let out = Command::new("sh")
        .arg("-c")
        .arg(&replay)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("DIV_ARGS", &args_file)
        .output()
        .expect("sh runs");
    assert!(out.status.success(), "{replay}: {out:?}");
    // Nothing of the command ran here: the shell ran `div` and only `div`.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{replay}");
    let words: Vec<String> = std::fs::read(&args_file)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .expect("the fake div ran")
        .split_terminator('\0')
        .map(str::to_owned)
        .collect();
    let value = |flag: &str| -> Vec<String> {
        words
            .windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .collect()
    };
    // The words after `--` are the words the run was placed with, and each flag's value is
    // one word, as placed.
    let dashes = words.iter().position(|w| w == "--").expect("a `--`");
    assert_eq!(&words[dashes + 1..], [own], "{replay}");
    assert_eq!(words[0], "run", "{replay}");
    assert_eq!(value("--gpu"), ["cpu"], "{replay}");
    assert_eq!(value("--cpu"), ["2"], "{replay}");
    assert_eq!(value("--project"), ["vision"], "{replay}");
    assert_eq!(value("--max-spend"), ["1.00"], "{replay}");
    assert_eq!(
        value("--env"),
        [
            "GREETING=hello world && echo leaked",
            "QUOTE=it's $(echo leaked)"
        ],
        "{replay}"
    );
    assert_eq!(
        value("--check"),
        [run["checks"][0].as_str().expect("a check")],
        "{replay}"
    );
    assert!(words.contains(&"--no-upload".to_owned()), "{replay}");
    // And given to the real `div`, those words place the same run again.
    let mut again: Vec<&str> = words.iter().map(String::as_str).collect();
    again.splice(1..1, ["--detach", "--name", "replayed-again"]);
    local.ok(&again);
    let second = local.run_json("replayed-again");
    for field in [
        "project",
        "entrypoint",
        "command",
        "sku",
        "gpus",
        "cores",
        "memory_gib",
        "max_spend_cents",
        "image",
        "env",
        "checks",
        "code",
    ] {
        assert_eq!(second[field], run[field], "{field}: {replay}");
    }
}
