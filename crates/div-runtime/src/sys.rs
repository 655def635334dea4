//! The few system calls std does not offer: sessions, CPU affinity, signals, page size, free
//! space, opening beneath a folder without following links, waiting without reaping, and a
//! mount namespace of the supervisor's own for a run's overlay. Each goes through the calls
//! of rustix or signal-hook instead of raw libc, but glibc's `mallopt` ([`tune_allocator`]).
//! Its `unsafe` blocks each say beside them why they are sound; the workspace lint denies
//! any other.

use std::io;
use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::process::{Pid, Signal};

/// Set by signal-hook's handler when a stop signal arrives.
static TERM: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Tunes glibc's allocator for moving many files' bytes at once (what the local control plane
/// does with every pack): memory freed at the top of a heap is kept up to 32 MiB rather than
/// 128 KiB before it is handed back, each growth of a heap takes 4 MiB more than asked, and
/// blocks under 32 MiB (a pack's body is up to 8 MiB) come from the heap rather than a mapping
/// of their own, mapped afresh, page by page, for each pack (`docs/performance.md`, eighth
/// session). `div server run` calls it first thing, before any thread starts; other commands
/// do not (a small project's run took 2–3 ms longer with them tuned too). Elsewhere than
/// glibc, nothing.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const M_TRIM_THRESHOLD: libc::c_int = -1;
        const M_TOP_PAD: libc::c_int = -2;
        const M_MMAP_THRESHOLD: libc::c_int = -3;
        for (param, value) in [
            (M_TRIM_THRESHOLD, 32 << 20),
            (M_TOP_PAD, 4 << 20),
            (M_MMAP_THRESHOLD, 32 << 20),
        ] {
            // SAFETY: `mallopt` only sets a number in glibc's allocator state, under its own
            // lock; the parameters are glibc's documented ones (malloc.h) and the values in
            // their ranges. A value it refuses (returns 0) leaves the default, which is only
            // slower.
            #[allow(unsafe_code)]
            unsafe {
                libc::mallopt(param, value);
            }
        }
    }
}

/// Starts a new session, so the process outlives the server that launched it and is not in
/// its process group.
pub fn new_session() {
    // It only fails (harmlessly) when the process already leads a group.
    let _ = rustix::process::setsid();
}

/// Makes SIGTERM (and SIGINT, SIGHUP) set a flag read by [`stop_requested`] instead of
/// killing the process.
pub fn catch_stop_signals() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // Fails only for a forbidden signal (SIGKILL, SIGSTOP); none of these is.
        let _ = signal_hook::flag::register(signal, Arc::clone(&TERM));
    }
}

/// Whether a stop signal arrived.
pub fn stop_requested() -> bool {
    TERM.load(Ordering::SeqCst)
}

/// Pins the calling process (and what it spawns afterwards) to `cores`; cores past what the
/// kernel's set can name are left out.
pub fn set_affinity(cores: &[usize]) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &core in cores {
        if core < rustix::thread::CpuSet::MAX_CPU {
            set.set(core);
        }
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(io::Error::from)
}

/// `pid` as the kernel's, when it names one process (not 0, not a group, not every process).
pub(crate) fn one_process(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// Sends `signal` to `pid`; false when it is gone (or the signal is not one std names).
pub fn kill(pid: u32, signal: libc::c_int) -> bool {
    match (one_process(pid), Signal::from_named_raw(signal)) {
        (Some(pid), Some(signal)) => rustix::process::kill_process(pid, signal).is_ok(),
        _ => false,
    }
}

/// Whether a process with this pid exists (zombies included).
pub fn alive(pid: u32) -> bool {
    one_process(pid).is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

/// The size of a memory page in bytes.
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Whether the filesystem holding `path` has no block left for an unprivileged writer.
pub fn disk_full(path: &std::path::Path) -> bool {
    rustix::fs::statvfs(path).is_ok_and(|st| st.f_blocks > 0 && st.f_bavail == 0)
}

/// Opens `base/rest[0]/…/rest[n-1]` for reading without following a link at any of the
/// `rest` components (a run may have put one there): each folder is opened `O_NOFOLLOW |
/// O_DIRECTORY` beneath the one before, the last component `O_NOFOLLOW | O_NONBLOCK` (so a
/// FIFO never blocks the open). `base` itself is trusted. The caller still checks what was
/// opened (`File::metadata`): it may be a FIFO, a folder or a device.
pub fn open_beneath(base: &std::path::Path, rest: &[&str]) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let mut dir = rustix::fs::open(
        base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for (i, name) in rest.iter().enumerate() {
        if name.is_empty() || name.contains('/') || *name == "." || *name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not one path component"),
            ));
        }
        let last = i + 1 == rest.len();
        let flags = OFlags::RDONLY
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY
            | if last {
                OFlags::NONBLOCK
            } else {
                OFlags::DIRECTORY
            };
        // rustix refuses a name holding a NUL (EINVAL) before the call.
        dir = rustix::fs::openat(&dir, *name, flags, Mode::empty())?;
    }
    Ok(std::fs::File::from(dir))
}

/// Moves the calling thread (and what it spawns afterwards) into a mount namespace of its
/// own, with every mount in it private: what is mounted there afterwards is seen by no other
/// process, and goes away with the namespace's last process. Needs `CAP_SYS_ADMIN`. It
/// allocates nothing, so it may also run between a fork and its exec.
pub fn private_mount_namespace() -> io::Result<()> {
    use rustix::mount::{MountPropagationFlags, mount_change};
    use rustix::thread::UnshareFlags;
    // SAFETY: rustix marks `unshare` unsafe for `UnshareFlags::FILES` alone, which would give
    // this thread its own file-descriptor table, so that a descriptor opened by another
    // thread could not be used here. Only `NEWNS` is passed (it implies `FS`: the thread's
    // own root and working folder, which nothing shares), so every descriptor stays valid
    // in every thread.
    #[allow(unsafe_code)]
    unsafe {
        rustix::thread::unshare_unsafe(UnshareFlags::NEWNS)?;
    }
    mount_change(
        c"/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    Ok(())
}

/// [`private_mount_namespace`] for a process without `CAP_SYS_ADMIN` (an unprivileged
/// server's supervisor): the process first gets a user namespace of its own in which it
/// keeps its own uid and gid (each mapped to itself, nothing else mapped, `setgroups`
/// denied), and so the capabilities to mount in the mount namespace made with it. Nothing
/// about who it is changes: its files are made as its user, and what it starts (the run's
/// bubblewrap, which makes a user namespace of its own inside this one) runs as its user,
/// without those capabilities (they go at `exec`, as for any process that is not uid 0).
///
/// The kernel makes a user namespace only for a process of one thread: called by the
/// supervisor before it starts any.
pub fn private_user_and_mount_namespace() -> io::Result<()> {
    let (uid_map, gid_map) = own_id_maps();
    enter_own_user_namespace(&uid_map, &gid_map)
}

/// What `/proc/self/uid_map` and `gid_map` are given for a user namespace in which this
/// process's uid and gid are mapped to themselves and nothing else.
fn own_id_maps() -> (Vec<u8>, Vec<u8>) {
    let (uid, gid) = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    (
        format!("{uid} {uid} 1").into_bytes(),
        format!("{gid} {gid} 1").into_bytes(),
    )
}

/// The body of [`private_user_and_mount_namespace`], with the maps made beforehand: it
/// allocates nothing, so it may also run between a fork and its exec.
fn enter_own_user_namespace(uid_map: &[u8], gid_map: &[u8]) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags, open};
    use rustix::mount::{MountPropagationFlags, mount_change};
    use rustix::thread::UnshareFlags;
    // SAFETY: as in `private_mount_namespace`: `FILES` is not passed, so every descriptor
    // stays valid in every thread (there is one).
    #[allow(unsafe_code)]
    unsafe {
        rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)?;
    }
    for (file, bytes) in [
        (c"/proc/self/setgroups", &b"deny"[..]),
        (c"/proc/self/uid_map", uid_map),
        (c"/proc/self/gid_map", gid_map),
    ] {
        let fd = open(file, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        rustix::io::write(&fd, bytes)?;
    }
    mount_change(
        c"/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    Ok(())
}

/// Makes `command`'s process, between its fork and its exec, do what a run's supervisor does
/// before it starts the run's bubblewrap: as root, [`private_mount_namespace`]; without,
/// [`private_user_and_mount_namespace`]; then [`mount_writable_overlay`] with `options` on
/// `merged`. How the server tries, once, whether runs' `/workspace` can be overlays here
/// (`workspace::overlay_works`). The server has threads, so this cannot be done in its own
/// process; the forked child has one.
pub fn with_overlay_in_private_namespace(
    command: &mut std::process::Command,
    options: &str,
    merged: &std::path::Path,
) -> io::Result<()> {
    // Everything the child needs, made here: between fork and exec nothing may allocate.
    let maps = (!rustix::process::geteuid().is_root()).then(own_id_maps);
    let (volatile, plain, merged) = overlay_args(options, merged)?;
    let child = move || -> io::Result<()> {
        match &maps {
            Some((uid_map, gid_map)) => enter_own_user_namespace(uid_map, gid_map)?,
            None => private_mount_namespace()?,
        }
        mount_overlay_volatile_or_not(&volatile, &plain, &merged)
    };
    // SAFETY: `child` runs in the forked child before exec, and only makes system calls on
    // what was made above (no allocation, no lock, nothing shared with the parent's other
    // threads), as `pre_exec` asks.
    #[allow(unsafe_code)]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, child);
    }
    Ok(())
}

/// Holds what `command` starts to `tasks` processes and threads, where no pids cgroup can:
/// `RLIMIT_NPROC` in the child before it execs. Counted by the kernel per user in each user
/// namespace (Linux 5.14 and later), so inside a run's own user namespace (bubblewrap's
/// `--unshare-user`) it counts the run's own tasks alone; a fork past it fails with `EAGAIN`
/// in the run.
pub fn limit_tasks(command: &mut std::process::Command, tasks: u64) {
    let limit = rustix::process::Rlimit {
        current: Some(tasks),
        maximum: Some(tasks),
    };
    let child = move || -> io::Result<()> {
        rustix::process::setrlimit(rustix::process::Resource::Nproc, limit).map_err(io::Error::from)
    };
    // SAFETY: `child` runs in the forked child before exec and makes one system call
    // (prlimit64) on a value made above: no allocation, no lock, as `pre_exec` asks.
    #[allow(unsafe_code)]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, child);
    }
}

/// Mounts a writable overlayfs on `target` with `options` (`lowerdir=…,upperdir=…,workdir=…`),
/// `volatile` (Linux 5.10 and later), or without it where the kernel refuses it.
pub fn mount_writable_overlay(options: &str, target: &std::path::Path) -> io::Result<()> {
    let (volatile, plain, target) = overlay_args(options, target)?;
    mount_overlay_volatile_or_not(&volatile, &plain, &target)
}

/// `options` with `volatile` and without, and `target`, as the kernel takes them.
fn overlay_args(
    options: &str,
    target: &std::path::Path,
) -> io::Result<(std::ffi::CString, std::ffi::CString, std::ffi::CString)> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt as _;
    let nul = |_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the options or path");
    Ok((
        CString::new(format!("{options},volatile")).map_err(nul)?,
        CString::new(options).map_err(nul)?,
        CString::new(target.as_os_str().as_bytes()).map_err(nul)?,
    ))
}

/// The body of [`mount_writable_overlay`]: it allocates nothing, so it may also run between
/// a fork and its exec.
fn mount_overlay_volatile_or_not(
    volatile: &std::ffi::CStr,
    plain: &std::ffi::CStr,
    target: &std::ffi::CStr,
) -> io::Result<()> {
    use rustix::mount::{MountFlags, mount};
    match mount(
        c"overlay",
        target,
        c"overlay",
        MountFlags::empty(),
        volatile,
    ) {
        Err(rustix::io::Errno::INVAL) => {
            mount(c"overlay", target, c"overlay", MountFlags::empty(), plain)?
        }
        done => done?,
    }
    Ok(())
}

/// Mounts a read-only overlayfs (`lowerdir=A:B`, no upper layer) on `target`.
pub fn mount_overlay_read_only(options: &str, target: &std::path::Path) -> io::Result<()> {
    let options = std::ffi::CString::new(options)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the options"))?;
    rustix::mount::mount(
        "overlay",
        target,
        "overlay",
        rustix::mount::MountFlags::RDONLY,
        options.as_c_str(),
    )?;
    Ok(())
}

/// `struct loop_info64` (linux/loop.h): 232 bytes.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` (linux/loop.h, Linux 5.8 and later): 304 bytes.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// `LOOP_CTL_GET_FREE`, `LOOP_CONFIGURE` and `LO_FLAGS_AUTOCLEAR` (linux/loop.h).
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// Mounts the ext4 filesystem in the file `image` on `target` (nosuid, nodev, noatime, and
/// no inode tables zeroed behind the run's back: the image stays sparse), through a free loop
/// device that lets itself go once the filesystem is unmounted (autoclear). Done with the
/// system calls themselves: `mount -o loop` costs a process and its own probing (about 10 ms
/// of every run's start).
pub fn mount_loop_ext4(image: &std::path::Path, target: &std::path::Path) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsRawFd;
    let control = rustix::fs::open(
        "/dev/loop-control",
        OFlags::RDWR | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = rustix::fs::open(image, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
    // Another process may take the free device first: asked again, a few times.
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number or -1.
        #[allow(unsafe_code)]
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = format!("/dev/loop{n}");
        let device = rustix::fs::open(&path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let config = LoopConfig {
            fd: u32::try_from(file.as_raw_fd()).map_err(io::Error::other)?,
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: LO_FLAGS_AUTOCLEAR,
                lo_file_name: [0; 64],
                lo_crypt_name: [0; 64],
                lo_encrypt_key: [0; 32],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads one `struct loop_config`, which `config` is, laid out
        // as linux/loop.h lays it out (repr(C), the sizes above), alive for the call.
        #[allow(unsafe_code)]
        let configured = unsafe {
            libc::ioctl(
                device.as_raw_fd(),
                LOOP_CONFIGURE,
                std::ptr::from_ref(&config),
            )
        };
        if configured < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EBUSY) {
                continue;
            }
            return Err(e);
        }
        let mounted = rustix::mount::mount(
            path.as_str(),
            target,
            "ext4",
            rustix::mount::MountFlags::NOSUID
                | rustix::mount::MountFlags::NODEV
                | rustix::mount::MountFlags::NOATIME,
            c"noinit_itable",
        );
        // The device goes with its last user: the mount, or (when it failed) this close.
        drop(device);
        return mounted.map_err(io::Error::from);
    }
    Err(io::Error::other("no loop device stayed free long enough"))
}

/// Detaches whatever is mounted on `target` (in this process's mount namespace).
pub fn unmount(target: &std::path::Path) -> io::Result<()> {
    rustix::mount::unmount(target, rustix::mount::UnmountFlags::DETACH)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_is_alive_and_nonsense_pids_are_not() {
        assert!(super::alive(std::process::id()));
        assert!(!super::alive(0));
        assert!(!super::alive(u32::MAX));
        assert!(!super::kill(0, libc::SIGKILL));
    }

    #[test]
    fn open_beneath_follows_no_link_and_waits_on_no_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        std::fs::create_dir(base.join("d")).unwrap();
        std::fs::write(base.join("d/f"), b"kept").unwrap();
        std::os::unix::fs::symlink("/etc", base.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", base.join("d/file-link")).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(base.join("d/fifo"))
            .status()
            .unwrap();
        assert!(fifo.success());

        let text = std::io::read_to_string(super::open_beneath(base, &["d", "f"]).unwrap());
        assert_eq!(text.unwrap(), "kept");
        // A link as a folder on the way, or as the file itself, is refused.
        let err = super::open_beneath(base, &["link", "hostname"]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
        let err = super::open_beneath(base, &["d", "file-link"]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        // A FIFO with no writer opens at once (the caller then sees what it is).
        let opened = super::open_beneath(base, &["d", "fifo"]).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(
            &opened.metadata().unwrap().file_type()
        ));
        for bad in ["..", ".", "", "a/b"] {
            let err = super::open_beneath(base, &["d", bad]).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        }
        let err = super::open_beneath(base, &["d", "missing"]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn kill_refuses_signal_zero() {
        // Signal 0 is no named signal: kill refuses it rather than probing.
        assert!(!super::kill(std::process::id(), 0));
    }

    /// Run only by [`a_stop_signal_sets_the_flag_instead_of_killing`], in a process of its
    /// own: the flag is the whole process's, and set in this test binary it would stop the
    /// supervisor's own tests.
    #[test]
    #[ignore = "run in its own process by a_stop_signal_sets_the_flag_instead_of_killing"]
    fn stop_signal_in_a_process_of_its_own() {
        super::catch_stop_signals();
        assert!(!super::stop_requested());
        assert!(super::kill(std::process::id(), libc::SIGHUP));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !super::stop_requested() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(super::stop_requested());
    }

    #[test]
    fn a_stop_signal_sets_the_flag_instead_of_killing() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sys::tests::stop_signal_in_a_process_of_its_own",
                "--ignored",
                "--test-threads=1",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child (killed by the signal, or failing) said: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn page_size_and_free_space_are_read() {
        assert!(super::page_size().is_power_of_two());
        assert!(!super::disk_full(std::path::Path::new(
            "/nonexistent/for/sure"
        )));
    }

    #[test]
    fn affinity_to_every_core_is_accepted() {
        let all: Vec<usize> =
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        assert!(super::set_affinity(&all).is_ok());
    }
}
