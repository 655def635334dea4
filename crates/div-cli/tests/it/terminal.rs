//! What `div` does to and with a terminal: colours by the conventions (`NO_COLOR`,
//! `CLICOLOR_FORCE`), and the secret prompt, on a real pseudo-terminal made by `script(1)`,
//! which never leaves echo off.

use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::DIV;

/// `div` in an empty home with only `vars` set; nothing here reaches a control plane.
fn div(tmp: &tempfile::TempDir, args: &[&str], vars: &[(&str, &str)]) -> std::process::Command {
    let mut c = std::process::Command::new(DIV);
    c.args(args)
        .current_dir(tmp.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", tmp.path().join("home"))
        .env("DIVERGENT_HOME", tmp.path().join("div-home"))
        .envs(vars.iter().copied());
    c
}

/// The stderr of `div secrets set 1BAD` (refused before anything is reached), with `vars`.
fn refusal_stderr(vars: &[(&str, &str)]) -> String {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = div(&tmp, &["secrets", "set", "1BAD"], vars)
        .output()
        .expect("div runs");
    assert_eq!(out.status.code(), Some(200), "{out:?}");
    String::from_utf8(out.stderr).expect("utf-8")
}

#[test]
fn clicolor_force_colours_a_pipe() {
    let err = refusal_stderr(&[("CLICOLOR_FORCE", "1")]);
    assert!(
        err.starts_with("\x1b[1m\x1b[31merror\x1b[0m: "),
        "a bold red `error`: {err:?}"
    );
}

#[test]
fn no_color_wins_over_clicolor_force() {
    let err = refusal_stderr(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(!err.contains('\x1b'), "no escape at all: {err:?}");
}

#[test]
fn a_pipe_is_not_coloured_unless_forced() {
    let err = refusal_stderr(&[]);
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(!err.contains('\x1b'), "no escape at all: {err:?}");
}

/// A shell on a fresh pseudo-terminal (`script -q -e -c`), running `div args…`, then saying
/// how it exited and how the terminal is set (`stty -a`). The shell traps SIGINT so that a
/// Ctrl-C meant for `div` does not end it before `stty` speaks. Returns the running `script`.
fn on_a_terminal(tmp: &tempfile::TempDir, args: &str) -> tokio::process::Child {
    on_a_terminal_with(tmp, args, &[])
}

fn on_a_terminal_with(
    tmp: &tempfile::TempDir,
    args: &str,
    vars: &[(&str, &str)],
) -> tokio::process::Child {
    let line = format!("trap : INT; '{DIV}' {args}; echo \"div exited $?\"; stty -a");
    let mut c = tokio::process::Command::new("script");
    c.args(["-q", "-e", "-c", &line, "/dev/null"])
        .current_dir(tmp.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SHELL", "/bin/bash")
        .env("TERM", "dumb")
        .env("HOME", tmp.path().join("home"))
        .env("XDG_CONFIG_HOME", tmp.path().join("config"))
        .env("DIVERGENT_HOME", tmp.path().join("div-home"))
        .env("NO_COLOR", "1")
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c.spawn().expect("script(1) starts (util-linux)")
}

/// Reads the terminal's output until it contains `needle`; everything read so far.
async fn read_until(out: &mut tokio::process::ChildStdout, seen: &mut String, needle: &str) {
    let mut buf = [0u8; 4096];
    while !seen.contains(needle) {
        let n = out.read(&mut buf).await.expect("reads the terminal");
        assert!(n > 0, "the terminal closed before `{needle}`: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

/// Whether `stty -a` printed `echo` (on) rather than `-echo` (off).
fn echo_is_on(stty: &str) -> bool {
    let words: Vec<&str> = stty
        .split(|c: char| c.is_whitespace() || c == ';')
        .collect();
    assert!(
        words.contains(&"echo") || words.contains(&"-echo"),
        "stty -a says nothing of echo: {stty:?}"
    );
    words.contains(&"echo")
}

#[tokio::test]
async fn ctrl_c_at_the_secret_prompt_leaves_echo_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut script = on_a_terminal(&tmp, "secrets set HF_TOKEN");
    let mut out = script.stdout.take().expect("piped");
    let mut input = script.stdin.take().expect("piped");
    let mut seen = String::new();
    let work = async {
        read_until(&mut out, &mut seen, "value for HF_TOKEN (not shown): ").await;
        // Half a secret typed, then Ctrl-C: the terminal's interrupt character.
        input.write_all(b"hunt\x03").await.expect("types");
        input.flush().await.expect("types");
        read_until(&mut out, &mut seen, "div exited").await;
        let mut rest = String::new();
        out.read_to_string(&mut rest).await.expect("reads");
        seen.push_str(&rest);
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), work)
        .await
        .unwrap_or_else(|_| panic!("the prompt never ended: {seen:?}"));
    drop(input);
    let status = script.wait().await.expect("script ends");
    assert!(status.success(), "{status:?}: {seen:?}");
    assert!(seen.contains("div exited 208"), "interrupted: {seen:?}");
    assert!(
        !seen.contains("hunt"),
        "what was typed was never shown: {seen:?}"
    );
    let stty = &seen[seen.find("div exited").unwrap_or(0)..];
    assert!(echo_is_on(stty), "echo is back on after Ctrl-C: {stty:?}");
}

#[tokio::test]
async fn a_token_typed_at_the_prompt_is_not_shown_and_echo_comes_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut script = on_a_terminal(&tmp, "login --api-url https://api.example.com");
    let mut out = script.stdout.take().expect("piped");
    let mut input = script.stdin.take().expect("piped");
    let mut seen = String::new();
    let work = async {
        read_until(&mut out, &mut seen, "token (not shown): ").await;
        input.write_all(b"hunter2\r").await.expect("types");
        input.flush().await.expect("types");
        read_until(&mut out, &mut seen, "div exited").await;
        let mut rest = String::new();
        out.read_to_string(&mut rest).await.expect("reads");
        seen.push_str(&rest);
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), work)
        .await
        .unwrap_or_else(|_| panic!("the prompt never ended: {seen:?}"));
    drop(input);
    script.wait().await.expect("script ends");
    assert!(seen.contains("div exited 0"), "logged in: {seen:?}");
    assert!(
        !seen.contains("hunter2"),
        "the token was never shown: {seen:?}"
    );
    let stty = &seen[seen.find("div exited").unwrap_or(0)..];
    assert!(echo_is_on(stty), "echo is back on: {stty:?}");
    let config = std::fs::read_to_string(tmp.path().join("config/div/config.json"))
        .expect("div login wrote the user config");
    assert!(config.contains("\"token\": \"hunter2\""), "{config}");
}

#[tokio::test]
async fn ctrl_c_after_the_prompt_still_ends_div_while_the_value_is_sent() {
    // A control plane that takes the value and never answers.
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("PUT"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(3600)),
        )
        .mount(&server)
        .await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let uri = server.uri();
    let mut script = on_a_terminal_with(
        &tmp,
        "secrets set HF_TOKEN",
        &[
            ("DIVERGENT_API_URL", uri.as_str()),
            ("DIVERGENT_API_TIMEOUT", "3600"),
        ],
    );
    let mut out = script.stdout.take().expect("piped");
    let mut input = script.stdin.take().expect("piped");
    let mut seen = String::new();
    let work = async {
        read_until(&mut out, &mut seen, "value for HF_TOKEN (not shown): ").await;
        input.write_all(b"hunter2\r").await.expect("types");
        input.flush().await.expect("types");
        // The value is on its way: the control plane has the request and sits on it.
        while server
            .received_requests()
            .await
            .unwrap_or_default()
            .is_empty()
        {
            tokio::task::yield_now().await;
        }
        input.write_all(b"\x03").await.expect("types");
        input.flush().await.expect("types");
        read_until(&mut out, &mut seen, "div exited").await;
        let mut rest = String::new();
        out.read_to_string(&mut rest).await.expect("reads");
        seen.push_str(&rest);
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), work)
        .await
        .unwrap_or_else(|_| panic!("Ctrl-C did not end div: {seen:?}"));
    drop(input);
    script.wait().await.expect("script ends");
    assert!(seen.contains("div exited 208"), "interrupted: {seen:?}");
    let stty = &seen[seen.find("div exited").unwrap_or(0)..];
    assert!(echo_is_on(stty), "echo is on: {stty:?}");
}
