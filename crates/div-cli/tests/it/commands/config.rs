//! `div config`, `div login`, and what `div generate` writes: completions and man pages.

use serde_json::json;

use crate::support::{API_TIMEOUT, DIV, Done, World};

#[tokio::test]
async fn config_says_where_each_setting_came_from_and_never_shows_the_token() {
    let world = World::new().await;
    let output = world
        .command(&["config"])
        .env("DIVERGENT_TOKEN", "s3cret-token")
        .env("DIVERGENT_PROJECT", "other")
        .output()
        .await
        .expect("div runs");
    let done = Done::from_output(output, &world);
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(!done.stdout.contains("s3cret"), "{}", done.stdout);
    let line = |name: &str| {
        done.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(line("api_url"), "api_url [API] (DIVERGENT_API_URL)");
    assert_eq!(line("token"), "token <redacted> (DIVERGENT_TOKEN)");
    assert_eq!(line("project"), "project other (DIVERGENT_PROJECT)");
    assert_eq!(
        line("api_timeout"),
        format!("api_timeout {API_TIMEOUT}s (DIVERGENT_API_TIMEOUT)")
    );
}

#[tokio::test]
async fn login_stores_the_token_owner_only_and_config_reads_it_back() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new().await;
    let done = world
        .div_with_stdin(
            &["login", "--api-url", "https://api.example.com"],
            "tok-123\n",
        )
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let file = world.tmp.path().join("home/.config/div/config.json");
    let meta = std::fs::metadata(&file).expect("the config file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert_eq!(
        stored,
        json!({"api_url": "https://api.example.com", "token": "tok-123"})
    );
    assert!(!done.stderr.contains("tok-123"));

    let output = world
        .command(&["config", "--json"])
        .env_remove("DIVERGENT_API_URL")
        .output()
        .await
        .expect("div runs");
    let config = Done::from_output(output, &world);
    assert!(!config.stdout.contains("tok-123"), "{}", config.stdout);
    let v: serde_json::Value = serde_json::from_str(&config.stdout).expect("json");
    assert_eq!(v[0]["value"], "https://api.example.com");
    assert_eq!(
        v[1],
        json!({"name": "token", "value": "<redacted>", "from": "[TMP]/home/.config/div/config.json"})
    );

    let bad = world
        .div_with_stdin(&["login", "--api-url", "ftp://x"], "t\n")
        .await;
    assert_eq!(bad.code, 200, "{}", bad.stderr);
}

#[test]
fn completions_and_the_man_page_generate() {
    for what in ["bash", "zsh", "fish", "man"] {
        let output = std::process::Command::new(DIV)
            .args(["__generate", what])
            .output()
            .expect("div runs");
        assert!(output.status.success(), "{what}");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.len() > 500, "{what}: {text}");
        for command in ["run", "storage", "eval", "evals", "models"] {
            assert!(text.contains(command), "{what} mentions `{command}`");
        }
    }
}

#[test]
fn a_man_page_for_every_command_goes_into_a_folder() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let dir = tmp.path().join("man1");
    let output = std::process::Command::new(DIV)
        .args(["__generate", "man", "--dir"])
        .arg(&dir)
        .output()
        .expect("div runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .expect("the folder was made")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    pages.sort();
    for page in [
        "div.1",
        "div-run.1",
        "div-storage-put.1",
        "div-secrets-set.1",
        "div-server-start.1",
        "div-eval.1",
        "div-evals.1",
        "div-models-push.1",
        "div-models-rm.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} in {pages:?}");
    }
    assert!(
        !pages.iter().any(|p| p.contains("__")),
        "hidden commands get no page: {pages:?}"
    );
    let run = std::fs::read_to_string(dir.join("div-run.1")).expect("div-run.1");
    assert!(run.contains(r"\-\-max\-spend"), "{run}");

    let refused = std::process::Command::new(DIV)
        .args(["__generate", "bash", "--dir"])
        .arg(&dir)
        .output()
        .expect("div runs");
    assert_eq!(refused.status.code(), Some(200));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("`--dir` goes with `man` only; completions are one file, on stdout")
    );
}
