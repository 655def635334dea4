//! Reaching the local control plane from any program, and starting it on demand the way `div`
//! does: [`LocalControlPlane`].
//!
//! The control plane runs as its own background process (`<div> server run`, in its own
//! process group, its output appended to `home/server.log`), so it outlives the program that
//! started it, and every program on the machine that names the same home shares it. Nothing
//! here reads the environment: the home, the `div` executable and the emulated GPUs are the
//! caller's to say.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use div_api::{ApiError, Endpoint, HttpControlPlane, Options};

/// How long a local control plane started on demand has to answer: 30 s. The wait ends the
/// moment it answers (a fraction of a second on an idle machine); the deadline only bounds
/// one that never does. Its start runs a few probes as processes (bubblewrap, the overlay,
/// the run's own disk), and on a machine loaded far past its cores (two test suites and
/// their runs on two cores) it took over 10 s. One still going at the deadline gets one last
/// look as long as the deadline itself (a loaded machine answered a first request in over
/// 2 s). One still opening its state directory (its socket not yet bound, seen past a minute
/// beside the fault suite's thread and fork bombs) is waited for while it is going, up to
/// [`OPENING_FACTOR`] times the deadline: it is starting, not failing.
pub const START_DEADLINE: Duration = Duration::from_secs(30);
/// How many deadlines a server still opening (going, its socket not yet bound) is waited for.
pub const OPENING_FACTOR: u32 = 6;
/// How long each look at a control plane being started may take: a slow answer is an answer.
const STARTING_PROBE: Duration = Duration::from_secs(2);

/// The local control plane of one state directory, and how to start it.
///
/// ```no_run
/// # async fn demo() -> Result<(), div_server::StartError> {
/// use div_server::LocalControlPlane;
/// let local = LocalControlPlane::new("/home/me/.local/share/div", "/usr/local/bin/div");
/// let cp = local.connect(div_api::Options::default()).await?;
/// # let _cp = cp;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LocalControlPlane {
    home: PathBuf,
    div: PathBuf,
    emulate_gpus: Option<String>,
    start_deadline: Duration,
    serve_args: Vec<String>,
}

/// Why the local control plane could not be reached or started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state directory could not be made.
    #[error("could not make the state directory `{}`", path.display())]
    Home {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `home/server.log` could not be opened for the server's output.
    #[error("could not open `{}`", path.display())]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The `div` executable could not be started.
    #[error("could not start the local control plane with `{}`", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// It started but did not answer in time.
    #[error("the local control plane did not answer within {}s of starting", deadline.as_secs())]
    NotAnswering {
        deadline: Duration,
        /// Whether it had begun to listen on its socket (else it was still opening its
        /// state directory, or gone).
        listening: bool,
        log: PathBuf,
        /// The last non-empty line of its log, when there is one.
        last_line: Option<String>,
    },
    /// A client for its socket could not be made.
    #[error(transparent)]
    Client(#[from] ApiError),
}

impl StartError {
    /// What to look at next, when there is something to say.
    pub fn hint(&self) -> Option<String> {
        match self {
            StartError::NotAnswering {
                log,
                last_line,
                listening,
                ..
            } => Some(format!(
                "{}its log is `{}`{}",
                if *listening {
                    ""
                } else {
                    "it never began to listen on its socket; "
                },
                log.display(),
                last_line
                    .as_ref()
                    .map(|l| format!("; it ends: {l}"))
                    .unwrap_or_default()
            )),
            StartError::Spawn { .. } => {
                Some("name the `div` executable that serves the local control plane".into())
            }
            _ => None,
        }
    }
}

impl LocalControlPlane {
    /// The local control plane keeping its state in `home`, served (when it has to be started)
    /// by `div`: a `div` executable, run as `div server run`.
    pub fn new(home: impl Into<PathBuf>, div: impl Into<PathBuf>) -> LocalControlPlane {
        LocalControlPlane {
            home: home.into(),
            div: div.into(),
            emulate_gpus: None,
            start_deadline: START_DEADLINE,
            serve_args: Vec::new(),
        }
    }

    /// More arguments for the `div server run` a start here runs: `--listen ADDR`,
    /// `--tls-cert FILE`, `--tls-key FILE` (docs/team.md).
    pub fn serve_args(mut self, args: Vec<String>) -> LocalControlPlane {
        self.serve_args = args;
        self
    }

    /// Emulate these GPUs (`h100:8`) in a control plane started here, rather than find them
    /// with `nvidia-smi` (`DIVERGENT_EMULATE_GPUS` for the `div` it starts).
    pub fn emulate_gpus(mut self, gpus: Option<String>) -> LocalControlPlane {
        self.emulate_gpus = gpus;
        self
    }

    /// How long one started here has to answer ([`START_DEADLINE`] unless told).
    pub fn start_deadline(mut self, deadline: Duration) -> LocalControlPlane {
        self.start_deadline = deadline;
        self
    }

    /// The state directory.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The socket it answers on: [`crate::socket_path`] of the home.
    pub fn socket(&self) -> PathBuf {
        crate::socket_path(&self.home)
    }

    /// Where a control plane started here writes its output.
    pub fn log_path(&self) -> PathBuf {
        self.home.join("server.log")
    }

    /// A client for its socket; nothing is started or asked.
    pub fn client(&self, options: Options) -> Result<HttpControlPlane, ApiError> {
        HttpControlPlane::new(Endpoint::unix(self.socket()), options)
    }

    /// Whether it answers `/v1/health` now (within 300 ms).
    pub async fn answering(&self) -> bool {
        self.answering_within(Duration::from_millis(300)).await
    }

    /// Whether it answers `/v1/health` within `deadline`.
    async fn answering_within(&self, deadline: Duration) -> bool {
        let probe = Options {
            deadline,
            ..Options::default()
        };
        match self.client(probe) {
            Ok(cp) => cp.health().await.is_ok(),
            Err(_) => false,
        }
    }

    /// A client for it, started first when it is not answering.
    pub async fn connect(&self, options: Options) -> Result<HttpControlPlane, StartError> {
        if !self.answering().await {
            self.start().await?;
        }
        Ok(self.client(options)?)
    }

    /// Whether a socket was bound at [`Self::socket`] at `since` or later (one left by an
    /// earlier server is older).
    fn bound_since(&self, since: std::time::SystemTime) -> bool {
        std::fs::symlink_metadata(self.socket())
            .and_then(|m| m.modified())
            .is_ok_and(|bound| bound >= since.checked_sub(Duration::from_secs(1)).unwrap_or(since))
    }

    /// Starts `div server run` in the background, in its own process group (a Ctrl-C meant for
    /// the caller does not reach it), its output appended to [`Self::log_path`], and waits
    /// until it answers. Returns its pid. Another program may start one at the same moment:
    /// whichever answers first serves both.
    pub async fn start(&self) -> Result<u32, StartError> {
        std::fs::create_dir_all(&self.home).map_err(|source| StartError::Home {
            path: self.home.clone(),
            source,
        })?;
        let log_path = self.log_path();
        let log_error = |source| StartError::Log {
            path: log_path.clone(),
            source,
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(log_error)?;
        let mut command = std::process::Command::new(&self.div);
        command
            .args(["server", "run"])
            .args(&self.serve_args)
            .env("DIVERGENT_HOME", &self.home)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(log_error)?)
            .stderr(log);
        if let Some(gpus) = &self.emulate_gpus {
            command.env("DIVERGENT_EMULATE_GPUS", gpus);
        }
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().map_err(|source| StartError::Spawn {
            program: self.div.clone(),
            source,
        })?;
        let pid = child.id();
        let spawned = std::time::SystemTime::now();
        let started = Instant::now();
        let deadline = started + self.start_deadline;
        let opening_limit = started + self.start_deadline * OPENING_FACTOR;
        loop {
            if self.answering_within(STARTING_PROBE).await {
                return Ok(pid);
            }
            // Reap it if it exited (another one may have won the socket, and that one
            // answering is as good); an error here only means there is nothing to reap.
            let going = matches!(child.try_wait(), Ok(None));
            let listening = self.bound_since(spawned);
            let now = Instant::now();
            // Still opening its state directory (trying the sandbox, the overlay and the
            // runs' disks by starting programs): slow on a loaded machine, not failed.
            let opening = going && !listening && now < opening_limit;
            if now > deadline && !opening {
                // Still going: a machine loaded far past its cores can be slower than each
                // look to answer a first request (seen beside a fork bomb). A slow answer is
                // an answer: one last look, as long as the deadline itself.
                if going && self.answering_within(self.start_deadline).await {
                    return Ok(pid);
                }
                let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
                let last_line = tail
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_owned);
                return Err(StartError::NotAnswering {
                    deadline: self.start_deadline,
                    listening: self.bound_since(spawned),
                    log: log_path,
                    last_line,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Ends the stand-in whose pid is in `home/fake.pid` when dropped, however the test ends.
    struct Ended(PathBuf);

    impl Drop for Ended {
        fn drop(&mut self) {
            let pid = std::fs::read_to_string(self.0.join("fake.pid")).unwrap_or_default();
            if let Some(pid) = pid
                .trim()
                .parse()
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }

    /// A stand-in for `div` that `LocalControlPlane::start` runs as `div server run`: a Python
    /// program that writes its pid to `home/fake.pid`, then serves `/v1/health` on the state
    /// directory's socket `opening` seconds after it starts, each answer `delay` seconds after
    /// its request (each connection on a thread of its own), or never answers at all.
    fn fake_div(dir: &Path, opening: f64, delay: Option<f64>) -> PathBuf {
        let pid = "import os, socket, threading, time\n\
                   home = os.environ['DIVERGENT_HOME']\n\
                   open(os.path.join(home, 'fake.pid'), 'w').write(str(os.getpid()))\n";
        let serve = match delay {
            Some(delay) => format!(
                "time.sleep({opening})\n\
                 s = socket.socket(socket.AF_UNIX)\n\
                 s.bind(os.path.join(home, 'server.sock'))\n\
                 s.listen(64)\n\
                 def answer(c):\n\
                 \x20   c.recv(65536)\n\
                 \x20   time.sleep({delay})\n\
                 \x20   body = b'{{\"ok\": true, \"version\": \"0.0.0\"}}'\n\
                 \x20   try:\n\
                 \x20       c.sendall(b'HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: %d\\r\\nconnection: close\\r\\n\\r\\n' % len(body) + body)\n\
                 \x20   except OSError:\n\
                 \x20       pass\n\
                 \x20   c.close()\n\
                 while True:\n\
                 \x20   c, _ = s.accept()\n\
                 \x20   threading.Thread(target=answer, args=(c,), daemon=True).start()\n"
            ),
            None => "time.sleep(600)\n".to_owned(),
        };
        let program = dir.join("serve.py");
        std::fs::write(&program, format!("{pid}{serve}")).unwrap();
        let div = dir.join("div");
        std::fs::write(
            &div,
            format!("#!/bin/sh\nexec python3 {}\n", program.display()),
        )
        .unwrap();
        std::fs::set_permissions(&div, std::fs::Permissions::from_mode(0o755)).unwrap();
        div
    }

    /// A [`LocalControlPlane`] whose `div` is [`fake_div`]`(opening, delay)`, given
    /// `deadline_s` to answer; its folder and the stand-in's end go with the last two.
    fn stand_in(
        opening: f64,
        delay: Option<f64>,
        deadline_s: u64,
    ) -> (LocalControlPlane, tempfile::TempDir, Ended) {
        let dir = tempfile::tempdir().unwrap();
        let div = fake_div(dir.path(), opening, delay);
        let ended = Ended(dir.path().join("home"));
        let local = LocalControlPlane::new(dir.path().join("home"), &div)
            .start_deadline(Duration::from_secs(deadline_s));
        (local, dir, ended)
    }

    #[tokio::test]
    async fn a_control_plane_slower_than_each_look_is_still_taken_once_it_answers() {
        let (local, _dir, _ended) = stand_in(0.0, Some(2.5), 4);
        // Each look gives up at 2 s; the answer comes at 2.5 s: only the last look, as long
        // as the deadline, hears it.
        local.start().await.expect("answered, slowly");
    }

    #[tokio::test]
    async fn a_control_plane_that_never_answers_is_an_error_naming_its_log() {
        let (local, _dir, _ended) = stand_in(0.0, None, 1);
        let err = local.start().await.expect_err("never answers");
        assert!(
            err.to_string()
                .contains("did not answer within 1s of starting"),
            "{err}"
        );
        assert!(matches!(err, StartError::NotAnswering { .. }), "{err:?}");
        let hint = err.hint().unwrap_or_default();
        assert!(hint.contains("home/server.log"), "{hint}");
        assert!(
            hint.starts_with("it never began to listen on its socket; "),
            "{hint}"
        );
    }

    #[tokio::test]
    async fn a_control_plane_still_opening_past_the_deadline_is_waited_for_while_it_goes() {
        // Its socket is bound 2.5 s after it starts (its probes slow on a loaded machine),
        // past the 1 s deadline and within six of them; it then answers at once.
        let (local, _dir, _ended) = stand_in(2.5, Some(0.0), 1);
        local.start().await.expect("answered once it listened");
    }

    #[tokio::test]
    async fn a_socket_left_by_an_earlier_server_is_not_taken_for_listening() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let local = LocalControlPlane::new(&home, "/nonexistent");
        let earlier = std::os::unix::net::UnixListener::bind(local.socket()).unwrap();
        drop(earlier);
        let bound = std::time::SystemTime::now();
        assert!(local.bound_since(bound));
        assert!(!local.bound_since(bound + Duration::from_secs(5)));
    }
}
