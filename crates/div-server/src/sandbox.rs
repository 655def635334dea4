//! How a run's command is started: inside bubblewrap, or (degraded) directly.

use std::path::{Path, PathBuf};

use crate::images::RunImage;

/// The top-level host directories a run never sees from the host.
const SKIPPED: [&str; 6] = ["proc", "dev", "sys", "tmp", "mnt", "workspace"];

/// Where `python` is looked for on the PATH `sh -lc` sets from `/etc/profile`.
const PROFILE_PATH: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

/// Whether bubblewrap works here.
pub(crate) fn bwrap_works() -> bool {
    std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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

/// What a sandboxed run is given.
#[derive(Debug)]
pub(crate) struct SandboxInput<'a> {
    pub(crate) home: &'a Path,
    pub(crate) workspace: &'a Path,
    pub(crate) tmp: &'a Path,
    pub(crate) mnt: &'a Path,
    /// Volume name and its host directory.
    pub(crate) volumes: &'a [(String, PathBuf)],
    /// Device nodes to bind (GPU runs).
    pub(crate) devices: &'a [PathBuf],
    pub(crate) command: &'a str,
    /// Where the command starts: `/workspace`, or `/` (an image's `WorkingDir`) for a run
    /// that shipped nothing.
    pub(crate) chdir: &'a str,
    /// The run's image; `None`: this machine's own system.
    pub(crate) image: Option<&'a RunImage>,
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `bwrap … sh -lc <command>`: the host's system read-only, one top-level directory at a
/// time; the state directory hidden; `/tmp`, `/mnt`, each volume and `/workspace` bound.
pub(crate) fn bwrap_argv(input: &SandboxInput<'_>) -> Vec<String> {
    let mut argv: Vec<String> = [
        "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--share-net",
    ]
    .map(str::to_owned)
    .to_vec();
    argv.extend(root_argv(input));
    argv.extend(["--proc", "/proc", "--dev", "/dev"].map(str::to_owned));
    for dev in input.devices.iter().filter(|d| d.exists()) {
        argv.extend(["--dev-bind".to_owned(), s(dev), s(dev)]);
    }
    argv.extend(["--bind".to_owned(), s(input.tmp), "/tmp".to_owned()]);
    argv.extend(["--bind".to_owned(), s(input.mnt), "/mnt".to_owned()]);
    for (name, dir) in input.volumes {
        argv.extend(["--bind".to_owned(), s(dir), format!("/mnt/{name}")]);
    }
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
        // The root (a tmpfs holding the mount points) read-only too, once they are made.
        argv.extend(["--remount-ro", "/"].map(str::to_owned));
    }
    argv.extend(["--chdir", input.chdir, "sh", "-lc"].map(str::to_owned));
    argv.push(input.command.to_owned());
    argv
}

/// The root filesystem's part of bubblewrap's arguments: the image's tree, or this machine's
/// own system (one top-level directory at a time, the state directory hidden, `python`
/// provided when the host has only `python3`).
///
/// An image's tree is bound read-only entry by entry onto a tmpfs `/` (remounted read-only
/// at the end), so `/workspace`, `/mnt` and `/tmp` need no mount point inside the cached
/// tree; its links at the top (`bin -> usr/bin`) are made as links. A user the image names
/// is who the command runs as, inside a new user namespace.
fn root_argv(input: &SandboxInput<'_>) -> Vec<String> {
    let Some(image) = input.image else {
        return host_root_argv(input);
    };
    let mut argv = Vec::new();
    if let Some((uid, gid)) = image.user {
        argv.extend([
            "--unshare-user".to_owned(),
            "--uid".to_owned(),
            uid.to_string(),
            "--gid".to_owned(),
            gid.to_string(),
        ]);
    }
    argv.extend(["--tmpfs", "/"].map(str::to_owned));
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
    if let Some(python3) = python_shim() {
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

/// `sh -lc <command>` without a sandbox; `python` is added at the end of the PATH (from a
/// link in `bin`) when the host has only `python3`.
pub(crate) fn direct_argv(command: &str, bin: &Path) -> Vec<String> {
    let mut text = String::new();
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
    vec!["sh".to_owned(), "-lc".to_owned(), text]
}

/// The GPU device nodes a GPU run gets.
pub(crate) fn gpu_devices(indices: &[u32]) -> Vec<PathBuf> {
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
