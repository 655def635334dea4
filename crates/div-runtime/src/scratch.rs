//! A run's own disk: one ext4 filesystem per run, in a sparse image file in its run
//! directory, loop-mounted by its supervisor (as root) in its own mount namespace. The run's
//! writable places, `/tmp`, its own `/mnt` and the upper layer of its overlay `/workspace`,
//! live on it, so a run that fills them gets `ENOSPC` itself and no other run or the control
//! plane loses a byte; the image is removed when the run ends.
//!
//! The server gives each run its size when it starts it ([`allowance`]): `run_disk_gib` of
//! `settings.json`, by default 16 GiB or an eighth of the state directory's filesystem where
//! that is less ([`wanted`]), never more than that filesystem can back with every other
//! run's disk filled to its own size and the control plane's [`reserve`] kept (the images
//! are sparse: what a run has not written takes nothing). A run that cannot get
//! [`MIN_BYTES`] waits in the queue.
//!
//! Where no loop device can be mounted (an unprivileged server), the same places are on the
//! state directory's filesystem and the supervisor measures them every few seconds, stopping
//! a run past its size: a soft limit, as memory is without a cgroup (docs/reliability.md).

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// What a run's disk is given by default: 16 GiB (or less on a small disk, [`wanted`]).
pub const DEFAULT_GIB: u64 = 16;
/// The least a run is started with: 64 MiB (less, and it waits).
pub const MIN_BYTES: u64 = 64 << 20;

/// The disk a run asks for on a filesystem of `size` bytes: `setting_gib` (`run_disk_gib`),
/// or 16 GiB, or an eighth of the filesystem where that is less.
pub fn wanted(setting_gib: Option<u64>, size: u64) -> u64 {
    match setting_gib {
        Some(gib) => gib.saturating_mul(1 << 30),
        None => (DEFAULT_GIB << 30).min(size / 8),
    }
}
/// The image file, in the run directory.
pub const IMAGE: &str = "disk.img";
/// Where the supervisor mounts it, in the run directory.
const MOUNT: &str = "disk";

/// A run's disk, as the server gives it (in `spec.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// Its size.
    pub bytes: u64,
    /// Whether it is a filesystem of its own (a loop-mounted image); else the run's places
    /// are measured against `bytes` (a soft limit).
    pub own_filesystem: bool,
    /// Whether its image is in the run directory already, formatted (`take_from_pool`).
    #[serde(default)]
    pub ready: bool,
}

/// The space kept free on the state directory's filesystem for the control plane's own
/// writes (logs, results, ends, the database, uploads): a tenth of the filesystem, at most
/// 1 GiB.
pub fn reserve(filesystem_bytes: u64) -> u64 {
    (filesystem_bytes / 10).min(1 << 30)
}

/// The state directory's filesystem: its size and what an unprivileged writer may still
/// write (`statvfs`).
pub fn space(home: &Path) -> io::Result<(u64, u64)> {
    let st = rustix::fs::statvfs(home)?;
    Ok((
        st.f_blocks.saturating_mul(st.f_frsize),
        st.f_bavail.saturating_mul(st.f_frsize),
    ))
}

/// What an image takes on the disk now (its allocated blocks: it is sparse).
pub fn allocated(run_dir: &Path) -> u64 {
    fs::metadata(run_dir.join(IMAGE)).map_or(0, |m| m.blocks().saturating_mul(512))
}

/// The disk a new run can be given: `wanted`, or less where the filesystem (`free` bytes an
/// unprivileged writer may write, of `size`) could not back it with `promised` bytes still
/// owed to the disks of runs going (their sizes less what they hold already) and the
/// [`reserve`] kept. `None`: not even [`MIN_BYTES`].
pub fn allowance(wanted: u64, size: u64, free: u64, promised: u64) -> Option<u64> {
    let backable = free.saturating_sub(reserve(size)).saturating_sub(promised);
    let bytes = wanted.min(backable);
    (bytes >= MIN_BYTES).then_some(bytes)
}

/// Whether this machine lets a run have a filesystem of its own: a probe image made,
/// formatted and mounted in a child's own mount namespace, then removed. Root only.
pub fn works(home: &Path) -> bool {
    if !rustix::process::geteuid().is_root() {
        return false;
    }
    let dir = home.join(format!(".disk-probe-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let ok = fs::create_dir_all(dir.join(MOUNT)).is_ok()
        && make_image(&dir.join(IMAGE), 16 << 20, false).is_ok()
        && Command::new("unshare")
            .args(["--mount", "--propagation", "private", "mount"])
            .args(mount_args(&dir))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    let _ = fs::remove_dir_all(&dir);
    ok
}

fn mount_args(run_dir: &Path) -> Vec<String> {
    vec![
        "-t".to_owned(),
        "ext4".to_owned(),
        "-o".to_owned(),
        "loop,nosuid,nodev,noatime,noinit_itable".to_owned(),
        run_dir.join(IMAGE).display().to_string(),
        run_dir.join(MOUNT).display().to_string(),
    ]
}

/// A sparse file of `bytes`, formatted ext4 (no journal, no blocks kept for root: all of it
/// is the run's, and it is thrown away when the run ends).
fn make_image(image: &Path, bytes: u64, background: bool) -> io::Result<()> {
    let _ = fs::remove_file(image);
    let file = fs::File::create(image)?;
    file.set_len(bytes)?;
    drop(file);
    // Made for a later run, it yields to every run going.
    let nice = Path::new("/usr/bin/nice");
    let mut command = if background && nice.is_file() {
        let mut c = Command::new(nice);
        c.args(["-n", "19"]).arg(mkfs());
        c
    } else {
        Command::new(mkfs())
    };
    let out = command
        .args(["-q", "-F", "-m", "0", "-O", "^has_journal"])
        .args(["-E", "lazy_itable_init=1,nodiscard"])
        .arg(image)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "mkfs.ext4 failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// `mkfs.ext4` by absolute path (never a PATH's).
fn mkfs() -> PathBuf {
    [
        "/usr/sbin/mkfs.ext4",
        "/sbin/mkfs.ext4",
        "/usr/bin/mkfs.ext4",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .unwrap_or_else(|| PathBuf::from("/usr/sbin/mkfs.ext4"))
}

/// Makes the run's disk and lays it under `places` (folders of the run directory: its
/// `tmp`, `mnt`, `overlay`), in the calling supervisor's own mount namespace: each is made
/// on the new filesystem with the same mode and what the launcher put in it (its folders),
/// then bound over the original. What the run writes there lands on its disk alone.
pub fn mount(run_dir: &Path, bytes: u64, ready: bool, places: &[PathBuf]) -> io::Result<()> {
    let image = run_dir.join(IMAGE);
    // A ready image (formatted beforehand, `fill_pool`) is there already.
    if !(ready && fs::metadata(&image).is_ok_and(|m| m.len() == bytes)) {
        make_image(&image, bytes, false)?;
    }
    let target = run_dir.join(MOUNT);
    fs::create_dir_all(&target)?;
    if crate::sys::mount_loop_ext4(&image, &target).is_err() {
        // Where the system calls cannot (no `/dev/loopN` made for a free device, an older
        // kernel), mount(8) does it its own way.
        let out = Command::new(mount_program())
            .args(mount_args(run_dir))
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "mount failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    for place in places {
        let Some(name) = place.file_name() else {
            continue;
        };
        let on_disk = target.join(name);
        copy_folders(place, &on_disk)?;
        rustix::mount::mount_bind(&on_disk, place)?;
    }
    Ok(())
}

/// Keeps `count` formatted images of `bytes` ready in `pool` (`home/disks`), so that a run's
/// start does not wait for `mkfs` (about 30 ms for 16 GiB): made one at a time, named only
/// once whole.
pub fn fill_pool(pool: &Path, bytes: u64, count: usize) -> io::Result<()> {
    fs::create_dir_all(pool)?;
    // Half-made ones an earlier server left, and ready ones of another size.
    for entry in fs::read_dir(pool)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".making-") || !name.starts_with(&format!("{bytes}-")) {
            let _ = fs::remove_file(entry.path());
        }
    }
    loop {
        let ready = fs::read_dir(pool)?
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{bytes}-"))
            })
            .count();
        if ready >= count {
            return Ok(());
        }
        let staged = pool.join(format!(".making-{}", std::process::id()));
        make_image(&staged, bytes, true)?;
        let name = format!("{bytes}-{}.img", crate::clock::now_ms());
        fs::rename(&staged, pool.join(name))?;
    }
}

/// Moves a ready image of `bytes` from `pool` to be the run's in `run_dir`; whether one was
/// there.
pub fn take_from_pool(pool: &Path, bytes: u64, run_dir: &Path) -> bool {
    let Ok(dir) = fs::read_dir(pool) else {
        return false;
    };
    let prefix = format!("{bytes}-");
    dir.flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".img")
        })
        .any(|e| fs::rename(e.path(), run_dir.join(IMAGE)).is_ok())
}

/// `mount` by absolute path.
fn mount_program() -> PathBuf {
    ["/usr/bin/mount", "/bin/mount", "/usr/sbin/mount"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/bin/mount"))
}

/// Makes `to` as `from` is, folders only (the launcher's mount points and `tmp/divergent`),
/// each with its mode.
fn copy_folders(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    let mode = fs::symlink_metadata(from)?.permissions().mode();
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            copy_folders(&entry.path(), &to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// Unmounts the run's disk (and what was bound from it) in the calling supervisor's
/// namespace, and removes its image: the space is free again.
pub fn remove(run_dir: &Path, places: &[PathBuf]) {
    for place in places {
        let _ = rustix::mount::unmount(place, rustix::mount::UnmountFlags::DETACH);
    }
    let _ = rustix::mount::unmount(run_dir.join(MOUNT), rustix::mount::UnmountFlags::DETACH);
    let _ = fs::remove_dir(run_dir.join(MOUNT));
    let _ = fs::remove_file(run_dir.join(IMAGE));
}

/// What `places` hold now, in bytes (for the soft limit: no filesystem of its own).
pub fn used(places: &[PathBuf]) -> u64 {
    places
        .iter()
        .map(|p| crate::disk::tree_bytes(p))
        .sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_gets_what_the_disk_can_back_past_what_is_owed_and_the_reserve() {
        const GIB: u64 = 1 << 30;
        // 100 GiB free of 200: the reserve is 1 GiB; 16 GiB wanted, given.
        assert_eq!(allowance(16 * GIB, 200 * GIB, 100 * GIB, 0), Some(16 * GIB));
        // 90 GiB owed to runs going: 9 left past the reserve.
        assert_eq!(
            allowance(16 * GIB, 200 * GIB, 100 * GIB, 90 * GIB),
            Some(9 * GIB)
        );
        // Nothing left: waits.
        assert_eq!(allowance(16 * GIB, 200 * GIB, 100 * GIB, 99 * GIB), None);
        // A small filesystem: 1 GiB, its reserve a tenth; a run asks for an eighth.
        assert_eq!(reserve(GIB), GIB / 10);
        assert_eq!(wanted(None, GIB), GIB / 8);
        assert_eq!(wanted(None, 1000 * GIB), 16 * GIB);
        assert_eq!(wanted(Some(2), GIB), 2 * GIB);
        assert_eq!(allowance(GIB / 8, GIB, GIB, 0), Some(GIB / 8));
        assert_eq!(
            allowance(GIB / 8, GIB, GIB / 10 + (32 << 20), 0),
            None,
            "under 64 MiB past the reserve"
        );
    }
}
