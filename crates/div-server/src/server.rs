//! [`Server`]: the context every handler and the scheduler share (state directory, store,
//! inventory, executor, the lock on runs' status), and how it is opened at start.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use div_api::RunQueue;

use crate::executor::Executor;
use crate::home::Home;
use crate::images::Images;
use crate::inventory::Inventory;
use crate::store::Store;
use crate::{ServerError, ServerOptions};
use div_runtime::{cgroup, sandbox};

/// Everything the server shares between requests and the scheduler.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) home: Home,
    pub(crate) store: Store,
    pub(crate) inventory: Inventory,
    pub(crate) sandboxed: bool,
    /// Whether a run's `/workspace` is an overlay over its committed code rather than a copy.
    pub(crate) overlay: bool,
    /// Where runs' memory and CPU cgroups go (found once, at start).
    pub(crate) cgroups: cgroup::Plan,
    /// Where runs run: it starts, stops and watches their supervisors.
    pub(crate) executor: Box<dyn Executor>,
    /// The image cache and what the default image means here.
    pub(crate) images: Images,
    /// Serializes changes of runs' status between handlers and the scheduler.
    lock: Mutex<()>,
    /// Why each queued run waits, as the scheduler's last pass found it (run id to reason).
    queue: Mutex<HashMap<String, RunQueue>>,
    /// The last warning said on the server's log, so that one read on every pass is said once.
    warned: Mutex<String>,
    /// Wakes the scheduler before its next tick: a run was placed, or one has ended (its
    /// supervisor exited).
    pub(crate) kick: Arc<tokio::sync::Notify>,
    /// Wakes whoever waits on a run's status (log streams following a run) after a pass of
    /// the scheduler changed some run's.
    pub(crate) changed: tokio::sync::Notify,
    /// Blocking work in flight that may write the store (handlers', the scheduler's, the
    /// retention rule's): a stopping server lets it end before it closes the store.
    busy: std::sync::atomic::AtomicUsize,
    /// Trees being written as their blobs arrive (`volumes::stage`).
    pub(crate) stages: crate::volumes::Stages,
    /// `div-init` in the state directory (`div_runtime::init`): every run's first process. `None`
    /// where it could not be laid there (said on the server's log): runs then start under
    /// bubblewrap's own first process, as before it.
    pub(crate) init: Option<PathBuf>,
    /// Whether each run gets a filesystem of its own for its writable places (`scratch`):
    /// a root server whose loop devices can be mounted.
    pub(crate) scratch: bool,
}

/// The state directory's lock file, `home/server.pid`: held while the server runs, so two
/// never share a home.
#[derive(Debug)]
pub(crate) struct HomeLock {
    _file: fs::File,
}

/// A server's hold on its home: its lock, let go only after its store is closed, on every way
/// a server ends. `serve` closes the store itself when it stops (after the work in flight),
/// and then this closes nothing. When `serve`'s future is dropped instead (its task aborted,
/// as a test's kill does), blocking work that outlives it still holds the server: without
/// this, its store would stay open past the lock, beside the next server's on the same home,
/// and be closed (its log copied in and deleted) under it.
pub(crate) struct HomeHeld {
    server: Arc<Server>,
    _lock: HomeLock,
}

impl HomeHeld {
    pub(crate) fn new(server: Arc<Server>, lock: HomeLock) -> HomeHeld {
        HomeHeld {
            server,
            _lock: lock,
        }
    }
}

impl Drop for HomeHeld {
    fn drop(&mut self) {
        // Before the fields drop, the lock among them.
        if let Err(e) = self.server.store.close() {
            tracing::warn!("the state database did not close cleanly: {e}");
        }
    }
}

impl Server {
    /// Prepares the state directory (0700, locked against a second server), finds the
    /// inventory and the sandbox, and opens the store.
    pub(crate) fn open(options: &ServerOptions) -> Result<(Server, HomeLock), ServerError> {
        let home = options.home.clone();
        let home_err = |source| ServerError::Home {
            path: home.clone(),
            source,
        };
        fs::create_dir_all(&home).map_err(home_err)?;
        fs::set_permissions(&home, fs::Permissions::from_mode(0o700)).map_err(home_err)?;
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(home.join("server.pid"))
            .map_err(home_err)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(ServerError::AlreadyRunning(home.clone()));
            }
            Err(fs::TryLockError::Error(e)) => return Err(home_err(e)),
        }
        lock.set_len(0).map_err(home_err)?;
        std::io::Write::write_all(&mut &lock, format!("{}\n", std::process::id()).as_bytes())
            .map_err(home_err)?;

        let cgroups = cgroup::detect();
        let chosen = crate::executor::Choice::read(&home)?;
        let local = chosen.is_local();
        let (inventory, executor) = chosen.open(options, &home, &cgroups)?;
        // What this machine lets runs have, each found by starting a program (bubblewrap, an
        // overlay under it, `mkfs` and a loop mount) and laid into the state directory (div-init):
        // tried side by side, while the store and the image cache open, so the start waits for
        // the slowest alone. On a machine loaded far past its cores each spawn can take seconds,
        // and the client waits for the server to answer (`local::START_DEADLINE`).
        let (sandboxed, overlay, scratch, init, store, images) = std::thread::scope(|scope| {
            let sandbox = scope.spawn(|| {
                let sandboxed = match options.sandbox {
                    crate::SandboxMode::None => false,
                    crate::SandboxMode::Auto | crate::SandboxMode::Bwrap => sandbox::bwrap_works(),
                };
                // Runs' `/workspace` as overlays where this machine lets them be (see
                // `workspace`); made with the sandbox's own first flags, known once it works.
                let overlay = sandboxed
                    && local
                    && div_runtime::workspace::overlay_works(&home, &sandbox::bwrap_head());
                (sandboxed, overlay)
            });
            // Runs' own disks, where this machine can loop-mount them (used only sandboxed).
            let disks = scope.spawn(|| {
                local
                    && options.sandbox != crate::SandboxMode::None
                    && div_runtime::scratch::works(&home)
            });
            let init = scope.spawn(|| div_runtime::init::install(&home));
            // A lost state.db beside earlier runs or volumes refuses the start
            // (ServerError::StateLost).
            let store = crate::store::open_with_history(&home);
            let images = Images::open(&home, options.images.clone());
            let (sandboxed, overlay) = sandbox.join().unwrap_or((false, false));
            let scratch = sandboxed && disks.join().unwrap_or(false);
            let init = init
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("laying it in panicked")));
            (sandboxed, overlay, scratch, init, store, images)
        });
        if options.sandbox == crate::SandboxMode::Bwrap && !sandboxed {
            return Err(ServerError::NoSandbox);
        }
        let store = store?;
        for name in ["state.db", "state.db-wal", "state.db-shm"] {
            let _ = fs::set_permissions(home.join(name), fs::Permissions::from_mode(0o600));
        }
        let images = images?;
        let mut server = Server::new(home, store, inventory, sandboxed, cgroups, executor, images);
        server.overlay = overlay;
        server.scratch = scratch;
        if scratch {
            // The first runs' disks formatted ahead of them.
            let settings = crate::settings::Settings::read(&server.home).unwrap_or_default();
            let size = div_runtime::scratch::space(&server.home).map_or(0, |(size, _)| size);
            crate::disk_pool::refill_pool(
                server.home.join(crate::disk_pool::DISK_POOL),
                div_runtime::scratch::wanted(settings.run_disk_gib, size),
            );
        }
        match init {
            Ok(path) => server.init = Some(path),
            Err(e) => server.warn_once(&format!(
                "div-init could not be laid into the state directory ({e}); a stop's SIGTERM will not wait for every process of a run"
            )),
        }
        Ok((server, HomeLock { _file: lock }))
    }

    /// A server over an opened store and a chosen executor (tests give it a fake one).
    pub(crate) fn new(
        home: PathBuf,
        store: Store,
        inventory: Inventory,
        sandboxed: bool,
        cgroups: cgroup::Plan,
        executor: Box<dyn Executor>,
        images: Images,
    ) -> Server {
        Server {
            home: Home::new(home),
            store,
            inventory,
            sandboxed,
            overlay: false,
            cgroups,
            executor,
            images,
            lock: Mutex::new(()),
            queue: Mutex::default(),
            warned: Mutex::default(),
            kick: Arc::new(tokio::sync::Notify::new()),
            changed: tokio::sync::Notify::new(),
            busy: std::sync::atomic::AtomicUsize::new(0),
            stages: Default::default(),
            init: None,
            scratch: false,
        }
    }

    /// How much blocking work ([`spawn_work`]) is in flight.
    pub(crate) fn busy(&self) -> usize {
        self.busy.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Held while a run's status changes.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Says `warning` on the server's log (its stderr), unless it was the last one said.
    pub(crate) fn warn_once(&self, warning: &str) {
        let mut last = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if *last != warning {
            // The server's stderr is its log (`server.log` when `div` started it).
            let _ = std::io::Write::write_all(
                &mut std::io::stderr().lock(),
                format!("warning: {warning}\n").as_bytes(),
            );
            warning.clone_into(&mut last);
        }
    }

    /// Why each queued run waits, as the scheduler's last pass found it.
    pub(crate) fn queue(&self) -> MutexGuard<'_, HashMap<String, RunQueue>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Held while a run's status changes (and while the secrets are checked together).
    pub(crate) fn status_lock(&self) -> &Mutex<()> {
        &self.lock
    }
    /// The org's usage this month, when a limit is set. A settings file that cannot be read is
    /// said once on the server's log and taken as no limit.
    pub(crate) fn org_usage(&self) -> Result<Option<crate::org::Usage>, crate::store::StoreError> {
        match crate::org::usage(&self.home, &self.store) {
            Ok(usage) => Ok(usage),
            Err(crate::org::UsageError::Settings(e)) => {
                self.warn_once(&e.to_string());
                Ok(None)
            }
            Err(crate::org::UsageError::Store(e)) => Err(e),
        }
    }

    /// The runs queued or running.
    pub(crate) fn going_runs(
        &self,
    ) -> Result<Vec<crate::store::RunRecord>, crate::store::StoreError> {
        let mut going = self.store.runs_with_status(div_api::RunStatus::Queued)?;
        going.extend(self.store.runs_with_status(div_api::RunStatus::Running)?);
        Ok(going)
    }

    /// The volume operations, with what they need of the server.
    pub(crate) fn volumes(&self) -> crate::volumes::Volumes<'_> {
        crate::volumes::Volumes {
            home: &self.home,
            store: &self.store,
            stages: &self.stages,
        }
    }
}

/// Starts `f` on a blocking thread, counted in [`Server::busy`] from now until it ends,
/// whether or not anyone still waits for it (a handler's connection may be gone).
pub(crate) fn spawn_work<T: Send + 'static>(
    server: &Arc<Server>,
    f: impl FnOnce(&Server) -> T + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    /// Counts one piece of work until dropped (after `f`, or with `f` never run).
    struct Working(Arc<Server>);
    impl Drop for Working {
        fn drop(&mut self) {
            self.0
                .busy
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    server
        .busy
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let working = Working(Arc::clone(server));
    tokio::task::spawn_blocking(move || f(&working.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server whose `serve` future is dropped while blocking work of its own still holds it
    /// (a test's kill aborts its task so) closes its store before it lets go of its home: the
    /// next server opens `state.db` alone, and nothing is closed under it later.
    #[test]
    fn a_server_dropped_midway_closes_its_store_before_it_lets_go_of_its_home() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let options = ServerOptions {
            home: dir.path().join("home"),
            tcp: None,
            team: None,
            gpus: crate::GpuSource::Emulate("h100:1".to_owned()),
            supervisor: crate::SupervisorCommand {
                program: PathBuf::from("/bin/false"),
                args: Vec::new(),
            },
            sandbox: crate::SandboxMode::None,
            tick: crate::DEFAULT_TICK,
            images: Default::default(),
        };
        let wal = options.home.join("state.db-wal");
        let (server, lock) = Server::open(&options).expect("the first server opens");
        let server = Arc::new(server);
        server
            .store
            .set_secret("TOKEN", "one", "2026-12-07T00:00:00Z")
            .expect("a write");
        assert!(
            wal.metadata().is_ok_and(|m| m.len() > 0),
            "the write is in the log, not yet in state.db"
        );
        // Work that outlives `serve`'s future.
        let outliving = Arc::clone(&server);
        drop(HomeHeld::new(server, lock));

        assert!(
            matches!(
                outliving.store.secrets(),
                Err(crate::store::StoreError::Closed)
            ),
            "the first server's store is closed"
        );
        assert!(
            wal.metadata().map_or(true, |m| m.len() == 0),
            "its log is copied into state.db"
        );
        let (again, _lock) = Server::open(&options).expect("the home is free for a second");
        again
            .store
            .set_secret("OTHER", "two", "2026-12-07T00:00:01Z")
            .expect("a write of the second");
        drop(outliving);
        let names: Vec<String> = again
            .store
            .secrets()
            .expect("the second's store is open")
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["OTHER", "TOKEN"], "both writes are kept");
        assert!(
            wal.metadata().is_ok_and(|m| m.len() > 0),
            "the second server's log is its own, not deleted under it"
        );
    }
}
