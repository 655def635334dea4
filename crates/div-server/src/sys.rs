//! The few system calls std does not offer: sessions, CPU affinity, signals.
#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_signal: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

/// Starts a new session, so the process outlives the server that launched it and is not in
/// its process group.
pub(crate) fn new_session() {
    // SAFETY: setsid takes no pointers and only fails (harmlessly) when already a leader.
    unsafe {
        libc::setsid();
    }
}

/// Makes SIGTERM (and SIGINT, SIGHUP) set a flag read by [`stop_requested`] instead of
/// killing the process.
pub(crate) fn catch_stop_signals() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe, and the
        // function pointer lives for the whole program.
        unsafe {
            libc::signal(signal, on_term as *const () as libc::sighandler_t);
        }
    }
}

/// Whether a stop signal arrived.
pub(crate) fn stop_requested() -> bool {
    TERM.load(Ordering::SeqCst)
}

/// Pins the calling process (and what it spawns afterwards) to `cores`.
pub(crate) fn set_affinity(cores: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is its empty value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &core in cores {
        // SAFETY: CPU_SET writes inside `set`, and `core` is below CPU_SETSIZE (checked).
        if core < libc::CPU_SETSIZE as usize {
            unsafe { libc::CPU_SET(core, &mut set) };
        }
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this process.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `signal` to `pid`; false when it is gone.
pub(crate) fn kill(pid: u32, signal: libc::c_int) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill takes plain integers.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// Whether a process with this pid exists (zombies included).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) == 0 }
}

/// The size of a memory page in bytes.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf takes a plain integer.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// Whether the filesystem holding `path` has no block left for an unprivileged writer.
pub(crate) fn disk_full(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a zeroed statvfs the call fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both pointers are valid for the call.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_blocks > 0 && st.f_bavail == 0
}

/// Opens `base/rest[0]/…/rest[n-1]` for reading without following a link at any of the
/// `rest` components (a run may have put one there): each folder is opened `O_NOFOLLOW |
/// O_DIRECTORY` beneath the one before, the last component `O_NOFOLLOW | O_NONBLOCK` (so a
/// FIFO never blocks the open). `base` itself is trusted. The caller still checks what was
/// opened (`File::metadata`): it may be a FIFO, a folder or a device.
pub(crate) fn open_beneath(base: &std::path::Path, rest: &[&str]) -> io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt;
    let mut dir: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(base)?
        .into();
    for (i, name) in rest.iter().enumerate() {
        if name.is_empty() || name.contains('/') || *name == "." || *name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not one path component"),
            ));
        }
        let c = std::ffi::CString::new(*name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))?;
        let last = i + 1 == rest.len();
        let flags = libc::O_RDONLY
            | libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | libc::O_NOCTTY
            | if last {
                libc::O_NONBLOCK
            } else {
                libc::O_DIRECTORY
            };
        // SAFETY: `dir` is an open descriptor and `c` a valid NUL-terminated string, both
        // alive for the call.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by openat, is open and owned by nothing else.
        dir = unsafe { OwnedFd::from_raw_fd(fd) };
    }
    Ok(std::fs::File::from(dir))
}

/// Whether the child `pid` has exited, without reaping it: while it stays a zombie its pid
/// (and so its process-group id) cannot be given to another process, so what is killed by
/// that pid afterwards is still the run's.
pub(crate) fn child_exited(pid: u32) -> io::Result<bool> {
    let pid: libc::id_t = pid;
    // SAFETY: siginfo_t is plain data; zeroed means "no child changed state".
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid siginfo_t for waitid to fill; WNOWAIT leaves the child
    // waitable (unreaped).
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: waitid filled `info` (or left it zeroed); si_pid reads its pid field.
    Ok(unsafe { info.si_pid() } != 0)
}
