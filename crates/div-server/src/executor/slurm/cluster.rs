//! What the cluster says: one Slurm command run with a deadline, `sinfo`'s partitions and
//! `squeue`'s jobs, read as div needs them.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a reading of `squeue` is trusted for runs it lists.
pub(super) const SQUEUE_TTL: Duration = Duration::from_millis(500);

/// How long one Slurm command may take: Slurm's clients retry an unreachable controller
/// (`MessageTimeout`) or a missing configuration (a minute), and the scheduler waits on them.
pub(super) const SLURM_DEADLINE: Duration = Duration::from_secs(15);

/// How long a server opening on Slurm keeps asking a controller that is there but slow
/// (each ask bounded by [`SLURM_DEADLINE`]) before it gives up starting: 120 s. A `div` waits
/// for a server still opening up to [`crate::local::START_DEADLINE`] ×
/// [`crate::local::OPENING_FACTOR`] (180 s), so the last ask ends inside that wait.
pub(super) const OPEN_PATIENCE: Duration = Duration::from_secs(120);

const _: () = assert!(
    OPEN_PATIENCE.as_secs() + SLURM_DEADLINE.as_secs()
        < crate::local::START_DEADLINE.as_secs() * crate::local::OPENING_FACTOR as u64
);

/// The error returned by [`slurm`]: what ran, and what it said or why it said nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SlurmError {
    #[error("`{program}` could not run: {source} (is Slurm installed here?)")]
    NotRun {
        program: String,
        source: std::io::Error,
    },
    #[error("`{program}` failed: {source}")]
    Failed {
        program: String,
        source: std::io::Error,
    },
    #[error(
        "`{program}` did not answer within {}s (is slurmctld up, and SLURM_CONF right?)",
        SLURM_DEADLINE.as_secs()
    )]
    NoAnswer { program: String },
    /// It ran and refused: its error lines, one line.
    #[error("`{program}` said: {said}")]
    Said { program: String, said: String },
}

impl SlurmError {
    /// Whether the controller was reached but slow: no answer within [`SLURM_DEADLINE`], or
    /// Slurm's own `Socket timed out` (a controller slower than its `MessageTimeout`). Asking
    /// again may be answered; a refusal, an unreachable controller or a missing Slurm will
    /// not change by asking again, and is said at once.
    pub(crate) fn is_slow(&self) -> bool {
        match self {
            SlurmError::NoAnswer { .. } => true,
            SlurmError::Said { said, .. } => said.contains("timed out"),
            SlurmError::NotRun { .. } | SlurmError::Failed { .. } => false,
        }
    }
}

/// `ask`'s answer, asked again while the controller is only slow ([`SlurmError::is_slow`])
/// and `patience` has not passed since the first ask; each slow answer is logged. The last
/// error is returned when it is not slow or patience has run out.
pub(super) fn patiently<T>(
    patience: Duration,
    mut ask: impl FnMut() -> Result<T, SlurmError>,
) -> Result<T, SlurmError> {
    let first = Instant::now();
    let mut asked = 1u32;
    loop {
        match ask() {
            Err(e) if e.is_slow() && first.elapsed() < patience => {
                tracing::warn!(
                    asked,
                    waited_s = first.elapsed().as_secs(),
                    patience_s = patience.as_secs(),
                    "Slurm is slow to answer ({e}); asking again"
                );
                asked += 1;
            }
            answer => return answer,
        }
    }
}

/// One Slurm command's output; the error says what ran and what it said. Killed past
/// [`SLURM_DEADLINE`].
pub(super) fn slurm(program: &str, args: &[String]) -> Result<String, SlurmError> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| SlurmError::NotRun {
            program: program.to_owned(),
            source,
        })?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(SLURM_DEADLINE) {
        Ok(Ok(out)) => out,
        Ok(Err(source)) => {
            return Err(SlurmError::Failed {
                program: program.to_owned(),
                source,
            });
        }
        Err(_) => {
            div_runtime::sys::kill(pid, libc::SIGKILL);
            return Err(SlurmError::NoAnswer {
                program: program.to_owned(),
            });
        }
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        let err = err
            .strip_prefix(&format!("{program}: error: "))
            .unwrap_or(err);
        Err(SlurmError::Said {
            program: program.to_owned(),
            said: err.lines().collect::<Vec<_>>().join("; "),
        })
    }
}

/// A partition as `sinfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionInfo {
    pub(crate) name: String,
    pub(crate) nodes: u32,
    pub(crate) cpus_per_node: u32,
    pub(crate) gres_per_node: u32,
    pub(crate) states: String,
}

/// Parses `sinfo -h -o '%P|%D|%c|%G|%T'` (one line per partition and node state); the GRES
/// count is that of `gres` (`gpu:8`, `gpu:h100:8(S:0-1)`).
pub(crate) fn parse_sinfo(text: &str, gres: &str) -> Vec<PartitionInfo> {
    let mut parts: Vec<PartitionInfo> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        let [name, nodes, cpus, g, state] = f.as_slice() else {
            continue;
        };
        let name = name.trim_end_matches('*').to_owned();
        let nodes: u32 = nodes.trim().parse().unwrap_or(0);
        let cpus: u32 = cpus.trim().trim_end_matches('+').parse().unwrap_or(0);
        let count = g
            .split(',')
            .filter_map(|item| {
                let item = item.split('(').next().unwrap_or("");
                let mut it = item.split(':');
                (it.next() == Some(gres))
                    .then(|| it.next_back().and_then(|n| n.parse::<u32>().ok()))?
            })
            .sum::<u32>();
        match parts.iter_mut().find(|p| p.name == name) {
            Some(p) => {
                p.nodes = p.nodes.saturating_add(nodes);
                p.cpus_per_node = p.cpus_per_node.max(cpus);
                p.gres_per_node = p.gres_per_node.max(count);
                p.states.push_str(&format!(", {nodes} {state}"));
            }
            None => parts.push(PartitionInfo {
                name,
                nodes,
                cpus_per_node: cpus,
                gres_per_node: count,
                states: format!("{nodes} {state}"),
            }),
        }
    }
    parts
}

pub(super) fn sinfo(gres: &str) -> Result<Vec<PartitionInfo>, SlurmError> {
    slurm(
        "sinfo",
        &["-h".into(), "-o".into(), "%P|%D|%c|%G|%T".into()],
    )
    .map(|t| parse_sinfo(&t, gres))
}

pub(super) fn summary(parts: &[PartitionInfo], gres: &str) -> String {
    parts
        .iter()
        .map(|p| {
            format!(
                "{}: {} nodes × {} cpus, {gres}:{} ({})",
                p.name, p.nodes, p.cpus_per_node, p.gres_per_node, p.states
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A job's state and reason, as `squeue` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobState {
    pub(crate) state: String,
    pub(crate) reason: String,
}

/// Parses `squeue -h -o '%i|%T|%r'`.
pub(crate) fn parse_squeue(text: &str) -> BTreeMap<u32, JobState> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.trim().splitn(3, '|');
            let id = f.next()?.trim().parse().ok()?;
            let state = f.next()?.trim().to_owned();
            let reason = f.next().unwrap_or("").trim().to_owned();
            Some((id, JobState { state, reason }))
        })
        .collect()
}

#[derive(Debug, Default)]
pub(super) struct Queue {
    pub(super) read: Option<Instant>,
    pub(super) jobs: BTreeMap<u32, JobState>,
}
