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

/// Sends `signal` to the process group `pgid`.
pub(crate) fn kill_group(pgid: u32, signal: libc::c_int) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: killpg takes plain integers; pgid > 1 so it never signals every process.
    unsafe { libc::killpg(pgid, signal) == 0 }
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
