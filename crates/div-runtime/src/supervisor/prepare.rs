//! Before the run starts: its log opened and its first lines written, its cores pinned, its
//! cgroups made, and, in a mount namespace of the supervisor's own (which bubblewrap
//! inherits), its own disk, its overlay `/workspace` and the `python` shim mounted.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::spec::{EndRecord, RunSpec, early_end};
use crate::cgroup::RunCgroups;
use crate::scratch::{self, Disk};
use crate::{rules, sys};

/// What the run is given, made ready: everything the later phases hold it to and clean up.
#[derive(Debug)]
pub(super) struct Room {
    pub(super) log: File,
    pub(super) log_path: PathBuf,
    pub(super) cgroups: RunCgroups,
    /// The most tasks it may have at once.
    pub(super) tasks: u64,
    /// Whether it runs in bubblewrap (else directly, and unsandboxed).
    pub(super) sandboxed: bool,
    /// Whether its `/workspace` is an overlay mounted here.
    pub(super) overlay: bool,
    /// Its writable places (`/tmp`, its own `/mnt`, its `/workspace`).
    pub(super) places: Vec<PathBuf>,
    /// Those laid onto a disk of its own.
    pub(super) on_disk: Vec<PathBuf>,
    /// Its disk, and whether it is a filesystem of its own.
    pub(super) disk: Option<Disk>,
    /// Whether a disk of its own was asked for (and so is let go at the end).
    pub(super) own_disk: bool,
    /// Its run directory's identity ([`dir_identity`]), to tell it gone later.
    pub(super) own_dir: Option<(u64, u64)>,
}

impl Room {
    /// Lets go of what the room holds on the machine: its cgroups and its own disk.
    pub(super) fn let_go(&self, run_dir: &Path) {
        self.cgroups.remove();
        scratch::remove(run_dir, &self.on_disk);
    }
}

/// Opens the run's log, pins it to its cores, makes its cgroups and mounts its places; an
/// early end, written into the log, when it cannot.
pub(super) fn prepare(run_dir: &Path, spec: &RunSpec) -> Result<Room, EndRecord> {
    let own_dir = dir_identity(run_dir);
    let log_path = run_dir.join("log");
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| early_end(spec, format!("the log could not be opened: {e}")))?;
    for line in &spec.first_lines {
        let _ = writeln!(log, "{line}");
    }
    if !spec.cores.is_empty()
        && let Err(e) = sys::set_affinity(&spec.cores)
    {
        let _ = writeln!(log, "div: could not pin the run to its cores: {e}");
    }
    let tasks = spec.tasks.unwrap_or(rules::MAX_RUN_TASKS);
    let cgroups = make_cgroups(spec, tasks, &mut log);
    crate::phases::mark(run_dir, "cgroups");
    let sandboxed = spec.mnt_dir.is_some();
    // The run's writable places: on its own disk where it has one (`crate::scratch`), else
    // measured against its size. A copy of the code (no overlay) stays where the launcher
    // made it: only folders are laid onto a disk of its own.
    let places = writable_places(run_dir, spec);
    let on_disk: Vec<PathBuf> = places
        .iter()
        .filter(|p| **p != spec.workspace)
        .cloned()
        .collect();
    let disk = spec.disk.clone().filter(|_| sandboxed);
    let mut room = Room {
        own_disk: disk.as_ref().is_some_and(|d| d.own_filesystem),
        log,
        log_path,
        cgroups,
        tasks,
        sandboxed,
        overlay: spec.overlay.is_some() && sandboxed,
        places,
        on_disk,
        disk,
        own_dir,
    };
    if let Err(e) = mount_places(run_dir, spec, &mut room) {
        let _ = writeln!(
            room.log,
            "div: the run's /workspace could not be mounted: {e}"
        );
        room.let_go(run_dir);
        return Err(early_end(
            spec,
            format!("the run's /workspace could not be mounted: {e}"),
        ));
    }
    Ok(room)
}

/// The run's cgroups, each one that could not be made said in the log.
fn make_cgroups(spec: &RunSpec, tasks: u64, log: &mut File) -> RunCgroups {
    let cgroups = RunCgroups::make(
        &spec.cgroups,
        &spec.run_id,
        spec.memory_bytes,
        spec.cores.len(),
        tasks,
    );
    if spec.cgroups.memory.is_some() && cgroups.memory.is_none() {
        let _ = writeln!(
            log,
            "div: no memory cgroup could be made; memory is held by polling (a soft limit)"
        );
    }
    if spec.cgroups.cpu.is_some() && cgroups.cpu.is_none() && !spec.cores.is_empty() {
        let _ = writeln!(
            log,
            "div: no CPU cgroup could be made; the run is held to its cores by affinity alone"
        );
    }
    cgroups
}

/// The run's own disk, its overlay `/workspace` and the `python` shim, mounted in a mount
/// namespace this supervisor makes its own, which bubblewrap inherits: no process is started
/// for them. A disk that cannot be made falls back to being measured, and says so.
fn mount_places(run_dir: &Path, spec: &RunSpec, room: &mut Room) -> std::io::Result<()> {
    let overlay = spec.overlay.as_ref().filter(|_| room.sandboxed);
    let shim = spec.python_shim.as_deref().filter(|_| room.sandboxed);
    if overlay.is_none() && shim.is_none() && !room.own_disk {
        return Ok(());
    }
    // Without root, in a user namespace of its own first, as its own user (the server found
    // that works: `workspace::overlay_works`).
    if rustix::process::geteuid().is_root() {
        sys::private_mount_namespace()?;
    } else {
        sys::private_user_and_mount_namespace()?;
    }
    if let Some(d) = room.disk.as_mut().filter(|d| d.own_filesystem)
        && let Err(e) = scratch::mount(run_dir, d.bytes, d.ready, &room.on_disk)
    {
        scratch::remove(run_dir, &room.on_disk);
        let _ = writeln!(
            room.log,
            "div: the run's own disk could not be made ({e}); its disk is measured instead, a soft limit"
        );
        d.own_filesystem = false;
    }
    if let Some(o) = overlay {
        o.mount(&spec.workspace)?;
    }
    if let Some(shim) = shim {
        crate::sandbox::lay_python_shim(shim)?;
    }
    Ok(())
}

/// The run's writable places in its directory: its `/tmp`, its own `/mnt`, and its
/// `/workspace` (the overlay's layers, or the copy).
fn writable_places(run_dir: &Path, spec: &RunSpec) -> Vec<PathBuf> {
    let mut places = Vec::new();
    if let Some(tmp) = spec.result_path.parent().and_then(Path::parent)
        && tmp.starts_with(run_dir)
    {
        places.push(tmp.to_path_buf());
    }
    if let Some(mnt) = &spec.mnt_dir {
        places.push(mnt.clone());
    }
    match &spec.overlay {
        Some(layers) => places.extend(layers.upper.parent().map(Path::to_path_buf)),
        None => places.push(spec.workspace.clone()),
    }
    places.retain(|p| p.starts_with(run_dir));
    places
}

/// A directory's device and inode: which directory it is, whatever its name.
pub(super) fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}
