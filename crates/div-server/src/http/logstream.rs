//! `GET /v1/runs/{run}/log?offset=N&follow=true[&node=K]`: the log as frames
//! (`div_api::logframe`); with `node`, node K's log of a run placed on several nodes
//! (`RUN_DIR/nodes/K/log`, docs/slurm.md).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::error::HttpError;
use super::wire::blocking;
use crate::http::wire::{Resp, param, stream};
use crate::runs;
use crate::server::Server;

/// The response to `GET /v1/runs/{run}/log?offset=N&follow=true`: 404 for no such run, else
/// a stream fed by [`log_stream`].
pub(crate) async fn respond(
    server: &Arc<Server>,
    run: String,
    q: &[(String, String)],
) -> Result<Resp, HttpError> {
    let offset: u64 = param(q, "offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let follow = param(q, "follow").is_some_and(|f| f == "true" || f == "1");
    let node = match param(q, "node") {
        None => None,
        Some(k) => Some(k.parse::<u32>().map_err(|_| {
            HttpError::malformed(format!(
                "`node` is a node's rank (0, 1, …), not `{}`",
                k.escape_debug()
            ))
        })?),
    };
    let (r, _) = blocking(server, move |s| runs::get_run(s, &run)).await?;
    let run_dir = server.home.run_dir(&r.id);
    let log = match node {
        None => Log::Run(run_dir.join("log")),
        Some(k) => {
            let nodes = node_count(&run_dir.join("nodes"));
            // A run not placed yet (waiting for this server's inventory) has no nodes'
            // folders yet: its node's log is streamed once it appears, as a run's log is.
            if nodes == 0 && r.status.is_terminal() {
                return Err(HttpError::not_found(format!(
                    "run `{}` ran on one machine, not on several nodes: it has no node {k} (its log is `div logs {}`)",
                    r.name, r.name
                )));
            }
            if nodes > 0 && k >= nodes {
                let last = nodes - 1;
                return Err(HttpError::not_found(format!(
                    "run `{}` has {nodes} node{} (0–{last}): there is no node {k}",
                    r.name,
                    if nodes == 1 { "" } else { "s" },
                )));
            }
            Log::Node(run_dir, k)
        }
    };
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(log_stream(
        Arc::clone(server),
        r.id,
        log,
        offset,
        follow,
        tx,
    ));
    Ok(stream(div_api::logframe::MEDIA_TYPE, rx))
}

/// How many nodes a run has: its `nodes/0`, `nodes/1`, … folders, counted from 0 while they
/// are there (written by the Slurm executor when the run is placed); 0 for a run on this
/// machine.
fn node_count(nodes: &std::path::Path) -> u32 {
    let mut n = 0;
    while n < 100_000
        && std::fs::symlink_metadata(nodes.join(n.to_string())).is_ok_and(|m| m.is_dir())
    {
        n += 1;
    }
    n
}

/// Which log a stream reads.
#[derive(Clone)]
enum Log {
    /// The run's own (`RUN_DIR/log`).
    Run(std::path::PathBuf),
    /// Node K's (`RUN_DIR/nodes/K/log`), opened beneath the run's directory without following
    /// a link: the node's folder is the run's to write in.
    Node(std::path::PathBuf, u32),
}

impl Log {
    fn open(&self) -> std::io::Result<std::fs::File> {
        match self {
            Log::Run(path) => std::fs::File::open(path),
            Log::Node(run_dir, k) => {
                let f = div_runtime::sys::open_beneath(run_dir, &["nodes", &k.to_string(), "log"])?;
                // A FIFO or a device planted there is no log.
                if !f.metadata()?.is_file() {
                    return Err(std::io::Error::other("not a plain file"));
                }
                Ok(f)
            }
        }
    }
}

/// Sends the log from `offset` as frames; while following, polls the file and sends a beat
/// after each 5 s of silence, and the end frame once the run ended and every byte was sent.
///
/// While the file has unread bytes they are sent at once, up to 1 MiB a frame, without a
/// copy; only once caught up does it ask whether the run ended, and it waits 1 ms, doubling
/// up to 10 ms while nothing new arrives, or until the scheduler records a change.
async fn log_stream(
    server: Arc<Server>,
    id: String,
    path: Log,
    mut offset: u64,
    follow: bool,
    tx: mpsc::Sender<Bytes>,
) {
    const IDLE_MIN: Duration = Duration::from_millis(1);
    const IDLE_MAX: Duration = Duration::from_millis(10);
    let mut last_sent = tokio::time::Instant::now();
    let mut file: Option<std::fs::File> = None;
    let mut idle = IDLE_MIN;
    loop {
        let Some(progressed) = send_available(&path, &mut file, &mut offset, &tx).await else {
            return;
        };
        if progressed {
            last_sent = tokio::time::Instant::now();
            idle = IDLE_MIN;
            continue;
        }
        // Caught up. Whether the run had ended: then what the file holds now is all there is.
        // (Waiting for the scheduler's next change from before the look, so an end recorded
        // meanwhile still wakes this at once.)
        let changed = server.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let i2 = id.clone();
        let ended = match blocking(&server, move |s| runs::get_run(s, &i2)).await {
            Ok((r, _)) => r.status.is_terminal().then_some(r),
            Err(_) => return,
        };
        if let Some(run) = ended {
            loop {
                match send_available(&path, &mut file, &mut offset, &tx).await {
                    None => return,
                    Some(true) => {}
                    Some(false) => break,
                }
            }
            let _ = tx.send(div_api::logframe::encode_end(&run)).await;
            div_runtime::phases::mark(&server.home.run_dir(&id), "end-frame");
            return;
        }
        if !follow {
            let _ = tx.send(div_api::logframe::encode_tail(offset)).await;
            return;
        }
        // The supervisor wrote the run's end: have the scheduler record it now rather than
        // at its next tick, so the end frame follows the last byte at once.
        if tokio::fs::try_exists(server.home.run_dir(&id).join("end.json"))
            .await
            .unwrap_or(false)
        {
            server.kick.notify_one();
            // Look again soon: the end is recorded within a tick's work.
            idle = IDLE_MIN;
        }
        if last_sent.elapsed() >= Duration::from_secs(5) {
            if tx
                .send(Bytes::from_static(div_api::logframe::BEAT))
                .await
                .is_err()
            {
                return;
            }
            last_sent = tokio::time::Instant::now();
        }
        tokio::select! {
            () = tokio::time::sleep(idle) => {}
            () = &mut changed => {}
        }
        idle = (idle * 2).min(IDLE_MAX);
    }
}

/// Sends one read of the log from `offset` (at most 1 MiB) as a chunk frame: `Some(true)` if
/// bytes were sent, `Some(false)` if there were none (or no log yet), `None` if the client
/// is gone.
///
/// The read is std's, on a blocking thread, straight into the buffer that is sent (tokio's
/// `File` would read into its own buffer and copy); the file, kept open at its position,
/// travels to that thread and back.
async fn send_available(
    path: &Log,
    file: &mut Option<std::fs::File>,
    offset: &mut u64,
    tx: &mpsc::Sender<Bytes>,
) -> Option<bool> {
    const READ: u64 = 1 << 20;
    let open = file.take();
    let path = path.clone();
    let at = *offset;
    let read = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Seek};
        let mut f = match open {
            Some(f) => f,
            None => {
                let mut f = path.open().ok()?;
                f.seek(std::io::SeekFrom::Start(at)).ok()?;
                f
            }
        };
        let mut buf = Vec::with_capacity(READ as usize);
        let n = (&mut f).take(READ).read_to_end(&mut buf);
        Some((f, buf, n))
    })
    .await
    .ok()
    .flatten();
    let Some((f, buf, n)) = read else {
        return Some(false); // no log yet
    };
    match n {
        Ok(0) => {
            *file = Some(f);
            Some(false)
        }
        // Part of a failed read may be in `buf` and past the file's position: reopen at
        // `offset` next time.
        Err(_) => Some(false),
        Ok(n) => {
            *file = Some(f);
            let header = div_api::logframe::chunk_header(*offset, n as u64);
            if tx.send(Bytes::from(header)).await.is_err()
                || tx.send(Bytes::from(buf)).await.is_err()
            {
                return None;
            }
            *offset += n as u64;
            Some(true)
        }
    }
}
