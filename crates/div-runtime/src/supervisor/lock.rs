//! One supervisor a run: the run directory's lock, held for the supervisor's life, and the
//! marks the server leaves beside it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

/// The file a run's supervisor holds locked (`flock`) for as long as it is the run's
/// supervisor. One run directory has at most one supervisor: a second one started on it (a
/// launch repeated after the server was killed mid-launch) finds it locked and leaves at
/// once, touching nothing. The server reads "still there" from it when it does not know the
/// supervisor's pid.
pub const LOCK_FILE: &str = "supervisor.lock";
/// Left by the server, under the lock, in a run directory it has recorded as lost: a
/// supervisor that starts there afterwards (one that was still inside its `exec` when the
/// server gave up on it) leaves without running anything.
pub const ABANDONED_FILE: &str = "abandoned";
/// Left by a supervisor that got not a byte of the secrets it waited for on stdin: the server
/// was killed between starting it and sending them. It ran nothing; the restarted server
/// places the run again.
pub const UNSENT_FILE: &str = "secrets.unsent";

/// Takes the run directory's [`LOCK_FILE`]: `Ok(Some)` holds it until dropped, `Ok(None)`
/// when another process holds it now. The lock file is never inherited by the run (std
/// opens it close-on-exec).
pub fn claim(run_dir: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(run_dir.join(LOCK_FILE))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(e)) => Err(e),
    }
}

/// The run's lock for its supervisor: `Some(Some(lock))`, or `Some(None)` where no lock file
/// can be made (the run goes on without it, as before locks); `None` when another holds it
/// for longer than `patience`, which is another supervisor of the run, holding it for its life:
/// this one gives way. Held a moment only, it is looked for again: the server takes the lock
/// to see whether a supervisor is gone, and a process it forks meanwhile holds it (its copy of
/// the server's descriptor) until its `exec` closes it. A supervisor started then left without
/// a word and its run read as lost
/// (`runs::a_supervisor_whose_secrets_never_came_runs_nothing_and_the_run_is_placed_again`,
/// twice in an afternoon's full runs).
pub(super) fn claim_waiting(run_dir: &Path, patience: std::time::Duration) -> Option<Option<File>> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match claim(run_dir) {
            Ok(Some(lock)) => return Some(Some(lock)),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Ok(None) => return None,
            Err(_) => return Some(None),
        }
    }
}
