//! `GET /v1/runs/{run}/log?offset=N&follow=true`: the log as frames (`div_api::logframe`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::HttpError;
use crate::http::wire::{Resp, param, stream};
use crate::runs;
use crate::server::{Server, blocking};

/// The response to `GET /v1/runs/{run}/log?offset=N&follow=true`: 404 for no such run, else
/// a stream fed by [`log_stream`].
pub(crate) async fn respond(
    server: &Arc<Server>,
    run: String,
    q: &[(String, String)],
) -> Result<Resp, HttpError> {
    let offset: u64 = param(q, "offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let follow = param(q, "follow").is_some_and(|f| f == "true" || f == "1");
    let (r, _) = blocking(server, move |s| runs::get_run(s, &run)).await?;
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(log_stream(Arc::clone(server), r.id, offset, follow, tx));
    Ok(stream(div_api::logframe::MEDIA_TYPE, rx))
}

/// Sends the log from `offset` as frames; while following, polls the file and sends a beat
/// after each 5 s of silence, and the end frame once the run ended and every byte was sent.
///
/// While the file has unread bytes they are sent at once, up to 1 MiB a frame, without a
/// copy; only once caught up does it ask whether the run ended, and it waits 1 ms, doubling
/// up to 10 ms while nothing new arrives.
async fn log_stream(
    server: Arc<Server>,
    id: String,
    mut offset: u64,
    follow: bool,
    tx: mpsc::Sender<Bytes>,
) {
    const IDLE_MIN: Duration = Duration::from_millis(1);
    const IDLE_MAX: Duration = Duration::from_millis(10);
    let path = server.run_dir(&id).join("log");
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
            return;
        }
        if !follow {
            let _ = tx.send(div_api::logframe::encode_tail(offset)).await;
            return;
        }
        // The supervisor wrote the run's end: have the scheduler record it now rather than
        // at its next tick, so the end frame follows the last byte at once.
        if tokio::fs::try_exists(server.run_dir(&id).join("end.json"))
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
        tokio::time::sleep(idle).await;
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
    path: &std::path::Path,
    file: &mut Option<std::fs::File>,
    offset: &mut u64,
    tx: &mpsc::Sender<Bytes>,
) -> Option<bool> {
    const READ: u64 = 1 << 20;
    let open = file.take();
    let path = path.to_owned();
    let at = *offset;
    let read = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Seek};
        let mut f = match open {
            Some(f) => f,
            None => {
                let mut f = std::fs::File::open(&path).ok()?;
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
