//! The client's side of issue 13, each test performing the attack or the mistake it is about:
//! storage that stays inside its lines, refusals that leave the control plane as it was,
//! checks that compare exactly, and run-provided text that never drives the terminal. Against
//! the real local control plane where one is needed, else against wiremock.

use std::path::PathBuf;
use std::process::{Output, Stdio};

use div_test_support::mock::{error_response, json_response};
use serde_json::json;
use wiremock::Mock;
use wiremock::matchers::{method, path};

use crate::support::{DIV, World};

/// A temp home and project on the local control plane; stops the server when dropped.
struct Local {
    tmp: tempfile::TempDir,
}

impl Local {
    fn new() -> Local {
        let tmp = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(tmp.path().join("proj")).expect("mkdir");
        std::fs::write(tmp.path().join("proj/train.py"), "print('hi')\n").expect("write");
        Local { tmp }
    }

    fn project(&self) -> PathBuf {
        self.tmp.path().join("proj")
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(DIV);
        c.args(args)
            .current_dir(self.project())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("DIVERGENT_HOME", self.tmp.path().join("div-home"))
            .env("DIVERGENT_EMULATE_GPUS", "h100:2")
            .env("NO_COLOR", "1");
        c
    }

    fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }

    /// `div args…`, killed if it has not ended after a (generous) while: for commands that
    /// used to hang. A kill fails the test; the time is a guard, not a measurement.
    fn div_or_hang(&self, args: &[&str]) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("div starts");
        let patience = std::time::Duration::from_secs(120);
        let ended =
            div_test_support::poll_until(patience, || match child.try_wait().expect("wait") {
                Some(_) => Ok(()),
                None => Err(()),
            });
        if ended.is_err() {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("`div {}` hung: {}", args.join(" "), text(&out.stderr));
        }
        child.wait_with_output().expect("output")
    }

    /// What the control plane holds, as `div` lists it: the volumes, everything in each,
    /// and the runs.
    fn state(&self) -> String {
        let volumes = text(&self.div(&["storage", "ls", "--json"]).stdout);
        let mut state = format!("volumes: {volumes}\n");
        let names: Vec<String> = serde_json::from_str::<serde_json::Value>(&volumes)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect();
        for name in names {
            let inside = self.div(&["storage", "ls", "-r", &name]);
            state.push_str(&format!("{name}: {}\n", text(&inside.stdout)));
        }
        let runs = self.div(&["runs", "--all", "--json"]);
        state.push_str(&format!("runs: {}\n", text(&runs.stdout)));
        state
    }
}

/// Its runs stopped, then its server, when the test ends (as `support::Local`'s).
impl Drop for Local {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.command(args),
            &self.tmp.path().join("div-home"),
            self.tmp.path(),
        );
        let _ = self.div(&["server", "stop"]);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

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

/// `div storage get` into a destination holding a link to a folder elsewhere, under the name
/// of a folder the volume holds: the get is refused, and nothing lands where the link points.
#[test]
fn storage_get_never_writes_through_a_link_in_the_destination() {
    let local = Local::new();
    let data = local.project().join("data");
    std::fs::create_dir_all(data.join("sub")).expect("mkdir");
    std::fs::write(data.join("sub/planted.txt"), "x\n").expect("write");
    let put = local.div(&["storage", "put", "ds", "data"]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));

    let elsewhere = local.tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let out_dir = local.project().join("out");
    std::fs::create_dir_all(&out_dir).expect("mkdir");
    std::os::unix::fs::symlink(&elsewhere, out_dir.join("sub")).expect("symlink");

    let got = local.div(&["storage", "get", "ds", "out"]);
    let stderr = text(&got.stderr);
    assert_eq!(got.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("is a link") && stderr.contains("never writes through a link"),
        "{stderr}"
    );
    assert!(
        !elsewhere.join("planted.txt").exists(),
        "the get wrote through the link"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("read").count(),
        0,
        "nothing may land where the link points"
    );

    // A planted partial-download link is never written through either.
    let victim = local.tmp.path().join("victim.txt");
    std::fs::write(&victim, "keep\n").expect("write");
    let fresh = local.project().join("fresh");
    std::fs::create_dir_all(fresh.join("sub")).expect("mkdir");
    std::os::unix::fs::symlink(&victim, fresh.join("sub/.planted.txt.div-partial"))
        .expect("symlink");
    let got = local.div(&["storage", "get", "ds", "fresh"]);
    assert_eq!(got.status.code(), Some(0), "{}", text(&got.stderr));
    assert_eq!(
        std::fs::read_to_string(&victim).ok().as_deref(),
        Some("keep\n")
    );
    assert_eq!(
        std::fs::read_to_string(fresh.join("sub/planted.txt"))
            .ok()
            .as_deref(),
        Some("x\n")
    );
}

/// A volume that holds a link and a file "under" it (a hostile control plane, or a tree a run
/// made): the get is refused before anything is written.
#[tokio::test]
async fn storage_get_never_writes_through_a_link_the_volume_holds() {
    let world = World::new().await;
    let outside = world.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let entries = json!({"entries": [
        {"path": "evil", "kind": "symlink", "size": 0, "target": outside.display().to_string()},
        {"path": "evil/passwd", "kind": "file", "size": 5},
    ]});
    Mock::given(method("GET"))
        .and(path("/v1/volumes/ds/tree"))
        .respond_with(json_response(200, &entries))
        .mount(&world.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/volumes/ds/file"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_bytes("owned"))
        .mount(&world.server)
        .await;
    let done = world.div(&["storage", "get", "ds", "out"]).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert!(done.stderr.contains("is a link"), "{}", done.stderr);
    assert!(!outside.join("passwd").exists(), "wrote through the link");
    assert!(
        std::fs::symlink_metadata(world.project().join("out/evil")).is_err(),
        "nothing is written when the plan is refused"
    );
}

/// `div storage put` of a FIFO or a device is refused at once (reading either never ends);
/// one inside a folder is left out with a warning.
#[test]
fn storage_put_of_a_fifo_or_a_device_is_refused_at_once() {
    let local = Local::new();
    let fifo = local.project().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let out = local.div_or_hang(&["storage", "put", "ds", "fifo"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("fifo` is a FIFO; `div storage put` sends files and folders"),
        "{stderr}"
    );
    let out = local.div_or_hang(&["storage", "put", "ds", "/dev/zero"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(stderr.contains("`/dev/zero` is a device"), "{stderr}");
    assert!(!local.state().contains("\"ds\""), "nothing was made");

    let folder = local.project().join("folder");
    std::fs::create_dir_all(&folder).expect("mkdir");
    std::fs::write(folder.join("a.txt"), "a\n").expect("write");
    std::fs::rename(&fifo, folder.join("pipe")).expect("move the fifo");
    let out = local.div_or_hang(&["storage", "put", "ds", "folder"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: `pipe` is a FIFO, not a file, and was left out"),
        "{stderr}"
    );
}

/// A link named on the command line is followed (the user named it); the volume gets the
/// link's name and the target's content. Links inside a folder are left out.
#[test]
fn storage_put_follows_a_link_named_on_the_command_line() {
    let local = Local::new();
    std::fs::write(local.project().join("model-v3.bin"), "weights\n").expect("write");
    std::os::unix::fs::symlink("model-v3.bin", local.project().join("latest.bin"))
        .expect("symlink");
    let out = local.div(&["storage", "put", "ds", "latest.bin"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dest = local.project().join("back");
    let got = local.div(&["storage", "get", "ds/latest.bin", "back"]);
    assert_eq!(got.status.code(), Some(0), "{}", text(&got.stderr));
    assert_eq!(
        std::fs::read_to_string(&dest).ok().as_deref(),
        Some("weights\n")
    );
}

/// A bad volume name is named as such, not blamed on `--to`.
#[test]
fn storage_put_names_the_bad_volume_name() {
    let local = Local::new();
    let out = local.div(&["storage", "put", "UPPER", "train.py", "--to", "x"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert_eq!(
        stderr.lines().next().unwrap_or_default(),
        "error: `UPPER` is not a volume name: 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit",
    );
}

/// A failing step of `div storage put` names `div storage put`, not the code upload.
#[tokio::test]
async fn storage_put_errors_name_the_command_that_ran() {
    let world = World::new().await;
    std::fs::write(world.project().join("a.txt"), "a\n").expect("write");
    Mock::given(method("GET"))
        .and(path("/v1/volumes"))
        .respond_with(json_response(200, &json!({"volumes": []})))
        .mount(&world.server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/volumes"))
        .respond_with(error_response(
            422,
            "invalid",
            "the disk is full",
            json!({}),
        ))
        .mount(&world.server)
        .await;
    let done = world.div(&["storage", "put", "ds", "a.txt"]).await;
    assert_ne!(done.code, 0);
    assert!(
        done.stderr
            .starts_with("error: could not make the volume for `div storage put`\n"),
        "{}",
        done.stderr
    );
    assert!(!done.stderr.contains("code"), "{}", done.stderr);
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

/// `{"x":0.30000000000000001}` passes `x>0.3`: the number is compared as written, and shown
/// as written. Through `f64` it would be `0.3` and fail.
#[test]
fn checks_compare_the_result_as_written() {
    let local = Local::new();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--check",
        "x>0.3",
        "--check",
        "big>=123456789012345678901234567890",
        "--",
        r#"printf '{"x":0.30000000000000001,"big":123456789012345678901234567890}' > "$DIVERGENT_RESULT_PATH""#,
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("check passed: x > 0.3 (found 0.30000000000000001)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "check passed: big >= 123456789012345678901234567890 (found 123456789012345678901234567890)\n"
        ),
        "{stdout}"
    );
    assert!(stderr.contains("passed 2 of 2 checks"), "{stderr}");
}

/// `div result RUN --check` judges on this machine as the control plane judges a run's own
/// checks: from the result's text, numbers as written. Through the API's `Value` (an `f64`),
/// `0.30000000000000001` was `0.3`, so `x>0.3` failed here while it passed as a run's check.
/// `--json` and the plain output show the number as written.
#[test]
fn div_result_checks_compare_the_result_as_written() {
    let local = Local::new();
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--name",
        "exact",
        "--",
        r#"printf '{"x":0.30000000000000001,"m":{"l":[1,2.50,[]],"e":{}},"s":"caf\\u00e9"}' > "$DIVERGENT_RESULT_PATH""#,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let passed = local.div(&["result", "exact", "--check", "x>0.3"]);
    let stdout = text(&passed.stdout);
    assert_eq!(
        passed.status.code(),
        Some(0),
        "{stdout}{}",
        text(&passed.stderr)
    );
    assert!(
        stdout.contains("check passed: x > 0.3 (found 0.30000000000000001) · judged here\n"),
        "{stdout}"
    );
    // The object as written, laid out as before.
    assert!(
        stdout.starts_with(
            "{\n  \"x\": 0.30000000000000001,\n  \"m\": {\n    \"l\": [\n      1,\n      2.50,\n      []\n    ],\n    \"e\": {}\n  },\n  \"s\": \"caf\\u00e9\"\n}\n"
        ),
        "{stdout}"
    );

    let missed = local.div(&["result", "exact", "--check", "x>0.30000000000000001"]);
    let stdout = text(&missed.stdout);
    assert_eq!(
        missed.status.code(),
        Some(210),
        "{stdout}{}",
        text(&missed.stderr)
    );
    assert!(
        stdout.contains(
            "check failed: x > 0.30000000000000001 (found 0.30000000000000001) · judged here\n"
        ),
        "{stdout}"
    );
    let equal = local.div(&["result", "exact", "--check", "m.l.1==2.5"]);
    assert_eq!(equal.status.code(), Some(0), "{}", text(&equal.stdout));

    let json = local.div(&["result", "exact", "--json", "--check", "x>0.3"]);
    let stdout = text(&json.stdout);
    assert_eq!(
        json.status.code(),
        Some(0),
        "{stdout}{}",
        text(&json.stderr)
    );
    assert!(stdout.contains("\"x\": 0.30000000000000001,"), "{stdout}");
    assert!(stdout.contains("\"s\": \"caf\\u00e9\""), "{stdout}");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("--json is JSON");
    assert_eq!(value["run"], "exact");
    assert_eq!(value["judged"][0]["outcome"], "passed", "{stdout}");
    assert_eq!(value["result"]["m"]["l"][1], json!(2.5));
}

/// Whether `s` holds a character a terminal acts on: ESC, C1 controls (CSI is U+009B), BEL,
/// a carriage return, or a bidi override.
fn drives_a_terminal(s: &str) -> bool {
    s.chars()
        .any(|c| matches!(c, '\u{1b}' | '\u{7}' | '\r' | '\u{9b}' | '\u{202e}'))
}

/// A run that plants escape sequences in its failure reason, its result's strings and the
/// names of files it leaves in a volume: none reach the terminal as they are.
#[test]
fn run_provided_text_is_escaped_before_the_terminal() {
    let local = Local::new();
    let script = r#"printf '{"s":"a\u001b]0;owned\u0007b\u009b2Jc\u202eevil"}' > "$DIVERGENT_RESULT_PATH"; mkdir -p /mnt/vol; : > "/mnt/vol/$(printf 'f\033[2Jg')"; printf 'boom \033]0;title\007 \302\233 1J\r\n'; exit 4"#;
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--check",
        "s==x",
        "--",
        script,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(!drives_a_terminal(&stderr), "{stderr:?}");
    assert!(
        stderr.contains("boom \\u001b]0;title\\u0007 \\u009b 1J"),
        "{stderr}"
    );
    // The verdict line goes into the log, which is the run's own bytes and printed as they
    // are: the found string in it is escaped where it is written.
    let stdout = text(&out.stdout);
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("check failed: s == x"))
        .unwrap_or_default();
    assert!(!drives_a_terminal(verdict), "{verdict:?}");
    assert!(verdict.contains(r"\u009b2Jc\u202eevil"), "{verdict}");

    let runs = local.div(&["runs", "--all", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("JSON");
    let name = listed[0]["name"].as_str().expect("a name").to_owned();
    for args in [
        vec!["result", name.as_str()],
        vec!["result", name.as_str(), "--json"],
        vec!["runs", "--all"],
        vec!["logs", name.as_str(), "--json"],
        vec!["storage", "ls", "-r", "vol"],
        vec!["storage", "ls", "-r", "vol", "--json"],
    ] {
        let out = local.div(&args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        // `logs` prints the log itself on stderr with --json: that is the run's own bytes.
        if args[0] != "logs" {
            assert!(!drives_a_terminal(&stderr), "{args:?}: {stderr:?}");
        }
        assert!(!drives_a_terminal(&stdout), "{args:?}: {stdout:?}");
        if args.ends_with(&["--json"]) {
            serde_json::from_str::<serde_json::Value>(&stdout)
                .unwrap_or_else(|e| panic!("{args:?}: still JSON: {e}: {stdout}"));
        }
    }
    let ls = text(&local.div(&["storage", "ls", "-r", "vol"]).stdout);
    assert!(ls.contains(r"f\u001b[2Jg"), "{ls}");
}

/// Every non-empty partial upload under `root` (the server's `blobs/<volume>/partial/`), with
/// its size.
fn partial_uploads(root: &std::path::Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file()
                && meta.len() > 0
                && dir.file_name().is_some_and(|n| n == "partial")
            {
                found.push((path, meta.len()));
            }
        }
    }
    found
}

/// Issue 13: a client killed (SIGKILL) while it uploads a large new file leaves a partial
/// blob on the server; the next `div run` must succeed and ship the file intact (resumed or
/// sent again), and the run must read exactly the file.
#[test]
fn a_client_killed_mid_upload_leaves_nothing_that_breaks_the_next_run() {
    const LINES: usize = 20_000_000; // 10 bytes each: 200 MB
    let local = Local::new();
    let mut big = Vec::with_capacity(LINES * 10);
    for i in 0..LINES {
        big.extend_from_slice(format!("{i:09}\n").as_bytes());
    }
    std::fs::write(local.project().join("big.txt"), &big).expect("write big.txt");
    drop(big);
    std::fs::write(
        local.project().join("check.py"),
        format!(
            r#"n = {LINES}
ok = True
with open("big.txt", "rb") as f:
    for start in range(0, n, 200000):
        want = "".join(f"{{i:09d}}\n" for i in range(start, min(n, start + 200000))).encode()
        if f.read(len(want)) != want:
            ok = False
            break
    if f.read(1):
        ok = False
print("big.txt intact" if ok else "big.txt DAMAGED")
"#
        ),
    )
    .expect("write check.py");

    // The server first, so the partial upload can be watched for.
    let up = local.div(&["storage", "ls"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up.stderr));
    let home = local.tmp.path().join("div-home");
    assert!(partial_uploads(&home).is_empty());

    let mut first = local
        .command(&["run", "--gpu", "cpu", "check.py"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("div starts");
    // Killed as soon as the server holds part of the file (a guard, not a measurement: a
    // client that ends first, or never starts the upload, fails the test).
    let guard = std::time::Instant::now();
    let seen = loop {
        let partial = partial_uploads(&home);
        if let Some((path, size)) = partial.into_iter().find(|(_, s)| *s < (LINES * 10) as u64) {
            first.kill().expect("SIGKILL");
            let _ = first.wait();
            break (path, size);
        }
        if let Some(status) = first.try_wait().expect("wait") {
            panic!("`div run` ended ({status}) before it was killed mid-upload");
        }
        assert!(
            guard.elapsed() < std::time::Duration::from_secs(300),
            "no partial upload appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    assert!(seen.1 > 0 && seen.1 < (LINES * 10) as u64, "{seen:?}");

    // The next run succeeds and reads exactly the file.
    let second = local.div_or_hang(&["run", "--gpu", "cpu", "check.py"]);
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}{}",
        text(&second.stdout),
        text(&second.stderr)
    );
    assert!(
        text(&second.stdout).contains("big.txt intact"),
        "{}",
        text(&second.stdout)
    );
    // And it left no partial upload behind.
    assert!(
        partial_uploads(&home).is_empty(),
        "{:?}",
        partial_uploads(&home)
    );
}

/// Issue 13: a run edits a data volume: it rewrites a file put earlier (longer), deletes
/// another and leaves links to `/etc/shadow` and `/etc` in its place. Afterwards `div storage
/// ls` and `get` report what the run left (the new size, the new bytes), never read through
/// the links, and putting the original files again works, as `cp` would: the file the run
/// edited and the link it left in place of another are replaced by the original bytes (the
/// run's edit never reached the server's blobs), never written through; a put through the
/// run's `etc -> /etc` link is refused, naming it.
#[test]
fn what_a_run_writes_to_a_volume_is_what_storage_ls_and_get_report() {
    let local = Local::new();
    let data = local.tmp.path().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("a.txt"), "hello\n").expect("write");
    std::fs::write(data.join("b.txt"), "bbbbbb\n").expect("write");
    let data_arg = data.to_string_lossy().into_owned();
    let put = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));
    std::fs::write(
        local.project().join("edit.py"),
        r#"import os
open("/mnt/ds/a.txt", "w").write("rewritten by the run, longer\n")
os.remove("/mnt/ds/b.txt")
os.symlink("/etc/shadow", "/mnt/ds/b.txt")
os.symlink("/etc", "/mnt/ds/etc")
"#,
    )
    .expect("write");
    let run = local.div(&["run", "--gpu", "cpu", "--volume", "ds", "edit.py"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));

    let ls = text(&local.div(&["storage", "ls", "ds"]).stdout);
    assert!(ls.contains("29 B   a.txt"), "{ls}");
    assert!(ls.contains("b.txt -> /etc/shadow"), "{ls}");
    let listed = text(&local.div(&["storage", "ls", "--json", "ds"]).stdout);
    assert!(!listed.contains("\"size\":6,"), "a stale size: {listed}");

    let got = local.tmp.path().join("got");
    let get = local.div(&["storage", "get", "ds", &got.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(
        std::fs::read_to_string(got.join("a.txt")).expect("a.txt"),
        "rewritten by the run, longer\n"
    );
    let shadow = std::fs::read("/etc/shadow").unwrap_or_default();
    for name in ["b.txt", "etc"] {
        let meta = std::fs::symlink_metadata(got.join(name)).expect("got it");
        assert!(meta.file_type().is_symlink(), "{name} was read through");
    }
    let one = local.tmp.path().join("one");
    let through = local.div(&["storage", "get", "ds/etc/shadow", &one.to_string_lossy()]);
    assert_ne!(through.status.code(), Some(0));
    assert!(
        std::fs::read(&one).map_or(true, |b| b != shadow),
        "read /etc/shadow through a link the run left"
    );

    // The originals again: written over what the run left, as `cp` would (the edited file
    // and the link in place of `b.txt`, which is replaced itself, never followed), and they
    // then hold their original bytes.
    let again = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let ls = text(&local.div(&["storage", "ls", "ds"]).stdout);
    assert!(listed_as(&ls, "6 B", "a.txt"), "{ls}");
    assert!(listed_as(&ls, "7 B", "b.txt"), "{ls}");
    assert_eq!(
        std::fs::read("/etc/shadow").unwrap_or_default(),
        shadow,
        "the put wrote through the link"
    );
    let back = local.tmp.path().join("back");
    let get = local.div(&["storage", "get", "ds/a.txt", &back.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read_to_string(&back).expect("a"), "hello\n");
    let back = local.tmp.path().join("back-b");
    let get = local.div(&["storage", "get", "ds/b.txt", &back.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read_to_string(&back).expect("b"), "bbbbbb\n");
    let elsewhere = local.div(&["storage", "put", "ds", &data_arg, "--to", "orig"]);
    assert_eq!(
        elsewhere.status.code(),
        Some(0),
        "{}",
        text(&elsewhere.stderr)
    );
    // Through `etc -> /etc`, a put never writes the host's /etc.
    let planted = local.tmp.path().join("planted");
    std::fs::create_dir_all(planted.join("etc")).expect("mkdir");
    std::fs::write(planted.join("etc/div-planted"), "x").expect("write");
    let via = local.div(&["storage", "put", "ds", &planted.to_string_lossy()]);
    assert_ne!(via.status.code(), Some(0));
    assert!(
        text(&via.stderr).contains(
            "`etc` in volume `ds` is a link (a run may have left it), where the put has a folder; a put never writes through a link"
        ),
        "{}",
        text(&via.stderr)
    );
    assert!(!std::path::Path::new("/etc/div-planted").exists());
}

/// A put replaces files, but never inside a committed code snapshot: `code/<id>` is what
/// every run of that id was given, so a put that would change or add a file there is
/// refused, naming the tree, and the next run of that code still gets it as shipped.
#[test]
fn a_put_never_changes_a_committed_code_snapshot() {
    let local = Local::new();
    let run = local.div(&["run", "--gpu", "cpu", "--", "python3 train.py"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let ls = text(&local.div(&["storage", "ls", "proj-code/code"]).stdout);
    let id = ls
        .split_whitespace()
        .find_map(|w| w.strip_prefix("code/")?.strip_suffix('/'))
        .expect("a code id")
        .to_owned();
    let changed = local.tmp.path().join("changed");
    std::fs::create_dir_all(&changed).expect("mkdir");
    std::fs::write(changed.join("train.py"), "print('rewritten')\n").expect("write");
    let to = format!("code/{id}");
    let put = local.div(&[
        "storage",
        "put",
        "proj-code",
        &changed.to_string_lossy(),
        "--to",
        &to,
    ]);
    assert_ne!(put.status.code(), Some(0), "{}", text(&put.stderr));
    assert!(
        text(&put.stderr).contains(&format!(
            "`code/{id}/train.py` in volume `proj-code` is in the committed tree `code/{id}`, which never changes"
        )),
        "{}",
        text(&put.stderr)
    );
    std::fs::write(changed.join("new.py"), "x = 1\n").expect("write");
    std::fs::remove_file(changed.join("train.py")).expect("rm");
    let add = local.div(&[
        "storage",
        "put",
        "proj-code",
        &changed.to_string_lossy(),
        "--to",
        &to,
    ]);
    assert_ne!(add.status.code(), Some(0), "{}", text(&add.stderr));
    let again = local.div(&["run", "--gpu", "cpu", "--", "python3 train.py; ls"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(
        text(&again.stdout),
        format!("{}hi\ntrain.py\n", crate::support::HOST_LINE)
    );
}

/// Whether `div storage ls`'s output `ls` has a line of `size` and `name`, however the
/// columns are padded.
fn listed_as(ls: &str, size: &str, name: &str) -> bool {
    ls.lines().any(|l| {
        l.strip_prefix(size)
            .is_some_and(|rest| rest.starts_with(' ') && rest.trim_start() == name)
    })
}

/// A file name that is not UTF-8 (Latin-1 `café.txt`, a folder named by the byte 0xff)
/// round-trips through `div storage put`, `ls` and `get` as it does through `div run`'s
/// shipping: escaped on the way (`div_ship::encode_path`), its own bytes on disk, in the
/// volume a run sees and in what `get` writes; `ls` shows each such byte as `\xNN`. Putting it
/// again after a run changed it replaces it.
#[test]
fn names_that_are_not_utf8_round_trip_through_storage() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let local = Local::new();
    let data = local.tmp.path().join("data");
    let cafe = OsStr::from_bytes(b"caf\xe9.txt");
    let odd = OsStr::from_bytes(b"d\xff");
    std::fs::create_dir_all(data.join(odd)).expect("mkdir");
    std::fs::write(data.join(cafe), "latin-1\n").expect("write");
    std::fs::write(data.join(odd).join("x.bin"), [0u8, 1, 2, 255]).expect("write");
    let data_arg = data.to_string_lossy().into_owned();
    let put = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));

    let ls = text(&local.div(&["storage", "ls", "-r", "ds"]).stdout);
    assert!(listed_as(&ls, "8 B", "caf\\xe9.txt"), "{ls}");
    assert!(listed_as(&ls, "4 B", "d\\xff/x.bin"), "{ls}");

    // The run sees the names' own bytes, and changes the file.
    let run = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--volume",
        "ds",
        "--",
        r#"cat "/mnt/ds/$(printf 'caf\351.txt')" && od -An -tx1 "/mnt/ds/$(printf 'd\377')/x.bin" && printf 'run\n' > "/mnt/ds/$(printf 'caf\351.txt')""#,
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let log = text(&run.stdout);
    assert!(log.contains("latin-1\n"), "{log}");
    assert!(log.contains("00 01 02 ff"), "{log}");

    let got = local.tmp.path().join("got");
    let get = local.div(&["storage", "get", "ds", &got.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read(got.join(cafe)).expect("café"), b"run\n");
    assert_eq!(
        std::fs::read(got.join(odd).join("x.bin")).expect("x.bin"),
        [0u8, 1, 2, 255]
    );
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(&got)
        .expect("read got")
        .map(|e| e.expect("entry").file_name().as_bytes().to_vec())
        .collect();
    names.sort();
    assert_eq!(names, [b"caf\xe9.txt".to_vec(), b"d\xff".to_vec()]);

    // The original again replaces what the run wrote.
    let again = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let back = local.tmp.path().join("back");
    let get = local.div(&["storage", "get", "ds", &back.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read(back.join(cafe)).expect("café"), b"latin-1\n");
}

/// Issue 13: two `div run` in one project at the same instant, each shipping new content
/// (the same new file, so the same code snapshot), never fail. One in 10 to 20 used to fail
/// with "could not commit the code … Directory not empty (os error 39)". Twenty pairs, each
/// with a new file, as `--detach` runs.
#[test]
fn two_div_runs_at_once_shipping_new_code_both_succeed() {
    const PAIRS: usize = 20;
    let local = Local::new();
    let up = local.div(&["storage", "ls"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up.stderr));
    let mut failures = Vec::new();
    for pair in 0..PAIRS {
        for file in 0..16 {
            std::fs::write(
                local.project().join(format!("new{file}.py")),
                format!("# pair {pair} file {file}\n").repeat(200),
            )
            .expect("write");
        }
        let children: Vec<_> = (0..2)
            .map(|_| {
                local
                    .command(&["run", "--detach", "--gpu", "cpu", "train.py"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("div starts")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("div ends");
            if out.status.code() != Some(0) {
                failures.push(format!("pair {pair}: {}", text(&out.stderr)));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed: {failures:#?}",
        failures.len(),
        2 * PAIRS
    );
}

/// A partial upload whose bytes are not the file's (what a crash of the server's machine can
/// leave, its last writes lost as zeros): the next `div run` resumes from it, the server
/// finds the whole does not hash to its name and discards it; `div run` then sends the whole
/// file again and succeeds, instead of failing once with "hash mismatch".
#[test]
fn a_damaged_partial_upload_is_sent_again_not_a_failed_run() {
    let local = Local::new();
    let first = local.div(&["run", "--gpu", "cpu", "train.py"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let content: Vec<u8> = (0..3_000_000_u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(local.project().join("data.bin"), &content).expect("write");
    let hash = blake3::hash(&content).to_hex().to_string();
    let partial = local
        .tmp
        .path()
        .join("div-home/blobs/proj-code/partial")
        .join(&hash);
    std::fs::create_dir_all(partial.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&partial, vec![0u8; 1_000_000]).expect("a damaged partial");
    std::fs::write(
        local.project().join("check.py"),
        "d = open('data.bin', 'rb').read()\nprint('intact' if d == bytes(i % 251 for i in range(3000000)) else 'DAMAGED')\n",
    )
    .expect("write");
    let second = local.div_or_hang(&["run", "--gpu", "cpu", "check.py"]);
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}{}",
        text(&second.stdout),
        text(&second.stderr)
    );
    assert!(
        text(&second.stdout).contains("intact"),
        "{}",
        text(&second.stdout)
    );
    assert!(!partial.exists(), "the damaged partial is still there");
}
