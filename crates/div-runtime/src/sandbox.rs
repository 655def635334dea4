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
/// GPU run in an image finds the driver, [`crate::gpu::GPU_DRIVER_DIR`]; an image's own is
/// not bound).
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
    /// A GPU run's GPUs and driver (`crate::gpu`); `None` for any other run.
    pub gpu: Option<&'a crate::gpu::GpuPlan>,
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
    // A GPU run's device nodes, then `/proc/driver/nvidia` masked over the read-only
    // `/proc/driver` above: only its own GPUs are there (docs/gpus.md).
    if let Some(gpu) = input.gpu {
        argv.extend(gpu.dev_args().iter().cloned());
        argv.extend(gpu.proc_args().iter().cloned());
    }
    argv.extend(places_argv(input));
    argv.extend(["--bind".to_owned(), s(input.cache), CACHE_MOUNT.to_owned()]);
    argv.extend([
        "--bind".to_owned(),
        s(input.workspace),
        "/workspace".to_owned(),
    ]);
    if let Some(image) = input.image {
        // A GPU run's driver, from this machine, as nvidia-container-toolkit, enroot and
        // apptainer `--nv` give it; before the host's name resolution files, which go over
        // whatever of `/etc` it covers to make its loader cache's place.
        if let Some(gpu) = input.gpu {
            argv.extend(gpu.root_args().iter().cloned());
        }
        if image.name_resolution {
            for file in ["/etc/resolv.conf", "/etc/hosts"] {
                if Path::new(file).is_file() {
                    argv.extend(["--ro-bind".to_owned(), file.to_owned(), file.to_owned()]);
                }
            }
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
    // In an image, the driver's programs are found after the image's and the run's own.
    let prefix = input.gpu.map_or("", |gpu| gpu.command_prefix());
    argv.push(format!("{RESTORE_ENV}{prefix}{}", input.command));
    argv
}

/// The run's own places: its `/tmp`, its `/mnt` and each volume there, each volume's
/// committed code (`code/`) read-only over it.
fn places_argv(input: &SandboxInput<'_>) -> Vec<String> {
    let mut argv = Vec::new();
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{ImageRoot, RESTORE_ENV, SandboxInput, bwrap_argv, profile_proof};
    use crate::gpu::GpuPlan;

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

    /// A GPU run's arguments go where bubblewrap needs them: its device nodes after `/dev`
    /// is made, its `/proc/driver/nvidia` after the read-only `/proc/driver`, the driver's
    /// files in an image before its root (and any `/etc` they cover) turns read-only and
    /// before the host's name resolution files; what to export before the command.
    #[test]
    fn a_gpu_run_s_arguments_go_where_bubblewrap_needs_them() {
        let tmp = tempfile::tempdir().unwrap();
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        // An image of its own `/.div/nvidia/lib` (read-only, it would stop the binds below).
        std::fs::create_dir_all(rootfs.join(".div/nvidia/lib")).unwrap();
        let image = ImageRoot {
            rootfs,
            user: None,
            name_resolution: true,
        };
        let v = |a: &str| a.split(' ').map(str::to_owned).collect::<Vec<String>>();
        let plan = GpuPlan {
            dev: v("--dev-bind /fake/dev/nvidia7 /dev/nvidia7"),
            proc: v("--tmpfs /proc/driver/nvidia --remount-ro /proc/driver/nvidia"),
            root: v(
                "--ro-bind /fake/libcuda.so.1 /.div/nvidia/lib/libcuda.so.1 --ro-bind /run-dir/gpu/ld.so.cache /etc/ld.so.cache",
            ),
            prefix: "export PATH=\"${PATH:+$PATH:}/.div/nvidia/bin\"\n".to_owned(),
            ..GpuPlan::default()
        };
        let dir = tmp.path();
        let input = |image, gpu| SandboxInput {
            home: dir,
            workspace: dir,
            tmp: dir,
            mnt: dir,
            volumes: &[],
            cache: dir,
            gpu,
            command: "nvidia-smi",
            chdir: "/",
            image,
            shim_by_supervisor: false,
            init: None,
        };
        let at = |argv: &[String], a: &str| argv.iter().position(|x| x == a).unwrap();
        let gpu = bwrap_argv(&input(Some(&image), Some(&plan)));
        assert_eq!(
            gpu.last().unwrap(),
            &format!("{RESTORE_ENV}export PATH=\"${{PATH:+$PATH:}}/.div/nvidia/bin\"\nnvidia-smi")
        );
        // After `--dev /dev` and the read-only `/proc/driver`: the nodes, then the mask.
        let proc_driver = gpu.iter().rposition(|a| a == "/proc/driver").unwrap();
        assert!(proc_driver > at(&gpu, "--dev"), "{gpu:?}");
        assert_eq!(gpu[proc_driver + 1..][..3], plan.dev[..], "{gpu:?}");
        assert_eq!(gpu[proc_driver + 4..][..4], plan.proc[..], "{gpu:?}");
        let cache = at(&gpu, "/run-dir/gpu/ld.so.cache");
        let read_only = gpu
            .windows(2)
            .position(|w| w[0] == "--remount-ro" && w[1] == "/")
            .unwrap();
        assert!(cache < read_only, "{gpu:?}");
        if Path::new("/etc/resolv.conf").is_file() {
            assert!(cache < at(&gpu, "/etc/resolv.conf"), "{gpu:?}");
        }
        assert!(
            !gpu.iter().any(|a| a.contains("rootfs/.div")),
            "the image's own /.div is not bound: {gpu:?}"
        );
        // No GPU: nothing of the driver.
        let cpu = bwrap_argv(&input(Some(&image), None));
        assert_eq!(cpu.last().unwrap(), &format!("{RESTORE_ENV}nvidia-smi"));
        assert!(
            !cpu.iter().any(|a| a.starts_with("/dev/nvidia")
                || a.contains("/proc/driver/nvidia")
                || a.starts_with("/.div")),
            "{cpu:?}"
        );
        // This machine's own system: its driver is there already (a plan for it has no root
        // arguments and nothing to export); the devices and /proc are the run's own.
        let own = GpuPlan {
            dev: plan.dev.clone(),
            proc: plan.proc.clone(),
            ..GpuPlan::default()
        };
        let host = bwrap_argv(&input(None, Some(&own)));
        assert_eq!(host.last().unwrap(), &format!("{RESTORE_ENV}nvidia-smi"));
        assert!(host.iter().any(|a| a == "/dev/nvidia7"), "{host:?}");
        assert!(host.iter().any(|a| a == "/proc/driver/nvidia"), "{host:?}");
        assert!(!host.iter().any(|a| a.starts_with("/.div")), "{host:?}");
    }
}
