//! The local control plane of the settings' home: reached, started on demand (stopped first
//! when it runs with another GPU inventory than the one asked for), and asked after, for
//! `connect` and for `div server`, `div config` and `div dashboard`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use div_api::{ControlPlane, Endpoint, HttpControlPlane, ListRuns, Options, RunStatus};
use div_server::{LocalControlPlane, StartError};

use crate::exit_codes;
use crate::printer::Failure;
use crate::settings::Settings;

/// How long `div server stop` waits for it to go.
pub(crate) const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// This `div` executable, which serves the local control plane and supervises runs.
///
/// When its file is replaced while it runs (an upgrade, or cargo linking `target/debug/div`
/// again for another `cargo test`), Linux names the running executable `PATH (deleted)`;
/// the `div` now at `PATH` is then the one to start. With nothing there, it says so.
pub(crate) fn this_div() -> std::io::Result<PathBuf> {
    replaced_by(std::env::current_exe()?)
}

/// `exe` itself when it is there, else the file that took its place.
fn replaced_by(exe: PathBuf) -> std::io::Result<PathBuf> {
    if exe.exists() {
        return Ok(exe);
    }
    match exe.to_str().and_then(|e| e.strip_suffix(" (deleted)")) {
        Some(path) if Path::new(path).is_file() => Ok(PathBuf::from(path)),
        Some(path) => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "`{path}` was removed while this div ran, and nothing took its place; run the command again with the div you have now"
            ),
        )),
        None => Ok(exe),
    }
}

/// The local control plane of the settings' home, served by this `div`.
fn local(settings: &Settings) -> Result<LocalControlPlane, Failure> {
    let exe = this_div()
        .context("could not find the div executable to start the local control plane")
        .map_err(|e| Failure::new(exit_codes::UNREACHABLE, e))?;
    Ok(LocalControlPlane::new(&settings.home, exe).emulate_gpus(settings.emulate_gpus.clone()))
}

pub(crate) fn client(settings: &Settings, options: Options) -> Result<HttpControlPlane, Failure> {
    let socket = div_server::socket_path(&settings.home);
    HttpControlPlane::new(Endpoint::unix(socket), options)
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))
}

/// Whether the local control plane answers `/v1/health` now.
pub(crate) async fn answering(settings: &Settings) -> bool {
    match local(settings) {
        Ok(local) => local.answering().await,
        Err(_) => false,
    }
}

fn start_failure(e: StartError) -> Failure {
    let hint = e.hint();
    Failure::new(exit_codes::UNREACHABLE, e).hint(hint)
}

/// The local control plane, started in the background when it is not answering.
///
/// One question is asked of a running one, `/v1/health` within 300 ms: whether it answers,
/// and with which GPU inventory (three were asked before, on the way to every command).
pub(crate) async fn connect_local(
    settings: &Settings,
    options: Options,
) -> Result<Box<dyn ControlPlane>, Failure> {
    let local = local(settings)?;
    let probe = Options {
        deadline: Duration::from_millis(300),
        ..Options::default()
    };
    let health = match local.client(probe) {
        Ok(cp) => cp.health().await.ok(),
        Err(_) => None,
    };
    let going = match &health {
        Some(health) => !match_inventory(settings, health).await?,
        None => false,
    };
    let cp = if going {
        local
            .client(options)
            .map_err(|e| Failure::new(exit_codes::LOCAL, e))?
    } else {
        // None answered, or the one that did was stopped to start with the inventory asked
        // for: started (or found started by another `div` meanwhile).
        let cp = local
            .connect(options.clone())
            .await
            .map_err(start_failure)?;
        // One running but slower than the first look (a loaded machine) is found by
        // `connect` rather than started: its inventory is matched as the look's would have
        // been (`server_loop::a_server_on_another_inventory_is_restarted_when_no_run_is_going`
        // once ran its `div` on the old inventory so).
        let slow = match health {
            None if settings.emulate_gpus.is_some() => cp.health().await.ok(),
            _ => None,
        };
        match slow {
            Some(health) if match_inventory(settings, &health).await? => {
                local.connect(options).await.map_err(start_failure)?
            }
            _ => cp,
        }
    };
    Ok(Box::new(cp))
}

/// The GPU inventory of the local control plane running now, in words (`emulated GPUs
/// \`h100:8\``, `this machine's own GPUs`); `None` when none answers. Nothing is started.
pub(crate) async fn inventory_in_effect(settings: &Settings) -> Option<String> {
    if !answering(settings).await {
        return None;
    }
    let health = client(settings, Options::default())
        .ok()?
        .health()
        .await
        .ok()?;
    let in_effect = health.extra.get("emulated_gpus")?;
    Some(inventory_words(in_effect.as_str()))
}

/// Words for an inventory: `emulated GPUs h100:8`, or `this machine's own GPUs`.
fn inventory_words(gpus: Option<&str>) -> String {
    match gpus {
        Some(g) => format!("emulated GPUs `{g}`"),
        None => "this machine's own GPUs".to_owned(),
    }
}

/// A running local control plane whose GPU inventory (its `health`) is not the one asked for
/// (`DIVERGENT_EMULATE_GPUS`) is stopped, so that it starts again with the
/// one asked for, when no run is going on it; otherwise the failure says exactly that.
/// Whether it was stopped.
async fn match_inventory(settings: &Settings, health: &div_api::Health) -> Result<bool, Failure> {
    // A server that does not say which inventory it has is left as it is.
    let Some(in_effect) = health.extra.get("emulated_gpus") else {
        return Ok(false);
    };
    let in_effect = in_effect.as_str().map(str::to_owned);
    // Only a declared inventory is asked for: a `div` without `DIVERGENT_EMULATE_GPUS` uses
    // whichever server is running (its dashboard link, its runs) rather than restart it.
    let Some(text) = settings.emulate_gpus.as_deref() else {
        return Ok(false);
    };
    // A declaration the server cannot read is its to refuse, once started with it.
    let asked = Some(div_server::canonical_gpus(text).unwrap_or_else(|_| text.to_owned()));
    if asked == in_effect {
        return Ok(false);
    }
    let cp = client(settings, Options::default())?;
    let mut going = 0;
    for status in [RunStatus::Running, RunStatus::Queued] {
        let query = ListRuns {
            status: Some(status),
            limit: Some(1000),
            ..ListRuns::default()
        };
        let list = cp.list_runs(&query).await.map_err(|e| {
            Failure::new(exit_codes::CONTROL_PLANE, anyhow!(div_api::error_chain(&e)))
        })?;
        going += list.runs.len();
    }
    if going > 0 {
        let runs = if going == 1 { "1 run is" } else { "runs are" };
        return Err(Failure::new(
            exit_codes::REFUSED,
            anyhow!(
                "the local control plane is running with {}, not the {} asked for, and {runs} going on it, so it cannot be restarted with them now",
                inventory_words(in_effect.as_deref()),
                inventory_words(asked.as_deref()),
            ),
        )
        .hint(Some(match in_effect {
            Some(g) => format!(
                "wait for its runs to end (`div runs`) or stop them (`div stop RUN`), or use the inventory in effect with `DIVERGENT_EMULATE_GPUS={g}`"
            ),
            None => "wait for its runs to end (`div runs`) or stop them (`div stop RUN`), or use the inventory in effect by unsetting `DIVERGENT_EMULATE_GPUS`".to_owned(),
        })));
    }
    let Some(pid) = pid(&settings.home) else {
        return Ok(false);
    };
    if !signal_terminate(pid) {
        return Ok(false);
    }
    let deadline = Instant::now() + STOP_DEADLINE;
    while answering(settings).await && Instant::now() <= deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(true)
}

/// Start `<this exe> server run ARGS…` in its own session, its output in `home/server.log`,
/// and wait for it to answer.
pub(crate) async fn start_serving(settings: &Settings, args: Vec<String>) -> Result<u32, Failure> {
    local(settings)?
        .serve_args(args)
        .start()
        .await
        .map_err(start_failure)
}

/// The pid in `home/server.pid`, when there is one.
pub(crate) fn pid(home: &Path) -> Option<i32> {
    std::fs::read_to_string(home.join("server.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 0)
}

/// Whether a server holds the state directory's lock (`server.pid`, locked while it serves):
/// a server too slow to answer a look (a loaded machine) is still running.
pub(crate) fn held(home: &Path) -> bool {
    std::fs::File::open(home.join("server.pid"))
        .is_ok_and(|f| matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)))
}

/// SIGTERM to `pid` (which `pid()` already checked is positive).
pub(crate) fn signal_terminate(pid: i32) -> bool {
    use rustix::process::{Pid, Signal, kill_process};
    Pid::from_raw(pid).is_some_and(|pid| kill_process(pid, Signal::TERM).is_ok())
}

#[cfg(test)]
mod tests {
    use super::replaced_by;

    #[test]
    fn a_div_replaced_while_it_ran_is_the_file_now_in_its_place() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let div = tmp.path().join("div");
        std::fs::write(&div, "the new div").expect("write");
        let named = tmp.path().join("div (deleted)");
        assert_eq!(replaced_by(named).expect("the new div"), div);
        assert_eq!(replaced_by(div.clone()).expect("itself"), div);
    }

    #[test]
    fn a_div_removed_while_it_ran_says_so() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let named = tmp.path().join("div (deleted)");
        let said = replaced_by(named)
            .expect_err("nothing in its place")
            .to_string();
        assert!(said.contains("was removed while this div ran"), "{said}");
        assert!(
            said.ends_with("run the command again with the div you have now"),
            "{said}"
        );
    }

    /// A file truly named `… (deleted)` is that file.
    #[test]
    fn a_file_named_deleted_is_itself() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let named = tmp.path().join("div (deleted)");
        std::fs::write(&named, "a div").expect("write");
        assert_eq!(replaced_by(named.clone()).expect("itself"), named);
    }
}
