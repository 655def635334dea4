//! The dashboard in a real browser: Debian's `chromium`, headless, driven over WebDriver
//! (`chromedriver`) with fantoccini, against the real `div` and its local control plane: what
//! goes through `div`. The pages the server serves (the runs' list, a run's page, the models,
//! the telemetry tab, the pages' security, a team's dashboard over TLS) are tested where they
//! are served, in div-server's `dashboard` tests.
//!
//! Without chromium and chromedriver these tests say so loudly on stderr and pass, unless
//! `DIV_REQUIRE_BROWSER=1` (CI sets it) makes that a failure. (The screenshots in
//! `docs/dashboard/` are taken by div-server's `dashboard` tests.)
//!
//! By subject: `command.rs` (`div dashboard` and the browser the tests drive), `replay.rs`
//! (a run page's Place it again, run by a shell and read back by `div run`), `bench.rs` (the
//! list with many runs stored, which `cargo xtask bench dashboard` runs); here, the project
//! they place runs from. The browser, the project's files and the HTTP written by hand are
//! div-test-support's `dashboard` (shared with div-server's dashboard tests).

mod bench;
mod command;
mod replay;

use div_test_support::dashboard::VISION;
use serde_json::Value;

use crate::support::Local;

/// The project `vision` on the local control plane, with two emulated H100s.
fn vision() -> Local {
    Local::new("vision", VISION).emulating("h100:2")
}

impl Local {
    /// `div args…`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.div(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "div {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The dashboard's URL, with a fresh token.
    fn dashboard(&self) -> String {
        let url = self.ok(&["dashboard"]);
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert!(url.contains("/?token="), "{url}");
        url
    }

    /// The run called `name`, as `div runs --json --all` shows it.
    fn run_json(&self, name: &str) -> Value {
        let runs: Value =
            serde_json::from_str(&self.ok(&["runs", "--json", "--all"])).expect("json");
        runs.as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no run `{name}` in {runs}"))
    }
}

/// A `div` that writes the arguments it was given to `$DIV_ARGS`, each ended by a NUL.
const FAKE_DIV: &str = "#!/bin/sh\nprintf '%s\\0' \"$@\" > \"$DIV_ARGS\"\n";
