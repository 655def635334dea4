//! What div-core tells its caller while it works.

use bytes::Bytes;
use div_api::Run;

/// Something that happened, handed to an [`EventSink`] as it happens.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// What is about to be shipped: [`shipping_line`] prints it.
    Shipping {
        files: u64,
        bytes: u64,
        volume: String,
        path: String,
    },
    /// The folder is in no git repository, so what is shipped is every file but the skip
    /// list (`div_ship::SKIPPED_NAMES`), `files` of them: [`outside_repository_line`] prints
    /// it, before [`Event::Shipping`].
    OutsideRepository { files: u64 },
    /// Something worth a person's attention that stops nothing, like a large shipment.
    Warning {
        message: String,
        hint: Option<String>,
    },
    /// What is shipped is being listed and hashed: `hashed` counts the bytes read so far
    /// (files the hash cache knows are not read), until [`Step::Listed`].
    Hashing {
        hashed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    },
    /// The upload began: this many bytes in this many blobs will be sent (the volume already
    /// has the rest).
    UploadStarted { bytes: u64, blobs: u64 },
    /// `sent` of the upload's bytes have been sent.
    UploadProgress { sent: u64 },
    /// Every blob arrived and the tree was committed.
    UploadFinished,
    /// A volume the command (or an `--env` value) names was made: [`new_volume_line_for`]
    /// prints it.
    VolumeCreated {
        name: String,
        /// The `--env` key whose value names it, when the command itself does not.
        env: Option<String>,
    },
    /// The request that places the run is about to be sent: from here on the run may exist
    /// even if no answer arrives, so a caller interrupted now should wait for [`Event::Placed`]
    /// (or say the run may have been placed) rather than say nothing was.
    Placing,
    /// The control plane pulls the run's image (before anything is shipped): layers, bytes,
    /// then ready.
    Pulling {
        image: String,
        event: div_api::PullEvent,
    },
    /// The run was placed; `header` is its header line
    /// (`run-k4t9  H100  $4.95/h  $5.00 buys 1h 0m`).
    Placed { run: Box<Run>, header: String },
    /// The run waits in the queue, and the control plane says why: `reason` reads
    /// `waiting for 2 cores, 1 run ahead`. Sent again each time the reason changes.
    Queued { reason: String },
    /// The run that waited in the queue has started (sent only after [`Event::Queued`]).
    Started { run: Box<Run> },
    /// Bytes of the run's log, in order, each exactly once.
    Log(Bytes),
    /// While following `run`, its control plane stopped answering (`cause`: the last error,
    /// on one line); the follower waits for it, for `at_most` more: as long as the run may
    /// still be going (its latest end, its stop grace, a margin for its end record). Sent once
    /// for each time the control plane goes away.
    ControlPlaneAway {
        run: String,
        cause: String,
        at_most: std::time::Duration,
    },
    /// The control plane answers again, `after` it was found away: the follower goes on from
    /// the last byte it handed on.
    ControlPlaneBack {
        run: String,
        after: std::time::Duration,
    },
    /// The run ended (or, for `logs` without following, where it stands now).
    Ended(Box<Run>),
    /// A step of `div run` that prints nothing was done; for timings (printers show nothing).
    Step(Step),
}

/// The steps of `div run` before anything is printed, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// The words typed were checked (entrypoint, project, volume name, telemetry file).
    Validated,
    /// What is shipped was listed and hashed (at once when nothing is shipped).
    Listed,
}

/// Where div-core's [`Event`]s go. Any `FnMut(Event) + Send` closure is one.
pub trait EventSink: Send {
    /// Take one event.
    fn event(&mut self, event: Event);
}

impl<F: FnMut(Event) + Send> EventSink for F {
    fn event(&mut self, event: Event) {
        self(event)
    }
}

/// `14 files, 38.2 KB → very-cool-classifier-code/code/9f31c2ab`.
pub fn shipping_line(files: u64, bytes: u64, volume: &str, path: &str) -> String {
    let noun = if files == 1 { "file" } else { "files" };
    format!(
        "{files} {noun}, {} → {volume}/{path}",
        div_spec::format_bytes(bytes)
    )
}

/// `not a git repository: shipping every file but the skip list (12 files)`.
pub fn outside_repository_line(files: u64) -> String {
    let noun = if files == 1 { "file" } else { "files" };
    format!("not a git repository: shipping every file but the skip list ({files} {noun})")
}

/// `new volume mask-models, for the /mnt/mask-models the command names`.
pub fn new_volume_line(name: &str) -> String {
    new_volume_line_for(name, None)
}

/// [`new_volume_line`], or for a volume only an `--env` value names,
/// `new volume ckpt-vol, for the /mnt/ckpt-vol that --env CKPT_DIR names`.
pub fn new_volume_line_for(name: &str, env: Option<&str>) -> String {
    match env {
        None => format!("new volume {name}, for the /mnt/{name} the command names"),
        Some(key) => format!("new volume {name}, for the /mnt/{name} that --env {key} names"),
    }
}
