//! How a run's command is started: inside bubblewrap, or (degraded) directly.
//!
//! Why over 850 lines: some 200 are its tests; the rest builds one bubblewrap command line in
//! order (namespaces, the root, the driver's files, `/proc`, the run's folders), with the
//! checks that keep each part safe beside it.

use std::path::{Path, PathBuf};

/// What of a run's image its sandbox needs: the image's unpacked tree, the user its config
/// names, and whether the tree can take the host's name resolution files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRoot {
    /// The unpacked root filesystem (read-only inside the run).
    pub rootfs: PathBuf,
    /// The uid and gid the config's `User` names; `None`: root.
    pub user: Option<(u32, u32)>,
    /// Whether `/etc/resolv.conf` and `/etc/hosts` of the tree can take the host's files.
    pub name_resolution: bool,
}

/// The top-level directories a run never sees from the host or its image (`.div`: where a
/// GPU run in an image finds the driver, [`GPU_DRIVER_DIR`]; an image's own is not bound).
const SKIPPED: [&str; 8] = [
    "proc",
    "dev",
    "sys",
    "tmp",
    "mnt",
    "workspace",
    "cache",
    ".div",
];

/// What of a run's `/proc` is read-only: each is the host's own, bound read-only.
const PROC_COVERS: [&str; 5] = [
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/fs",
    "/proc/acpi",
    "/proc/driver",
];

/// Where `python` is looked for on the PATH `sh -lc` sets from `/etc/profile`.
const PROFILE_PATH: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

/// The first line of every run's `sh -lc` command: it sets again every variable div gave the
/// run, from copies the profile does not touch ([`profile_proof`]), so what `/etc/profile` did
/// to them (Debian's and Alpine's set `PATH` for everyone, dropping an image's
/// `/opt/venv/bin`) is undone, and what it added beside them stays. Names only: no value is
/// ever on a command line.
pub const RESTORE_ENV: &str = "eval \"${__div_restore-}\"; unset __div_restore\n";

/// Names a shell will not take back from the environment (it sets them itself, or holds
/// them read-only: bash as `sh` exits at an assignment to one).
const NOT_RESTORED: [&str; 12] = [
    "IFS",
    "PWD",
    "OLDPWD",
    "PPID",
    "SHLVL",
    "OPTIND",
    "UID",
    "EUID",
    "BASHOPTS",
    "SHELLOPTS",
    "BASH_VERSINFO",
    "_",
];

/// How many bytes of copies [`profile_proof`] adds at most (the kernel takes about 2 MiB of
/// arguments and environment together; the code that restores them must stay under one
/// variable's 128 KiB).
const SAVED_MAX: usize = 256 << 10;
const RESTORE_MAX: usize = 120 << 10;

/// The variables to add to a run's environment for [`RESTORE_ENV`]: a copy of each of `env`
/// (`__div_env_NAME`) and `__div_restore`, the code that sets each again from its copy and
/// drops the copies. Names a shell cannot assign, and copies past a few hundred KiB, are
/// left out (those variables are then as the profile leaves them).
pub fn profile_proof(env: &[(String, String)]) -> Vec<(String, String)> {
    let shell_name = |k: &str| {
        let mut chars = k.chars();
        chars
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
            && !k.starts_with("__div_")
            && !NOT_RESTORED.contains(&k)
    };
    let mut last: Vec<(&str, &str)> = Vec::new();
    for (k, v) in env {
        match last.iter_mut().find(|(n, _)| n == k) {
            Some(entry) => entry.1 = v,
            None => last.push((k, v)),
        }
    }
    let (mut saved, mut code, mut bytes) = (Vec::new(), String::new(), 0usize);
    for (k, v) in last.into_iter().filter(|(k, _)| shell_name(k)) {
        let line = format!("export {k}=\"$__div_env_{k}\"; unset __div_env_{k}\n");
        if bytes + k.len() + v.len() + 12 > SAVED_MAX || code.len() + line.len() > RESTORE_MAX {
            continue;
        }
        bytes += k.len() + v.len() + 12;
        code.push_str(&line);
        saved.push((format!("__div_env_{k}"), v.to_owned()));
    }
    if !saved.is_empty() {
        saved.push(("__div_restore".to_owned(), code));
    }
    saved
}

/// Where the shared download cache is inside the sandbox.
pub const CACHE_MOUNT: &str = "/cache";

/// What is wrong with `value` as the value of the variable `key` (`what`: "secret" or
/// "environment variable"), if anything, by div-spec's [`div_spec::check_env_value`] (the
/// client checks the same when the value is typed): a NUL byte (no process can be given one),
/// or more than [`div_spec::MAX_ENV_VALUE_BYTES`] (the kernel takes no `KEY=value` over
/// 128 KiB, so a larger one could never reach a run; it is refused when it is set instead).
pub fn env_value_problem(what: &str, key: &str, value: &str) -> Option<String> {
    match div_spec::check_env_value(key, value) {
        Ok(()) => None,
        Err(div_spec::EnvError::Nul { .. }) => Some(format!(
            "the {what} `{key}` holds a NUL byte, which no program's environment can hold; remove it"
        )),
        Err(div_spec::EnvError::TooLong { bytes, max, .. }) => Some(format!(
            "the {what} `{key}` is {bytes} bytes; a value may be at most {max} bytes (128 KiB less 256)"
        )),
        Err(e) => Some(format!("the {what} `{key}` is refused: {e}")),
    }
}

/// Where `bwrap` is looked for: fixed folders, never a PATH (the run's or anyone's).
const BWRAP_DIRS: [&str; 4] = ["/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin"];

/// The absolute path of `bwrap` in [`BWRAP_DIRS`]; `/usr/bin/bwrap` when none is found (the
/// start then fails and says so).
pub fn bwrap_program() -> PathBuf {
    BWRAP_DIRS
        .iter()
        .map(|d| Path::new(d).join("bwrap"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/bin/bwrap"))
}

/// Whether runs get their own user namespace (`--unshare-user --disable-userns`): found by
/// [`bwrap_works`]; until then, yes.
static OWN_USERNS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn bwrap_true(userns: bool) -> bool {
    let mut args = vec!["--cap-drop", "ALL"];
    if userns {
        args.extend(["--unshare-user", "--disable-userns"]);
    }
    args.extend(["--ro-bind", "/", "/", "true"]);
    std::process::Command::new(bwrap_program())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether bubblewrap works here, with every capability dropped as runs have them: with a
/// user namespace of the run's own in which no other can be made, or — where user namespaces
/// are turned off (`user.max_user_namespaces` 0), which only root's bwrap can do without —
/// without one (no nested one can be made there either).
pub fn bwrap_works() -> bool {
    if bwrap_true(true) {
        let _ = OWN_USERNS.set(true);
        return true;
    }
    let works = bwrap_true(false);
    if works {
        let _ = OWN_USERNS.set(false);
    }
    works
}

/// Whether runs get a user namespace of their own (where bubblewrap works so).
pub fn own_user_namespace() -> bool {
    *OWN_USERNS.get().unwrap_or(&true)
}

/// bubblewrap and the first flags every run's sandbox has: no capability, and (where it
/// works) a user namespace of its own in which no other can be made.
pub fn bwrap_head() -> Vec<String> {
    let mut argv = vec![
        bwrap_program().display().to_string(),
        "--cap-drop".to_owned(),
        "ALL".to_owned(),
    ];
    if *OWN_USERNS.get().unwrap_or(&true) {
        argv.extend(["--unshare-user", "--disable-userns"].map(str::to_owned));
    }
    argv
}

/// The host's `python3` when `python` is not on the login PATH.
fn python_shim() -> Option<PathBuf> {
    if PROFILE_PATH
        .iter()
        .any(|d| Path::new(d).join("python").exists())
    {
        return None;
    }
    PROFILE_PATH
        .iter()
        .map(|d| Path::new(d).join("python3"))
        .find(|p| p.exists())
}

/// The folder (`home/shim`) holding the one link `python` → the host's `python3`, made
/// now, for the supervisor to lay over `/usr/local/bin` ([`lay_python_shim`]); `None` when
/// the host has `python` already (or no `python3`), when there is no `/usr/local/bin`, or
/// when the overlay's options cannot carry the folder's path.
pub fn python_shim_folder(home: &Path) -> Option<PathBuf> {
    let python3 = python_shim()?;
    if !Path::new(USR_LOCAL_BIN).is_dir() {
        return None;
    }
    let folder = home.join("shim");
    let usable = folder
        .to_str()
        .is_some_and(|s| !s.contains([',', ':', '\\']));
    if !usable {
        return None;
    }
    let link = folder.join("python");
    if std::fs::read_link(&link).ok().as_deref() != Some(python3.as_path()) {
        std::fs::create_dir_all(&folder).ok()?;
        let staged = folder.join(format!(".python-{}", std::process::id()));
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(&python3, &staged).ok()?;
        std::fs::rename(&staged, &link).ok()?;
    }
    Some(folder)
}

const USR_LOCAL_BIN: &str = "/usr/local/bin";

/// Lays `folder` (from [`python_shim_folder`]) over `/usr/local/bin` as a read-only overlay
/// whose lower layers are `folder`, then the host's `/usr/local/bin`: in the calling
/// supervisor's own mount namespace, where bwrap's recursive bind of `/usr` carries it into
/// the sandbox. One mount, where binding each entry of `/usr/local/bin` again over a tmpfs
/// (what bwrap is given otherwise) costs bwrap a mount and a read of the mount table each
/// (3.3 ms for this machine's 20 entries).
pub fn lay_python_shim(folder: &Path) -> std::io::Result<()> {
    let options = format!("lowerdir={}:{USR_LOCAL_BIN}", folder.display());
    crate::sys::mount_overlay_read_only(&options, Path::new(USR_LOCAL_BIN))
}

/// What a sandboxed run is given.
#[derive(Debug)]
pub struct SandboxInput<'a> {
    pub home: &'a Path,
    pub workspace: &'a Path,
    pub tmp: &'a Path,
    pub mnt: &'a Path,
    /// Volume name and its host directory.
    pub volumes: &'a [(String, PathBuf)],
    /// The download cache every run shares, bound writable at [`CACHE_MOUNT`].
    pub cache: &'a Path,
    /// Device nodes to bind (GPU runs).
    pub devices: &'a [PathBuf],
    pub command: &'a str,
    /// Where the command starts: `/workspace`, or `/` (an image's `WorkingDir`) for a run
    /// that shipped nothing.
    pub chdir: &'a str,
    /// The run's image; `None`: this machine's own system.
    pub image: Option<&'a ImageRoot>,
    /// Whether the supervisor lays the `python` shim over `/usr/local/bin` itself
    /// ([`lay_python_shim`]), so bwrap's arguments leave it out.
    pub shim_by_supervisor: bool,
    /// `div-init` on the host (`crate::init`): the sandbox's first process, bound read-only
    /// at [`crate::init::IN_SANDBOX`]; `None`: bubblewrap's own first process, which ends the
    /// run with its shell.
    pub init: Option<&'a Path>,
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `bwrap … sh -lc <command>`: no capability and no way to gain one in a nested user
/// namespace (as root too: bwrap keeps root's otherwise, and
/// a run could remount `/etc` read-write or unmount the cover over the state directory); the
/// host's system read-only, one top-level directory at a time; the state directory hidden;
/// `/tmp`, `/mnt`, each volume and `/workspace` bound, each volume's committed code
/// (`code/`) read-only over it. The run's environment is not here: the supervisor adds it
/// (`--args`), and starts bwrap with a fixed one.
pub fn bwrap_argv(input: &SandboxInput<'_>) -> Vec<String> {
    let mut argv: Vec<String> = vec![bwrap_program().display().to_string()];
    argv.extend(
        [
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--unshare-all",
            "--share-net",
        ]
        .map(str::to_owned),
    );
    // div-init is pid 1, not bubblewrap's own first process, which ends the namespace (and
    // every process of the run) the moment the shell does.
    if input.init.is_some() {
        argv.push("--as-pid-1".to_owned());
    }
    // Its own user namespace, in which no further one can be made: a nested one would hold
    // every capability over itself.
    let own_userns = *OWN_USERNS.get().unwrap_or(&true);
    if own_userns {
        argv.extend(["--unshare-user", "--disable-userns"].map(str::to_owned));
    }
    // The user an image names is who its command runs as, in the run's user namespace.
    if let Some((uid, gid)) = input.image.and_then(|i| i.user) {
        if !own_userns {
            argv.push("--unshare-user".to_owned());
        }
        argv.extend([
            "--uid".to_owned(),
            uid.to_string(),
            "--gid".to_owned(),
            gid.to_string(),
        ]);
    }
    argv.extend(root_argv(input));
    // A `WorkingDir` the image lacks is made for the run, as docker does, never in the
    // cached tree (`image_tree::working_dir_args`; the launcher refused one that cannot be).
    let working_dir = input
        .image
        .map(|image| {
            crate::image_tree::working_dir_args(&image.rootfs, input.chdir).unwrap_or_default()
        })
        .unwrap_or_default();
    argv.extend(working_dir.early);
    argv.extend(["--proc", "/proc", "--dev", "/dev"].map(str::to_owned));
    // Without capabilities a run under a root server is still uid 0, and the kernel lets
    // uid 0 write root's files in /proc with no capability check (`/proc/sys/vm/drop_caches`
    // was writable, and so `kernel.core_pattern`): they are bound read-only over the run's
    // own /proc. (bwrap covers `irq` and `bus` itself, and `sys` only when it can tell.)
    for cover in PROC_COVERS {
        argv.extend([
            "--ro-bind-try".to_owned(),
            cover.to_owned(),
            cover.to_owned(),
        ]);
    }
    for dev in input.devices.iter().filter(|d| d.exists()) {
        argv.extend(["--dev-bind".to_owned(), s(dev), s(dev)]);
    }
    argv.extend(["--bind".to_owned(), s(input.tmp), "/tmp".to_owned()]);
    argv.extend(["--bind".to_owned(), s(input.mnt), "/mnt".to_owned()]);
    for (name, dir) in input.volumes {
        argv.extend(["--bind".to_owned(), s(dir), format!("/mnt/{name}")]);
        // Committed code (`code/<id>`, what `div run` ships) is immutable: no run may change
        // a snapshot another run will start from. A link there (left by some run) is not
        // followed: it is not bound, so nothing outside the volume is.
        let code = dir.join("code");
        if std::fs::symlink_metadata(&code).is_ok_and(|m| m.is_dir()) {
            argv.extend([
                "--ro-bind".to_owned(),
                s(&code),
                format!("/mnt/{name}/code"),
            ]);
        }
    }
    argv.extend(["--bind".to_owned(), s(input.cache), CACHE_MOUNT.to_owned()]);
    argv.extend([
        "--bind".to_owned(),
        s(input.workspace),
        "/workspace".to_owned(),
    ]);
    if let Some(image) = input.image {
        if image.name_resolution {
            for file in ["/etc/resolv.conf", "/etc/hosts"] {
                if Path::new(file).is_file() {
                    argv.extend(["--ro-bind".to_owned(), file.to_owned(), file.to_owned()]);
                }
            }
        }
        // A GPU run's driver, from this machine, as nvidia-container-toolkit, enroot and
        // apptainer `--nv` give it (the device nodes are bound above, as for any run).
        if !input.devices.is_empty() {
            argv.extend(driver_binds(&driver_files()));
        }
    }
    if let Some(init) = input.init {
        argv.extend([
            "--ro-bind".to_owned(),
            s(init),
            crate::init::IN_SANDBOX.to_owned(),
        ]);
    }
    argv.extend(working_dir.late);
    if input.image.is_some() {
        // The root (a tmpfs holding the mount points) read-only too, once they are made.
        argv.extend(["--remount-ro", "/"].map(str::to_owned));
    }
    // By absolute path: the run's own PATH is already set when bwrap looks for it.
    argv.extend(["--chdir", input.chdir].map(str::to_owned));
    if input.init.is_some() {
        argv.push(crate::init::IN_SANDBOX.to_owned());
    }
    argv.extend(["/bin/sh", "-lc"].map(str::to_owned));
    if input.image.is_some() && !input.devices.is_empty() {
        // Found after the image's own and the run's: appended, never set over them.
        argv.push(format!(
            "{RESTORE_ENV}export LD_LIBRARY_PATH=\"${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{GPU_DRIVER_DIR}/lib\" PATH=\"${{PATH:+$PATH:}}{GPU_DRIVER_DIR}/bin\"\n{}",
            input.command
        ));
    } else {
        argv.push(format!("{RESTORE_ENV}{}", input.command));
    }
    argv
}

/// Where a GPU run in an image finds this machine's NVIDIA driver: its libraries in `lib/`
/// (appended to `LD_LIBRARY_PATH`) and its programs in `bin/` (appended to `PATH`), bound
/// read-only on the image's tmpfs root, as apptainer `--nv` binds them at
/// `/.singularity.d/libs`. Untested on a GPU (docs/local-control-plane.md, Images).
pub const GPU_DRIVER_DIR: &str = "/.div/nvidia";

/// The driver's user-space libraries a CUDA or NVML program loads (nvidia-container-toolkit's
/// `compute` and `utility` sets): a name matches itself or itself with a version after it
/// (`libcuda.so`, `libcuda.so.1`).
const DRIVER_LIBRARIES: [&str; 13] = [
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-ml.so",
    "libnvidia-cfg.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
    "libnvidia-allocator.so",
    "libnvidia-opencl.so",
    "libnvidia-compiler.so",
    "libnvidia-fatbinaryloader.so",
    "libnvidia-pkcs11.so",
    "libnvidia-pkcs11-openssl3.so",
];

/// The driver's programs (the same sets), looked for where the driver installs them.
const DRIVER_PROGRAMS: [&str; 5] = [
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

/// Where [`DRIVER_PROGRAMS`] are looked for.
const DRIVER_PROGRAM_DIRS: [&str; 5] = ["/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin", "/sbin"];

/// This machine's driver files: each by the name it gets under [`GPU_DRIVER_DIR`] and the
/// real file it is.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DriverFiles {
    pub libraries: Vec<(String, PathBuf)>,
    pub programs: Vec<(String, PathBuf)>,
}

/// `ldconfig -p`'s tag for this machine's own libraries (not the 32-bit ones beside them).
const LDCONFIG_ARCH: &str = if cfg!(target_arch = "aarch64") {
    "AArch64"
} else {
    "x86-64"
};

/// The driver's libraries in `ldconfig -p`'s listing (`\tlibcuda.so.1 (libc6,x86-64) =>
/// /usr/lib/x86_64-linux-gnu/libcuda.so.1`), this machine's architecture only, the first of
/// each name (the loader's choice), each resolved to the regular file it is.
pub fn driver_libraries(ldconfig: &str, arch: &str) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for line in ldconfig.lines() {
        let Some((left, path)) = line.trim().split_once(" => ") else {
            continue;
        };
        let Some((name, flags)) = left.split_once(' ') else {
            continue;
        };
        let matches = DRIVER_LIBRARIES.iter().any(|lib| {
            name.strip_prefix(lib)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        });
        if !matches || !flags.contains(arch) || out.iter().any(|(n, _)| n == name) {
            continue;
        }
        // A name is one path component: nothing is bound anywhere but `lib/`.
        if name.contains('/') || name.starts_with('.') {
            continue;
        }
        if let Ok(real) = Path::new(path).canonicalize()
            && real.is_file()
        {
            out.push((name.to_owned(), real));
        }
    }
    out
}

/// The driver's programs found in `dirs`, the first of each name, resolved.
pub fn driver_programs(dirs: &[&Path]) -> Vec<(String, PathBuf)> {
    DRIVER_PROGRAMS
        .iter()
        .filter_map(|name| {
            dirs.iter()
                .filter_map(|d| d.join(name).canonicalize().ok())
                .find(|p| p.is_file())
                .map(|p| ((*name).to_owned(), p))
        })
        .collect()
}

/// This machine's driver files (`ldconfig -p`; none when it cannot run), found at each GPU
/// run's launch, so a driver updated under a running server is the one bound.
fn driver_files() -> DriverFiles {
    let listing = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "/usr/bin/ldconfig"]
        .iter()
        .find(|p| Path::new(p).is_file())
        .and_then(|p| std::process::Command::new(p).arg("-p").output().ok())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let dirs: Vec<&Path> = DRIVER_PROGRAM_DIRS.iter().map(Path::new).collect();
    DriverFiles {
        libraries: driver_libraries(&listing, LDCONFIG_ARCH),
        programs: driver_programs(&dirs),
    }
}

/// bubblewrap's `--ro-bind` of each driver file under [`GPU_DRIVER_DIR`].
pub fn driver_binds(files: &DriverFiles) -> Vec<String> {
    let mut argv = Vec::new();
    for (sub, list) in [("lib", &files.libraries), ("bin", &files.programs)] {
        for (name, real) in list {
            argv.extend([
                "--ro-bind".to_owned(),
                s(real),
                format!("{GPU_DRIVER_DIR}/{sub}/{name}"),
            ]);
        }
    }
    argv
}

/// The root filesystem's part of bubblewrap's arguments: the image's tree, or this machine's
/// own system (one top-level directory at a time, the state directory hidden, `python`
/// provided when the host has only `python3`).
///
/// An image's tree is bound read-only entry by entry onto a tmpfs `/` (remounted read-only
/// at the end, in [`bwrap_argv`]), so `/workspace`, `/mnt` and `/tmp` need no mount point
/// inside the cached tree; its links at the top (`bin -> usr/bin`) are made as links.
fn root_argv(input: &SandboxInput<'_>) -> Vec<String> {
    let Some(image) = input.image else {
        return host_root_argv(input);
    };
    let mut argv = ["--tmpfs", "/"].map(str::to_owned).to_vec();
    top_level_binds(&image.rootfs, &mut argv);
    argv
}

/// `--ro-bind` (directories and files) and `--symlink` for each top-level entry of `root`
/// but [`SKIPPED`], at the same name under `/`; returns the directories bound.
fn top_level_binds(root: &Path, argv: &mut Vec<String>) -> Vec<PathBuf> {
    let mut bound: Vec<PathBuf> = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(root)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if SKIPPED.contains(&name) {
            continue;
        }
        let path = root.join(name);
        let inside = Path::new("/").join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&path) {
                argv.extend(["--symlink".to_owned(), s(&target), s(&inside)]);
            }
        } else if meta.is_dir() || meta.is_file() {
            argv.extend(["--ro-bind".to_owned(), s(&path), s(&inside)]);
            if meta.is_dir() {
                bound.push(inside);
            }
        }
    }
    bound
}

/// This machine's own system as the run's root.
fn host_root_argv(input: &SandboxInput<'_>) -> Vec<String> {
    let mut argv = Vec::new();
    let home = input
        .home
        .canonicalize()
        .unwrap_or_else(|_| input.home.to_path_buf());
    let bound = top_level_binds(Path::new("/"), &mut argv);
    // The state directory must be neither visible nor writable inside.
    if bound.iter().any(|b| home.starts_with(b)) {
        argv.extend(["--tmpfs".to_owned(), s(&home)]);
    }
    if let Some(python3) = python_shim().filter(|_| !input.shim_by_supervisor) {
        let bin = Path::new("/usr/local/bin");
        if bin.is_dir() {
            argv.extend(["--tmpfs".to_owned(), s(bin)]);
            let mut names: Vec<_> = std::fs::read_dir(bin)
                .map(|d| d.flatten().collect())
                .unwrap_or_default();
            names.sort_by_key(|e| e.file_name());
            for e in names {
                let p = e.path();
                match std::fs::read_link(&p) {
                    Ok(target) => argv.extend(["--symlink".to_owned(), s(&target), s(&p)]),
                    Err(_) => argv.extend(["--ro-bind".to_owned(), s(&p), s(&p)]),
                }
            }
            argv.extend([
                "--symlink".to_owned(),
                s(&python3),
                "/usr/local/bin/python".to_owned(),
            ]);
        }
    }
    argv
}

/// `sh -lc <command>` without a sandbox (under `init`, div-init, where there is one);
/// `python` is added at the end of the PATH (from a link in `bin`) when the host has only
/// `python3`.
pub fn direct_argv(command: &str, bin: &Path, init: Option<&Path>) -> Vec<String> {
    let mut text = RESTORE_ENV.to_owned();
    if let Some(python3) = python_shim()
        && std::fs::create_dir_all(bin).is_ok()
    {
        let link = bin.join("python");
        let _ = std::fs::remove_file(&link);
        if std::os::unix::fs::symlink(&python3, &link).is_ok() {
            text.push_str(&format!("export PATH=\"$PATH:{}\"\n", bin.display()));
        }
    }
    text.push_str(command);
    let mut argv: Vec<String> = init.map(s).into_iter().collect();
    argv.extend(["/bin/sh".to_owned(), "-lc".to_owned(), text]);
    argv
}

/// The GPU device nodes a GPU run gets.
pub fn gpu_devices(indices: &[u32]) -> Vec<PathBuf> {
    let mut devices: Vec<PathBuf> = indices
        .iter()
        .map(|i| PathBuf::from(format!("/dev/nvidia{i}")))
        .collect();
    for name in [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
        "dri",
    ] {
        devices.push(Path::new("/dev").join(name));
    }
    devices
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::{Path, PathBuf};

    use super::{
        DriverFiles, GPU_DRIVER_DIR, ImageRoot, RESTORE_ENV, SandboxInput, bwrap_argv,
        driver_binds, driver_libraries, driver_programs, profile_proof,
    };

    /// A fake driver: libraries as the NVIDIA installer leaves them (a versioned file, its
    /// soname a link to it), ldconfig's listing of them among others, and `nvidia-smi`.
    #[test]
    fn the_drivers_libraries_and_programs_are_bound_read_only_under_one_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("lib64");
        let lib32 = tmp.path().join("lib32");
        let bin = tmp.path().join("bin");
        for d in [&lib, &lib32, &bin] {
            std::fs::create_dir(d).unwrap();
        }
        for f in [
            "libcuda.so.550.54.15",
            "libnvidia-ml.so.550.54.15",
            "libcudart.so.12",
            "libc.so.6",
        ] {
            std::fs::write(lib.join(f), "elf").unwrap();
        }
        symlink("libcuda.so.550.54.15", lib.join("libcuda.so.1")).unwrap();
        symlink("libcuda.so.1", lib.join("libcuda.so")).unwrap();
        symlink("libnvidia-ml.so.550.54.15", lib.join("libnvidia-ml.so.1")).unwrap();
        std::fs::write(lib32.join("libcuda.so.1"), "elf32").unwrap();
        std::fs::write(bin.join("nvidia-smi"), "#!/bin/sh\n").unwrap();
        let l = lib.display();
        let listing = format!(
            "9 libs found in cache `/etc/ld.so.cache'\n\
             \tlibnvidia-ml.so.1 (libc6,x86-64) => {l}/libnvidia-ml.so.1\n\
             \tlibcudart.so.12 (libc6,x86-64) => {l}/libcudart.so.12\n\
             \tlibcuda.so.1 (libc6,x86-64) => {l}/libcuda.so.1\n\
             \tlibcuda.so.1 (libc6) => {}/libcuda.so.1\n\
             \tlibcuda.so.1 (libc6,x86-64) => /elsewhere/libcuda.so.1\n\
             \tlibcuda.so (libc6,x86-64) => {l}/libcuda.so\n\
             \tlibnvidia-cfg.so.1 (libc6,x86-64) => {l}/libnvidia-cfg.so.1\n\
             \tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => {l}/libc.so.6\n",
            lib32.display()
        );
        let real_cuda = lib.join("libcuda.so.550.54.15").canonicalize().unwrap();
        let real_ml = lib
            .join("libnvidia-ml.so.550.54.15")
            .canonicalize()
            .unwrap();
        let libraries = driver_libraries(&listing, "x86-64");
        // This architecture's only, the first of each name, links resolved; the CUDA runtime
        // (the image's own business), libc and a library whose file is missing left out.
        assert_eq!(
            libraries,
            vec![
                ("libnvidia-ml.so.1".to_owned(), real_ml.clone()),
                ("libcuda.so.1".to_owned(), real_cuda.clone()),
                ("libcuda.so".to_owned(), real_cuda.clone()),
            ]
        );
        let programs = driver_programs(&[Path::new("/nonexistent"), &bin]);
        let smi = bin.join("nvidia-smi").canonicalize().unwrap();
        assert_eq!(programs, vec![("nvidia-smi".to_owned(), smi.clone())]);
        let argv = driver_binds(&DriverFiles {
            libraries,
            programs,
        });
        let d = |p: &PathBuf| p.display().to_string();
        assert_eq!(
            argv,
            [
                "--ro-bind".to_owned(),
                d(&real_ml),
                format!("{GPU_DRIVER_DIR}/lib/libnvidia-ml.so.1"),
                "--ro-bind".to_owned(),
                d(&real_cuda),
                format!("{GPU_DRIVER_DIR}/lib/libcuda.so.1"),
                "--ro-bind".to_owned(),
                d(&real_cuda),
                format!("{GPU_DRIVER_DIR}/lib/libcuda.so"),
                "--ro-bind".to_owned(),
                d(&smi),
                format!("{GPU_DRIVER_DIR}/bin/nvidia-smi"),
            ]
        );
        // A name that is not one path component never reaches an argument.
        let hostile = format!("\tlibcuda.so.1/../../etc (libc6,x86-64) => {l}/libcuda.so.1\n");
        assert_eq!(driver_libraries(&hostile, "x86-64"), vec![]);
    }

    /// A profile that sets `PATH` and `LANG` for everyone, as Debian's and Alpine's do, and
    /// unsets another: after [`RESTORE_ENV`] the command sees what div gave it, and what the
    /// profile added beside.
    #[test]
    fn what_a_profile_does_to_the_run_s_variables_is_undone() {
        let env: Vec<(String, String)> = [
            ("PATH", "/opt/venv/bin:/usr/bin:/bin"),
            ("LANG", "de_DE.UTF-8"),
            ("QUOTED", "it's \"$HOME\" `x` \\ \n two lines"),
            ("PATH", "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"),
            ("IFS", "x"),
            ("not-a-name", "v"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec();
        let saved = profile_proof(&env);
        let profile = "PATH=/usr/bin:/bin; export LANG=C.UTF-8; unset QUOTED; export PS1='# '\n";
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "{profile}{RESTORE_ENV}printf '%s|' \"$PATH\" \"$LANG\" \"$QUOTED\" \"$PS1\"; env | grep -c __div_ || true"
            ))
            .env_clear()
            .envs(env.iter().filter(|(k, _)| k != "not-a-name").map(|(k, v)| (k, v)))
            .envs(saved.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin|de_DE.UTF-8|it's \"$HOME\" `x` \\ \n two lines|# |0\n"
        );
        // One copy a name (the last value), and no name a shell would not take back.
        assert_eq!(
            saved.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            [
                "__div_env_PATH",
                "__div_env_LANG",
                "__div_env_QUOTED",
                "__div_restore"
            ]
        );
        assert!(profile_proof(&[]).is_empty());
    }

    #[test]
    fn a_gpu_run_in_an_image_finds_the_driver_after_its_own_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        // An image of its own `/.div/nvidia/lib` (read-only, it would stop the binds below).
        std::fs::create_dir_all(rootfs.join(".div/nvidia/lib")).unwrap();
        let image = ImageRoot {
            rootfs,
            user: None,
            name_resolution: false,
        };
        let devices = [PathBuf::from("/dev/nvidia0")];
        let dir = tmp.path();
        let input = |image, devices| SandboxInput {
            home: dir,
            workspace: dir,
            tmp: dir,
            mnt: dir,
            volumes: &[],
            cache: dir,
            devices,
            command: "nvidia-smi",
            chdir: "/",
            image,
            shim_by_supervisor: false,
            init: None,
        };
        let gpu = bwrap_argv(&input(Some(&image), &devices));
        assert_eq!(
            gpu.last().unwrap(),
            &format!(
                "{RESTORE_ENV}export LD_LIBRARY_PATH=\"${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{GPU_DRIVER_DIR}/lib\" PATH=\"${{PATH:+$PATH:}}{GPU_DRIVER_DIR}/bin\"\nnvidia-smi"
            )
        );
        assert!(
            gpu.iter()
                .any(|a| a == &format!("{}", image.rootfs.join("bin").display()))
                && !gpu
                    .iter()
                    .any(|a| a.ends_with(".div") || a.contains("rootfs/.div")),
            "the image's own /.div is not bound: {gpu:?}"
        );
        // Every driver bind is made before the root turns read-only.
        let remount = gpu.iter().position(|a| a == "--remount-ro").unwrap();
        assert!(
            gpu.iter()
                .enumerate()
                .filter(|(_, a)| a.starts_with(GPU_DRIVER_DIR))
                .all(|(i, _)| i < remount),
            "{gpu:?}"
        );
        // No GPU, or this machine's own system (the driver is already there): unchanged.
        let cpu = bwrap_argv(&input(Some(&image), &[]));
        assert_eq!(cpu.last().unwrap(), &format!("{RESTORE_ENV}nvidia-smi"));
        assert!(
            !cpu.iter().any(|a| a.starts_with(GPU_DRIVER_DIR)),
            "{cpu:?}"
        );
        let host = bwrap_argv(&input(None, &devices));
        assert_eq!(host.last().unwrap(), &format!("{RESTORE_ENV}nvidia-smi"));
        assert!(
            !host.iter().any(|a| a.starts_with(GPU_DRIVER_DIR)),
            "{host:?}"
        );
    }
}
