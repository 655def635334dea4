//! A run's `/workspace`: its own, writable, and never the committed code it starts from.
//!
//! Two ways, chosen once when the server starts ([`overlay_works`]):
//!
//! - **An overlay** (a sandboxed server on the local executor, root or not, where this
//!   kernel lets it): the committed code (`volumes/<project>-code/code/<id>`) is the lower
//!   layer of a kernel overlayfs, and the run's writes land in its own upper layer,
//!   `run-dir/overlay/upper`. The supervisor mounts the overlay in a mount namespace of its
//!   own, made just before it starts bubblewrap ([`Overlay::mount`]); without root, in a user
//!   namespace of its own made with it, in which it stays its own user
//!   (`sys::private_user_and_mount_namespace`). Nothing is mounted on the host and nothing is
//!   left mounted when the run ends: the namespaces go with the supervisor and the run.
//!   Starting a run costs the same for 5 files and for 57,000.
//! - **A copy** (everywhere else: no sandbox, a Slurm node, a kernel or policy that allows
//!   no overlay in a user namespace, a path the overlay options cannot name): the code is
//!   copied into `run-dir/workspace` before the run, as it always was.
//!
//! Either way a run can create, change and delete anything under `/workspace`, and none of
//! it reaches the committed code or another run (overlayfs copies a file up before its first
//! write; a deletion is a whiteout in the upper layer), and all of it is deleted when the run
//! ends.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// The layers of a run's overlay `/workspace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    /// The committed code, read-only.
    pub lower: PathBuf,
    /// The run's writes.
    pub upper: PathBuf,
    /// overlayfs's own scratch folder, on the upper layer's filesystem.
    pub work: PathBuf,
}

impl Overlay {
    /// The layers of the run in `run_dir` over `lower`: `run-dir/overlay/{upper,work}`.
    /// `None` when a path holds a character overlayfs's options cannot carry (`,` `:` `\`
    /// or a byte that is not UTF-8): that run's code is copied instead.
    pub fn for_run(run_dir: &Path, lower: &Path) -> Option<Overlay> {
        let base = run_dir.join("overlay");
        let overlay = Overlay {
            lower: lower.to_path_buf(),
            upper: base.join("upper"),
            work: base.join("work"),
        };
        [&overlay.lower, &overlay.upper, &overlay.work]
            .iter()
            .all(|p| p.to_str().is_some_and(|s| !s.contains([',', ':', '\\'])))
            .then_some(overlay)
    }

    /// Makes empty upper and work folders (what an earlier launch of the run left is gone).
    pub fn prepare(&self) -> io::Result<()> {
        if let Some(base) = self.upper.parent() {
            remove_all(base);
        }
        fs::create_dir_all(&self.upper)?;
        fs::create_dir_all(&self.work)
    }

    /// Deletes both layers the run wrote.
    pub fn remove(&self) {
        if let Some(base) = self.upper.parent() {
            remove_all(base);
        }
    }

    /// overlayfs's mount options for these layers.
    fn options(&self) -> String {
        format!(
            "lowerdir={},upperdir={},workdir={}",
            self.lower.display(),
            self.upper.display(),
            self.work.display()
        )
    }

    /// Mounts this overlay on `merged`. The caller (a run's supervisor) has made a mount
    /// namespace its own first (`sys::private_mount_namespace`), so that only it and what it
    /// starts afterwards (the run's bubblewrap) see the mount, and nothing is left mounted
    /// when it exits.
    ///
    /// Mounted `volatile` (Linux 5.10 and later; mounted without it where the kernel refuses
    /// it): overlayfs then skips every sync of the upper layer, its own unmount's included.
    /// Without it, the unmount when the supervisor exits syncs the whole file system under
    /// the upper layer: a run that printed one line took 0.68 s to end after a first ship had
    /// left 263 MB unwritten, and any run ends late beside a busy writer. Nothing is lost: the
    /// run's writes to `/workspace` are never kept, and the layers are made new for each try.
    pub fn mount(&self, merged: &Path) -> io::Result<()> {
        crate::sys::mount_writable_overlay(&self.options(), merged)
    }
}

/// Copies a tree (a run's `/workspace` where it is not an overlay, a Slurm node's copy):
/// directories, files (copy_file_range through `fs::copy`) and links, never following one.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &dest)?;
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// `remove_dir_all`, and where that is refused, again after giving back to each folder in
/// `dir` the permissions taken from it: overlayfs makes its `work/work` folder, and under it
/// `incompat/volatile` for a `volatile` mount, with mode 0, and a run may have made folders
/// of its own so. Root passes them, and so does a supervisor in its own user namespace; an
/// unprivileged server (the start-up probe, a relaunch's `prepare`) does not. (Root is
/// refused for other reasons, which no mode mends: it changes none.)
fn remove_all(dir: &Path) {
    if fs::remove_dir_all(dir).is_err() && !rustix::process::geteuid().is_root() {
        open_up(dir);
        let _ = fs::remove_dir_all(dir);
    }
}

/// Gives every folder under `dir` (and `dir`) mode 0700, never following a link that was
/// there when it looked (a user's own server, on its own files): a loop with a list of its
/// own, not a recursion, however deep a run made its tree.
fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut left = vec![dir.to_path_buf()];
    while let Some(folder) = left.pop() {
        match fs::symlink_metadata(&folder) {
            Ok(meta) if meta.is_dir() => {}
            _ => continue,
        }
        let _ = fs::set_permissions(&folder, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&folder) {
            left.extend(entries.flatten().map(|e| e.path()));
        }
    }
}

/// The start-up probe's folder in `home`, named for the server's process.
const PROBE_PREFIX: &str = "overlay-probe-";

/// Whether runs' `/workspace` can be overlays here: an overlay made the way a run's is (as
/// root, in a mount namespace of its own; otherwise in a user namespace of its own too), in
/// `home`, mounts and shows its lower layer's file to bubblewrap (`bwrap`: the sandbox's
/// program and its first flags), and takes bubblewrap's writes in its upper layer alone.
/// Tried once, when the server starts.
///
/// The caller holds `home` (its lock): any probe's folder found there is one a server killed
/// in its probe left, and is removed first.
pub fn overlay_works(home: &Path, bwrap: &[String]) -> bool {
    if let Ok(entries) = fs::read_dir(home) {
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(PROBE_PREFIX)
            {
                remove_all(&entry.path());
            }
        }
    }
    let probe = home.join(format!("{PROBE_PREFIX}{}", std::process::id()));
    let works = (|| -> io::Result<bool> {
        let lower = probe.join("lower");
        fs::create_dir_all(&lower)?;
        fs::write(lower.join("probe"), b"")?;
        let merged = probe.join("merged");
        fs::create_dir_all(&merged)?;
        let Some(overlay) = Overlay::for_run(&probe, &lower) else {
            return Ok(false);
        };
        overlay.prepare()?;
        // The forked child mounts it as a supervisor does, then execs bubblewrap.
        let mut argv = bwrap.to_vec();
        argv.extend(
            [
                "--ro-bind",
                "/",
                "/",
                // (Over `/tmp`, a folder the host's root has: `/` is read-only.)
                "--bind",
                &merged.display().to_string(),
                "/tmp",
                "/bin/sh",
                "-c",
                "test -f /tmp/probe && echo written > /tmp/new",
            ]
            .map(str::to_owned),
        );
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        crate::sys::with_overlay_in_private_namespace(&mut command, &overlay.options(), &merged)?;
        let status = command.status()?;
        Ok(status.success()
            && overlay.upper.join("new").is_file()
            && !lower.join("new").exists()
            && fs::read_dir(&merged)?.next().is_none())
    })()
    .unwrap_or(false);
    remove_all(&probe);
    works
}

#[cfg(test)]
mod tests {
    use super::Overlay;
    use std::path::Path;

    #[test]
    fn a_path_the_mount_options_cannot_carry_is_copied_instead() {
        let run = Path::new("/state/runs/r_1");
        let o = Overlay::for_run(run, Path::new("/state/volumes/p-code/code/abc")).unwrap();
        assert_eq!(o.upper, Path::new("/state/runs/r_1/overlay/upper"));
        assert_eq!(o.work, Path::new("/state/runs/r_1/overlay/work"));
        for bad in ["/st,ate", "/st:ate", "/st\\ate"] {
            assert_eq!(
                Overlay::for_run(Path::new(bad), Path::new("/x")),
                None,
                "{bad}"
            );
            assert_eq!(Overlay::for_run(run, Path::new(bad)), None, "{bad}");
        }
    }
}
