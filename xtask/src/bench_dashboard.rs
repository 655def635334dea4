//! `cargo xtask bench dashboard [--stored N]`: the dashboard with N runs stored (100,000
//! unless told): the list's first page (goal ≤ 50 ms) and the page interactive in headless
//! Chromium (goal ≤ 1 s). The measuring is the ignored test
//! `dashboard::bench::bench_the_list_with_many_runs_stored` in div-cli's tests (it drives the browser
//! over WebDriver), built in release and run here.

use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

pub(crate) fn run(rest: &[String]) -> Result<()> {
    let mut stored: u64 = 100_000;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--stored" => {
                stored = it
                    .next()
                    .context("`--stored` needs a value")?
                    .parse()
                    .context("--stored is a count")?;
            }
            other => bail!("unknown flag `{other}`; expected --stored"),
        }
    }
    let status = Command::new("cargo")
        .args([
            "test",
            "--release",
            "-p",
            "div-cli",
            "--test",
            "it",
            "dashboard::bench::bench_the_list_with_many_runs_stored",
            "--",
            "--ignored",
            "--exact",
            "--nocapture",
        ])
        .env("DIV_BENCH_STORED", stored.to_string())
        .env("DIV_REQUIRE_BROWSER", "1")
        .status()
        .context("running cargo test")?;
    ensure!(
        status.success(),
        "the dashboard benchmark failed ({status})"
    );
    Ok(())
}
