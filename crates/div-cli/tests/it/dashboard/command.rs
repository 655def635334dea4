//! `div dashboard` itself (a fresh link each time, and when no browser can open), and the
//! browser the tests drive, which leaves no process behind.

use std::process::Command;
use std::time::Duration;

use div_test_support::dashboard::{origin, processes_naming, with_browser};
use div_test_support::wait_until_async;

use super::vision;
use crate::support::DIV;

/// Ending a browser ends every process it started: chromedriver's whole process group, and
/// anything naming the browser's own folder (chromium's crash handlers leave the group).
#[test]
fn a_browser_leaves_no_process_behind_when_it_ends() {
    with_browser(|browser| async move {
        browser.goto("about:blank").await;
        let group = browser.group().to_string();
        let own = browser.profile().as_os_str().as_encoded_bytes().to_vec();
        let started: Vec<String> = processes_naming(&own);
        assert!(
            !started.is_empty(),
            "chromium names its own folder while it runs"
        );
        drop(browser);
        wait_until_async(
            "nothing of chromium left",
            Duration::from_secs(30),
            || async {
                let in_group = Command::new("pgrep")
                    .args(["-g", &group])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                    .unwrap_or_default();
                let naming = processes_naming(&own);
                if in_group.is_empty() && naming.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "left behind: group {group}: [{in_group}], naming the profile: {naming:?}"
                    ))
                }
            },
        )
        .await;
    });
}

#[test]
fn div_dashboard_prints_a_fresh_link_each_time_and_says_when_no_browser_can_open() {
    let local = vision();
    let first = local.dashboard();
    let second = local.dashboard();
    // The same listener, a fresh token each time; stdout holds the URL alone.
    assert_eq!(origin(&first), origin(&second));
    assert_ne!(first, second);
    let token = second.split("token=").nth(1).unwrap_or_default();
    assert_eq!(token.len(), 64, "{second}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{second}");
    assert!(!second.contains('\n'), "{second}");

    // `--open` where no xdg-open is on the PATH: the link still comes, and stderr says why
    // no browser opened.
    let empty = local.tmp.path().join("no-programs");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let out = Command::new(DIV)
        .args(["dashboard", "--open"])
        .current_dir(local.tmp.path().join("vision"))
        .env_clear()
        .env("PATH", &empty)
        .env("HOME", local.tmp.path().join("home"))
        .env("DIVERGENT_HOME", local.tmp.path().join("div-home"))
        .env("NO_COLOR", "1")
        .output()
        .expect("div runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&origin(&first)) && stdout.lines().count() == 1,
        "{stdout}"
    );
    assert!(stderr.contains("`xdg-open` is not installed"), "{stderr}");

    // With a remote control plane configured, it refuses, saying why.
    let out = Command::new(DIV)
        .args(["dashboard"])
        .current_dir(local.tmp.path().join("vision"))
        .env_clear()
        .env("HOME", local.tmp.path().join("home"))
        .env("DIVERGENT_HOME", local.tmp.path().join("div-home"))
        .env("DIVERGENT_API_URL", "https://api.example.com")
        .env("NO_COLOR", "1")
        .output()
        .expect("div runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("is a remote one"), "{stderr}");
}
