//! Waiting on a child without reaping it: for its exit ([`ExitWatch`], [`child_exited`]), or
//! for a file to appear beside it ([`EndWatch`]). A child left unreaped keeps its pid, so what
//! is killed by that pid afterwards is still the run's.

use std::io;

use crate::sys::one_process;

/// Waits for the child `pid` to exit, for at most a given time, without reaping it: woken at
/// once when it exits, through a pidfd (Linux 5.3 and later), or else by sleeping the whole
/// time. A supervisor's loop then learns of its run's end as it happens, not up to a poll
/// interval later.
#[derive(Debug)]
pub struct ExitWatch(Option<rustix::fd::OwnedFd>);

impl ExitWatch {
    pub fn new(pid: u32) -> ExitWatch {
        ExitWatch(one_process(pid).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        }))
    }

    /// Returns when the child has exited, or after `most`.
    pub fn wait(&self, most: std::time::Duration) {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let polled = self.0.as_ref().and_then(|fd| {
            let timeout = Timespec::try_from(most).ok()?;
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            rustix::event::poll(&mut fds, Some(&timeout)).ok()
        });
        if polled.is_none() {
            std::thread::sleep(most);
        }
    }
}

/// What [`EndWatch::wait`] saw first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The file it watches for appeared in the folder (a rename or a create onto its name).
    File,
    /// The process exited (or the watch could not be made: nothing is known).
    Exit,
}

/// Waits for a file to appear in a folder or a process to exit, whichever comes first: the
/// local executor learns of a run's `end.json` the moment its supervisor renames it into
/// place, before the supervisor lets the run's places go and exits. Through inotify and a
/// pidfd; where either cannot be had, it answers [`Seen::Exit`] at once and the caller waits
/// for the exit its own way.
#[derive(Debug)]
pub struct EndWatch {
    inotify: Option<rustix::fd::OwnedFd>,
    process: Option<rustix::fd::OwnedFd>,
    name: std::ffi::OsString,
    dir: std::path::PathBuf,
}

impl EndWatch {
    /// Watches `dir` for `name`, and the process `pid`.
    pub fn new(dir: &std::path::Path, name: &str, pid: u32) -> EndWatch {
        use rustix::fs::inotify::{CreateFlags, WatchFlags};
        let inotify = rustix::fs::inotify::init(CreateFlags::CLOEXEC)
            .ok()
            .filter(|fd| {
                rustix::fs::inotify::add_watch(
                    fd,
                    dir,
                    WatchFlags::MOVED_TO | WatchFlags::CREATE | WatchFlags::DELETE_SELF,
                )
                .is_ok()
            });
        let process = one_process(pid).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        EndWatch {
            inotify,
            process,
            name: name.into(),
            dir: dir.to_path_buf(),
        }
    }

    /// Blocks until the file is there or the process has exited.
    pub fn wait(&self) -> Seen {
        use rustix::event::{PollFd, PollFlags};
        let (Some(inotify), Some(process)) = (&self.inotify, &self.process) else {
            return Seen::Exit;
        };
        // Watched first, then looked for: one renamed into place before the watch is seen.
        if self.dir.join(&self.name).exists() {
            return Seen::File;
        }
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        loop {
            let mut fds = [
                PollFd::new(inotify, PollFlags::IN),
                PollFd::new(process, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return Seen::Exit,
            }
            if fds[0].revents().contains(PollFlags::IN) {
                let mut events = rustix::fs::inotify::Reader::new(inotify, &mut buf);
                while let Ok(event) = events.next() {
                    let named = event
                        .file_name()
                        .is_some_and(|n| n.to_bytes() == self.name.as_encoded_bytes());
                    let gone = event
                        .events()
                        .contains(rustix::fs::inotify::ReadFlags::IGNORED);
                    if named {
                        return Seen::File;
                    }
                    if gone {
                        // The folder is gone: nothing will appear in it.
                        return Seen::Exit;
                    }
                    // What one read gave, and no more: the next would wait for more events.
                    if events.is_buffer_empty() {
                        break;
                    }
                }
            }
            if !fds[1].revents().is_empty() {
                return if self.dir.join(&self.name).exists() {
                    Seen::File
                } else {
                    Seen::Exit
                };
            }
        }
    }
}

/// Whether the child `pid` has exited, without reaping it: while it stays a zombie its pid
/// (and so its process-group id) cannot be given to another process, so what is killed by
/// that pid afterwards is still the run's.
pub fn child_exited(pid: u32) -> io::Result<bool> {
    use rustix::process::{WaitId, WaitIdOptions};
    let Some(pid) = one_process(pid) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        ));
    };
    // WNOWAIT leaves the child waitable (unreaped); WNOHANG answers at once.
    let status = rustix::process::waitid(
        WaitId::Pid(pid),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
    )?;
    Ok(status.is_some())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_exit_watch_returns_when_the_child_exits_and_leaves_it_to_be_reaped() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.2; exit 7"])
            .spawn()
            .expect("sh starts");
        let watch = super::ExitWatch::new(child.id());
        assert!(watch.0.is_some(), "this kernel gives pidfds");
        // A minute at most: it returns because the child exited, not because the time ran out.
        let mut waited = 0;
        while !super::child_exited(child.id()).expect("our child") {
            watch.wait(std::time::Duration::from_secs(60));
            waited += 1;
            assert!(waited < 3, "woken without the child exiting, twice");
        }
        // Not reaped by the watch: its status is still there to take.
        assert_eq!(child.wait().expect("reaped here").code(), Some(7));
    }

    /// A file renamed into the folder while the process still runs is seen as the file; a
    /// process that exits without it, as the exit; a file there before the watch, at once.
    #[test]
    fn an_end_watch_sees_the_file_before_the_exit_and_the_exit_without_the_file() {
        use super::{EndWatch, Seen};
        let dir = tempfile::tempdir().expect("a dir");
        // The file comes while the process sleeps on: seen as the file, long before the exit.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("sleep starts");
        let watch = EndWatch::new(dir.path(), "end.json", sleeper.id());
        let writer = {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || {
                std::fs::write(dir.join("end.tmp"), b"{}").expect("write");
                std::fs::write(dir.join("other"), b"").expect("write");
                std::fs::rename(dir.join("end.tmp"), dir.join("end.json")).expect("rename");
            })
        };
        assert_eq!(watch.wait(), Seen::File);
        writer.join().expect("the writer");
        // Already there: at once.
        assert_eq!(
            EndWatch::new(dir.path(), "end.json", sleeper.id()).wait(),
            Seen::File
        );
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        // No file, and the process exits: the exit.
        let mut quick = std::process::Command::new("sh")
            .args(["-c", "sleep 0.2"])
            .spawn()
            .expect("sh starts");
        let watch = EndWatch::new(dir.path(), "never.json", quick.id());
        assert_eq!(watch.wait(), Seen::Exit);
        assert!(quick.wait().expect("reaped").success());
    }

    #[test]
    fn child_exited_leaves_the_child_unreaped() {
        let mut running = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(!super::child_exited(running.id()).unwrap());
        running.kill().unwrap();
        running.wait().unwrap();

        let mut done = std::process::Command::new("true").spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !super::child_exited(done.id()).unwrap() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(super::child_exited(done.id()).unwrap());
        // Still a zombie of ours: its status is there to be reaped, and only now is it.
        assert!(crate::sys::alive(done.id()));
        assert!(done.try_wait().unwrap().is_some_and(|s| s.success()));
        assert!(super::child_exited(0).is_err());
    }
}
