//! Following a run's log, and the `logs` and `stop` actions.
//!
//! The log reaches the sink as [`Event::Log`]s of the stream's own `Bytes` (no copy). When
//! the stream has nothing ready, the sink first gets an empty [`Event::Log`]: the log is caught
//! up for now, so a sink that buffers the log (the CLI writing to a pipe) flushes it then,
//! and a followed log still shows promptly.

use std::task::Poll;

use bytes::Bytes;
use div_api::{ApiError, ControlPlane, LogEvent, LogStream, Run, RunStatus};

use crate::error::RunError;
use crate::event::{Event, EventSink};
use crate::outage::Patience;

/// Hand every byte of `run`'s log from `offset` to `sink`, following it until the run ends;
/// returns the run as it ended. The stream resumes across dropped connections itself; a
/// control plane that does not answer for longer is waited for as long as the run may still
/// be going ([`Patience`]).
pub(crate) async fn follow_log(
    cp: &dyn ControlPlane,
    run: &Run,
    offset: u64,
    sink: &mut dyn EventSink,
) -> Result<Run, RunError> {
    follow_node_log(cp, run, None, offset, sink).await
}

/// [`follow_log`] of node `node`'s log (`Some`) or the run's (`None`).
async fn follow_node_log(
    cp: &dyn ControlPlane,
    run: &Run,
    node: Option<u32>,
    offset: u64,
    sink: &mut dyn EventSink,
) -> Result<Run, RunError> {
    let api = |e| RunError::api("follow the log", e);
    let mut patience = Patience::new(run);
    let mut offset = offset;
    'ask: loop {
        let mut stream = match open(cp, &run.id, node, offset, true).await {
            Ok(stream) => stream,
            Err(e) if e.is_unavailable() => {
                patience.wait(e, sink).await?;
                continue;
            }
            Err(e) => return Err(api(e)),
        };
        patience.answered(sink);
        while let Some(event) = next_or_idle(&mut *stream, sink).await {
            match event {
                Ok(LogEvent::Chunk { offset: at, data }) => {
                    offset = at + data.len() as u64;
                    sink.event(Event::Log(data));
                }
                Ok(LogEvent::End(run)) => {
                    sink.event(Event::Ended(run.clone()));
                    return Ok(*run);
                }
                // A following stream should not stop before the end; ask again from where
                // it stopped.
                Ok(LogEvent::Tail { .. }) => {}
                // It could not resume within its deadline: the control plane is away.
                Err(e) if e.is_unavailable() => {
                    patience.wait(e, sink).await?;
                    continue 'ask;
                }
                Err(e) => return Err(api(e)),
            }
        }
        let now = match cp.get_run(&run.id).await {
            Ok(now) => now,
            Err(e) if e.is_unavailable() => {
                patience.wait(e, sink).await?;
                continue;
            }
            Err(e) => return Err(api(e)),
        };
        patience.answered(sink);
        patience.heard(&now);
        // The run's size is its log's; a node's log is read until the stream's end frame.
        if now.status.is_terminal() && node.is_none() && offset >= now.log_bytes {
            sink.event(Event::Ended(Box::new(now.clone())));
            return Ok(now);
        }
    }
}

/// How often a queued run is asked again whether it has started: 500 ms.
const QUEUE_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// While `run` waits in the queue and its control plane says why (the run's `queue`), says so
/// to `sink` each time the reason changes, then that it started; returns the run as last
/// heard of. A control plane that does not say why is not asked again: its log stream waits
/// for the start itself. One that stops answering is waited for as [`follow_log`] waits.
pub(crate) async fn wait_in_queue(
    cp: &dyn ControlPlane,
    run: &Run,
    sink: &mut dyn EventSink,
) -> Result<Run, RunError> {
    if run.status != RunStatus::Queued || run.queue().is_none() {
        return Ok(run.clone());
    }
    let mut patience = Patience::new(run);
    let mut now = run.clone();
    let mut said: Option<String> = None;
    while now.status == RunStatus::Queued {
        if let Some(queue) = now.queue()
            && said.as_deref() != Some(queue.reason.as_str())
        {
            sink.event(Event::Queued {
                reason: queue.reason.clone(),
            });
            said = Some(queue.reason);
        }
        tokio::time::sleep(QUEUE_POLL).await;
        now = loop {
            match cp.get_run(&run.id).await {
                Ok(now) => break now,
                Err(e) if e.is_unavailable() => patience.wait(e, sink).await?,
                Err(e) => return Err(RunError::api("ask whether the run has started", e)),
            }
        };
        patience.answered(sink);
        patience.heard(&now);
    }
    // It may have started and ended between two looks: it started if it has a start.
    if said.is_some() && now.started_at.is_some() {
        sink.event(Event::Started {
            run: Box::new(now.clone()),
        });
    }
    Ok(now)
}

/// The run's log (`node` `None`) or node `node`'s.
async fn open(
    cp: &dyn ControlPlane,
    run: &str,
    node: Option<u32>,
    offset: u64,
    follow: bool,
) -> Result<Box<dyn LogStream>, ApiError> {
    match node {
        None => cp.log(run, offset, follow).await,
        Some(k) => cp.node_log(run, k, offset, follow).await,
    }
}

/// The stream's next event; when it is not ready at once, an empty [`Event::Log`] goes to
/// `sink` first (the log is caught up for now: time to flush).
async fn next_or_idle(
    stream: &mut dyn LogStream,
    sink: &mut dyn EventSink,
) -> Option<Result<LogEvent, ApiError>> {
    let mut next = stream.next();
    let ready = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx))).await;
    match ready {
        Poll::Ready(event) => event,
        Poll::Pending => {
            sink.event(Event::Log(Bytes::new()));
            next.await
        }
    }
}

/// What `logs` was asked.
#[derive(Debug, Clone)]
pub struct LogsOptions {
    /// The run, by name or id.
    pub run: String,
    /// Follow a running run until it ends, rather than stopping at what there is now.
    pub follow: bool,
    /// One node's log (its rank) of a run placed on several nodes, rather than the run's.
    pub node: Option<u32>,
}

/// Hand a run's log from its start to `sink`; with `follow`, until it ends. Returns the run
/// as it ended, or as it is now.
pub async fn logs(
    cp: &dyn ControlPlane,
    options: &LogsOptions,
    sink: &mut dyn EventSink,
) -> Result<Run, RunError> {
    let mut run = find_run(cp, &options.run).await?;
    if options.follow {
        run = wait_in_queue(cp, &run, sink).await?;
    }
    let api = |e| RunError::api("read the log", e);
    if options.follow || run.status.is_terminal() {
        return follow_node_log(cp, &run, options.node, 0, sink).await;
    }
    let mut stream = open(cp, &run.id, options.node, 0, false)
        .await
        .map_err(api)?;
    while let Some(event) = next_or_idle(&mut *stream, sink).await {
        match event.map_err(api)? {
            LogEvent::Chunk { data, .. } => sink.event(Event::Log(data)),
            LogEvent::End(run) => {
                sink.event(Event::Ended(run.clone()));
                return Ok(*run);
            }
            LogEvent::Tail { .. } => break,
        }
    }
    let now = cp.get_run(&run.id).await.map_err(api)?;
    sink.event(Event::Ended(Box::new(now.clone())));
    Ok(now)
}

/// How `stop` went.
#[derive(Debug, Clone)]
pub enum StopOutcome {
    /// It was going and is now stopped: the run as it ended.
    Stopped(Run),
    /// It had already ended: the run, unchanged.
    AlreadyEnded(Run),
}

/// Stop a run and wait for it to end; stopping one that has ended says so.
pub async fn stop(cp: &dyn ControlPlane, run: &str) -> Result<StopOutcome, RunError> {
    let before = find_run(cp, run).await?;
    if before.status.is_terminal() {
        return Ok(StopOutcome::AlreadyEnded(before));
    }
    let after = cp
        .stop_run(&before.id)
        .await
        .map_err(|e| RunError::api("stop the run", e))?;
    if after.status.is_terminal() {
        return Ok(StopOutcome::Stopped(after));
    }
    // The stop was asked; the log's end says how the run ended.
    let mut discard = |_: Event| {};
    let ended = follow_log(cp, &after, after.log_bytes, &mut discard).await?;
    Ok(StopOutcome::Stopped(ended))
}

pub(crate) async fn find_run(cp: &dyn ControlPlane, run: &str) -> Result<Run, RunError> {
    check_run_ref(run)?;
    cp.get_run(run).await.map_err(|e| {
        if e.is_not_found() {
            RunError::RunNotFound(run.to_string())
        } else {
            RunError::api("find the run", e)
        }
    })
}

/// Refuses a word that cannot name a run before it reaches the control plane, where `''`
/// would read as the list of runs and `a/b` as another path.
pub(crate) fn check_run_ref(run: &str) -> Result<(), RunError> {
    let why = if run.is_empty() {
        "it is empty"
    } else if run.trim().is_empty() {
        "it is only spaces"
    } else if run.chars().any(char::is_whitespace) {
        "run names and ids hold no spaces"
    } else if run.chars().any(char::is_control) {
        "run names and ids hold no control characters"
    } else if run.contains(['/', '?', '#', '%', '\\']) {
        "run names and ids hold no `/`, `?`, `#`, `%` or `\\`"
    } else if run == "." || run == ".." {
        "`.` and `..` are not names"
    } else {
        return Ok(());
    };
    Err(RunError::BadRunRef {
        typed: run.to_string(),
        why,
    })
}
