//! A GPU run's share of this machine's NVIDIA GPUs and driver, given the way NVIDIA's
//! container toolkit gives them (libnvidia-container's `nvc_info.c` and `nvc_mount.c`, and the
//! CDI specs `nvidia-ctk cdi generate` writes), as bubblewrap arguments: docs/gpus.md.
//!
//! - its GPUs' device nodes, found by the minor number the driver gives each GPU (never
//!   assumed to be `nvidia-smi`'s index), the driver's control nodes, `/dev/nvidia-caps` for
//!   MIG, and its GPUs' DRM nodes;
//! - `/proc/driver/nvidia` masked: a tmpfs with the driver's version, registry and parameters
//!   (device files never modified) and the run's GPUs' directories alone;
//! - in an image: the driver's libraries of the loaded kernel module's version (never a stale
//!   file ldconfig lists first) and programs under [`GPU_DRIVER_DIR`], the `libcuda.so` link,
//!   an `ld.so.cache` of the run's own (the image's entries and the driver's) bound over the
//!   image's so that a process that clears its environment still finds them, and, when the
//!   host has them, the persistence daemon's and fabric manager's sockets and the GSP
//!   firmware.
//!
//! Every host path is read through [`HostPaths`], so tests point it at a fake driver tree.

mod driver;
mod host;
mod ldcache;
#[cfg(test)]
mod tests;

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

pub use driver::{HostGpu, Libraries, libraries, parse_version, programs};
pub use host::{GpuError, HostPaths, Ldconfig};
pub use ldcache::LdCacheError;

use crate::image_tree::{self, MountPlace, PlaceError};

/// Where a GPU run in an image finds this machine's NVIDIA driver: its libraries in `lib/`
/// (in the run's loader cache) and its programs in `bin/` (appended to `PATH`), bound
/// read-only on the image's tmpfs root, as apptainer `--nv` binds them at
/// `/.singularity.d/libs`.
pub const GPU_DRIVER_DIR: &str = "/.div/nvidia";

/// The major number of the NVIDIA driver's device nodes (`/dev/nvidia<minor>`, `nvidiactl`).
const NVIDIA_MAJOR: u32 = 195;

/// `/proc/driver/nvidia` as every run sees it.
const PROC_IN_RUN: &str = "/proc/driver/nvidia";

/// The sockets of the driver's daemons, under `/run`: NVML and CUDA talk to them when they
/// are there (persistence mode; NVSwitch fabrics on HGX machines).
const SOCKETS: [&str; 2] = ["nvidia-persistenced/socket", "nvidia-fabricmanager/socket"];

/// The biggest image loader cache read (a few hundred KiB is usual).
const MAX_IMAGE_CACHE: u64 = 16 << 20;

/// What a GPU run is given, as bubblewrap arguments in three places of its command line
/// ([`crate::sandbox::bwrap_argv`]), and what is said about it in the log's first lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuPlan {
    /// Its GPUs as the driver lists them, in the order the run numbers them from 0.
    pub gpus: Vec<HostGpu>,
    /// After `--dev /dev`: its device nodes.
    pub(crate) dev: Vec<String>,
    /// After `/proc` is mounted: `/proc/driver/nvidia` masked.
    pub(crate) proc: Vec<String>,
    /// In an image, before its root turns read-only: the driver's files.
    pub(crate) root: Vec<String>,
    /// Put before the command (`export …` lines), or empty.
    pub(crate) prefix: String,
    /// Lines for the top of the run's log: what was left out, and why.
    pub notes: Vec<String>,
}

/// The variables a run on this machine's GPUs `indices` gets: CUDA numbers devices in PCI bus
/// order, as `nvidia-smi` does, and `CUDA_VISIBLE_DEVICES` names them. In the sandbox (`hidden`)
/// only the run's GPUs are there, so they are `0..n`; without it every GPU of the machine is,
/// and they are the machine's indices.
pub fn cuda_env(indices: &[u32], hidden: bool) -> Vec<(String, String)> {
    let list: Vec<String> = if hidden {
        (0..indices.len()).map(|i| i.to_string()).collect()
    } else {
        indices.iter().map(u32::to_string).collect()
    };
    vec![
        ("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()),
        ("CUDA_VISIBLE_DEVICES".to_owned(), list.join(",")),
    ]
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

impl GpuPlan {
    /// What a run on this machine's GPUs `indices` (as `nvidia-smi` numbers them: PCI bus
    /// order) gets, in the image at `image` (`None`: this machine's own system, whose driver
    /// is already there). Files of the run's own (its `ld.so.cache`, the driver's parameters)
    /// are written in `files`. Read at each launch, so a driver updated under a running
    /// server is the one given.
    pub fn resolve(
        host: &HostPaths,
        indices: &[u32],
        image: Option<&Path>,
        files: &Path,
    ) -> Result<GpuPlan, GpuError> {
        let all = driver::gpus(&host.proc_driver)?;
        let gpus = indices
            .iter()
            .map(|&index| {
                all.get(index as usize)
                    .cloned()
                    .ok_or_else(|| GpuError::NoSuchGpu {
                        index,
                        count: all.len(),
                        path: host.proc_driver.join("gpus"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        std::fs::create_dir_all(files).map_err(|error| GpuError::Write {
            path: files.to_path_buf(),
            error,
        })?;
        let mut plan = GpuPlan {
            dev: device_args(&host.dev, &gpus)?,
            proc: proc_args(&host.proc_driver, files, &gpus)?,
            gpus,
            ..GpuPlan::default()
        };
        if !is_char_device(&host.dev.join("nvidia-uvm")) {
            // The toolkit loads it (`nvidia-modprobe -u`); a run without capabilities cannot.
            plan.notes.push(
                "div: this machine has no /dev/nvidia-uvm (the nvidia-uvm module is not loaded): CUDA will not work in this run; load it on this machine with `nvidia-modprobe -u -c=0`".to_owned(),
            );
        }
        if let Some(rootfs) = image {
            image_args(host, rootfs, files, &mut plan)?;
        }
        Ok(plan)
    }

    /// Given after `--dev /dev` (and the read-only covers of `/proc`).
    pub fn dev_args(&self) -> &[String] {
        &self.dev
    }

    /// Given once `/proc` (and the read-only `/proc/driver` over it) is mounted.
    pub fn proc_args(&self) -> &[String] {
        &self.proc
    }

    /// Given in an image, before its root is made read-only.
    pub fn root_args(&self) -> &[String] {
        &self.root
    }

    /// The lines put before the run's command (empty, or ending in a newline).
    pub fn command_prefix(&self) -> &str {
        &self.prefix
    }
}

fn is_char_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// Whether `path` is the character device `major:minor` (any minor when `None`); why not.
fn device_problem(path: &Path, major: u32, minor: Option<u32>) -> Option<String> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return Some(e.to_string()),
    };
    let rdev = meta.rdev();
    let (got_major, got_minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    let right = meta.file_type().is_char_device()
        && got_major == major
        && minor.is_none_or(|m| m == got_minor);
    (!right).then(|| match minor {
        Some(m) => format!("it is not the character device {major}:{m}"),
        None => format!("it is not a character device of major {major}"),
    })
}

/// `--dev-bind` of the run's GPUs' nodes (by the minor the driver gives each), the driver's
/// control nodes, MIG's `nvidia-caps`, and each GPU's DRM nodes (found by its bus location in
/// `dri/by-path`); a node that is not what the driver says refuses the run.
fn device_args(dev: &Path, gpus: &[HostGpu]) -> Result<Vec<String>, GpuError> {
    let mut args = Vec::new();
    let mut bind = |name: &str| {
        args.extend([
            "--dev-bind".to_owned(),
            s(&dev.join(name)),
            format!("/dev/{name}"),
        ]);
    };
    let required = |name: &str, minor: Option<u32>| {
        let path = dev.join(name);
        match device_problem(&path, NVIDIA_MAJOR, minor) {
            Some(why) => Err(GpuError::DeviceNode { path, why }),
            None => Ok(()),
        }
    };
    for gpu in gpus {
        let name = format!("nvidia{}", gpu.minor);
        required(&name, Some(gpu.minor))?;
        bind(&name);
    }
    required("nvidiactl", None)?;
    bind("nvidiactl");
    for name in ["nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"] {
        if is_char_device(&dev.join(name)) {
            bind(name);
        }
    }
    if std::fs::symlink_metadata(dev.join("nvidia-caps")).is_ok_and(|m| m.is_dir()) {
        bind("nvidia-caps");
    }
    for gpu in gpus {
        let (domain, bus, device, function) = gpu.location;
        for kind in ["card", "render"] {
            let link = dev.join(format!(
                "dri/by-path/pci-{domain:04x}:{bus:02x}:{device:02x}.{function:x}-{kind}"
            ));
            let Some(node) = std::fs::read_link(&link).ok().and_then(|t| {
                t.file_name()
                    .and_then(|n| n.to_str())
                    .filter(|n| n.starts_with("card") || n.starts_with("renderD"))
                    .map(str::to_owned)
            }) else {
                continue;
            };
            let path = dev.join("dri").join(&node);
            if is_char_device(&path) {
                bind(&format!("dri/{node}"));
            }
        }
    }
    Ok(args)
}

/// `/proc/driver/nvidia` as the run sees it: a tmpfs holding the driver's version and
/// registry, its parameters with `ModifyDeviceFiles: 0` (a copy in `files`), and the run's
/// GPUs' directories (and MIG capabilities) alone; read-only.
fn proc_args(proc: &Path, files: &Path, gpus: &[HostGpu]) -> Result<Vec<String>, GpuError> {
    let mut args = vec!["--tmpfs".to_owned(), PROC_IN_RUN.to_owned()];
    let mut bind = |source: &Path, inside: &str| {
        args.extend([
            "--ro-bind".to_owned(),
            s(source),
            format!("{PROC_IN_RUN}/{inside}"),
        ]);
    };
    if let Ok(text) = std::fs::read_to_string(proc.join("params")) {
        let copy = files.join("params");
        std::fs::write(&copy, driver::run_params(&text)).map_err(|error| GpuError::Write {
            path: copy.clone(),
            error,
        })?;
        bind(&copy, "params");
    }
    for name in ["version", "registry"] {
        if proc.join(name).is_file() {
            bind(&proc.join(name), name);
        }
    }
    for gpu in gpus {
        bind(
            &proc.join("gpus").join(&gpu.bus_id),
            &format!("gpus/{}", gpu.bus_id),
        );
        let caps = format!("capabilities/gpu{}", gpu.minor);
        if proc.join(&caps).is_dir() {
            bind(&proc.join(&caps), &caps);
        }
    }
    args.extend(["--remount-ro".to_owned(), PROC_IN_RUN.to_owned()]);
    Ok(args)
}

/// What is bound into an image's root: mount points made on tmpfs covers of the run's own
/// where the image's read-only tree lacks them.
#[derive(Debug, Default)]
struct RootBinds {
    /// The image's directories covered ([`image_tree::cover_args`]).
    covers: Vec<PathBuf>,
    /// Under [`GPU_DRIVER_DIR`], on the root's own tmpfs.
    driver: Vec<String>,
    /// At their places in the image's tree.
    placed: Vec<String>,
}

impl RootBinds {
    fn bind_at(&mut self, place: MountPlace, source: &Path) {
        if let Some(cover) = place.cover
            && !self.covers.contains(&cover)
        {
            self.covers.push(cover);
        }
        self.placed
            .extend(["--ro-bind".to_owned(), s(source), s(&place.path)]);
    }

    fn bind(
        &mut self,
        rootfs: &Path,
        source: &Path,
        inside: &str,
        dir: bool,
    ) -> Result<(), PlaceError> {
        let place = image_tree::mount_place(rootfs, inside, dir)?;
        self.bind_at(place, source);
        Ok(())
    }

    /// The covers (outermost first), every bind, then the covers read-only again.
    fn args(mut self, rootfs: &Path) -> Vec<String> {
        self.covers.sort_by_key(|c| c.components().count());
        let mut args = Vec::new();
        for cover in &self.covers {
            args.extend(image_tree::cover_args(rootfs, cover));
        }
        args.extend(self.driver);
        args.extend(self.placed);
        for cover in self.covers.iter().rev() {
            args.extend(["--remount-ro".to_owned(), s(cover)]);
        }
        args
    }
}

/// The driver's files in an image: libraries and programs, the loader cache, the daemons'
/// sockets and the GSP firmware.
fn image_args(
    host: &HostPaths,
    rootfs: &Path,
    files: &Path,
    plan: &mut GpuPlan,
) -> Result<(), GpuError> {
    let version = driver::version(&host.proc_driver)?;
    let listing = driver::listing(&host.ldconfig)?;
    let libraries = driver::libraries(&listing, driver::LDCONFIG_ARCH, &version);
    let programs = driver::programs(&host.program_dirs);
    let mut root = RootBinds::default();
    let entries = library_binds(&libraries, &version, &mut root.driver, &mut plan.notes);
    for (name, real) in &programs {
        root.driver.extend([
            "--ro-bind".to_owned(),
            s(real),
            format!("{GPU_DRIVER_DIR}/bin/{name}"),
        ]);
    }
    let in_cache = loader_cache(rootfs, files, &entries, &mut root, &mut plan.notes)?;
    let mut wanted: Vec<(PathBuf, String, bool)> = SOCKETS
        .iter()
        .map(|name| (host.run.join(name), format!("/run/{name}"), false))
        .filter(|(p, _, _)| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    let firmware = host.firmware.join("nvidia").join(&version);
    if firmware.is_dir() {
        wanted.push((firmware, format!("/lib/firmware/nvidia/{version}"), true));
    }
    for (source, inside, dir) in wanted {
        if let Err(e) = root.bind(rootfs, &source, &inside, dir) {
            plan.notes.push(format!(
                "div: the driver's {} is not given to the run: {inside} cannot be made in the image ({e})",
                source.display()
            ));
        }
    }
    let mut exports = Vec::new();
    if !in_cache {
        exports.push(format!(
            "LD_LIBRARY_PATH=\"${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{GPU_DRIVER_DIR}/lib\""
        ));
    }
    if !programs.is_empty() {
        exports.push(format!("PATH=\"${{PATH:+$PATH:}}{GPU_DRIVER_DIR}/bin\""));
    }
    if !exports.is_empty() {
        plan.prefix = format!("export {}\n", exports.join(" "));
    }
    plan.root = root.args(rootfs);
    Ok(())
}

/// `--ro-bind` (or `--symlink`) of each chosen library under [`GPU_DRIVER_DIR`]`/lib`, and the
/// `libcuda.so` link CUDA's tools expect; returns the loader cache's entries for them. What
/// was left out for its version is said in `notes`.
fn library_binds(
    libraries: &Libraries,
    version: &str,
    args: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Vec<(String, String)> {
    let lib = |name: &str| format!("{GPU_DRIVER_DIR}/lib/{name}");
    let mut entries = Vec::new();
    for (name, real) in &libraries.chosen {
        // A development link (`libnvidia-ml.so`) to a file chosen under its soname as well
        // is a link to that name, as on the host.
        let soname = libraries.chosen.iter().find(|(n, r)| {
            r == real
                && n.len() > name.len()
                && n.starts_with(name.as_str())
                && name.ends_with(".so")
        });
        match soname {
            Some((target, _)) => args.extend(["--symlink".to_owned(), target.clone(), lib(name)]),
            None => args.extend(["--ro-bind".to_owned(), s(real), lib(name)]),
        }
        entries.push((name.clone(), lib(name)));
    }
    let has = |name: &str| libraries.chosen.iter().any(|(n, _)| n == name);
    if has("libcuda.so.1") && !has("libcuda.so") {
        // Many programs (and Triton's compiler, `-lcuda`) look for the development link,
        // which the driver's packages often leave out: the toolkit makes it too.
        args.extend([
            "--symlink".to_owned(),
            "libcuda.so.1".to_owned(),
            lib("libcuda.so"),
        ]);
        entries.push(("libcuda.so".to_owned(), lib("libcuda.so")));
    }
    for (name, real) in &libraries.stale {
        if name != "libcuda.so" {
            notes.push(format!(
                "div: left out {} ({name} in ldconfig's cache): not of the loaded driver {version}",
                real.display()
            ));
        }
    }
    if !has("libcuda.so.1") {
        notes.push(format!(
            "div: ldconfig's cache has no libcuda.so.1 of the loaded driver {version}: CUDA will not work in this run"
        ));
    }
    entries
}

/// The run's own `ld.so.cache`: the image's entries with the driver's `entries` added,
/// written in `files` and bound over the image's `/etc/ld.so.cache`. `false` (said in
/// `notes`) when the image's tree has no place for it: the driver is then found through
/// `LD_LIBRARY_PATH` alone.
fn loader_cache(
    rootfs: &Path,
    files: &Path,
    entries: &[(String, String)],
    root: &mut RootBinds,
    notes: &mut Vec<String>,
) -> Result<bool, GpuError> {
    let place = match image_tree::mount_place(rootfs, "/etc/ld.so.cache", false) {
        Ok(place) => place,
        Err(e) => {
            notes.push(format!(
                "div: the driver's libraries are found through LD_LIBRARY_PATH alone: the image has no place for a loader cache of the run's own at /etc/ld.so.cache ({e})"
            ));
            return Ok(false);
        }
    };
    let image = if place.exists {
        match image_cache(&image_tree::host(rootfs, &place.path)) {
            Ok(cache) => cache,
            Err(why) => {
                notes.push(format!(
                    "div: the image's /etc/ld.so.cache is not read ({why}): the run's holds the driver's libraries alone"
                ));
                ldcache::LdCache::default()
            }
        }
    } else {
        ldcache::LdCache::default()
    };
    let merged = ldcache::with_libraries(image, entries);
    let path = files.join("ld.so.cache");
    let bytes = ldcache::write(
        &merged,
        "div: the image's ld.so.cache and the NVIDIA driver's libraries",
    );
    std::fs::write(&path, bytes).map_err(|error| GpuError::Write {
        path: path.clone(),
        error,
    })?;
    root.bind_at(place, &path);
    Ok(true)
}

/// Why an image's loader cache is not read.
#[derive(Debug, thiserror::Error)]
enum ImageCacheError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("not a plain file of at most 16 MiB")]
    NotAPlainFile,
    #[error("{0}")]
    Format(#[from] LdCacheError),
}

/// The image's loader cache at `file` (in its tree: a plain file, never followed out of it).
fn image_cache(file: &Path) -> Result<ldcache::LdCache, ImageCacheError> {
    let meta = std::fs::symlink_metadata(file)?;
    if !meta.is_file() || meta.len() > MAX_IMAGE_CACHE {
        return Err(ImageCacheError::NotAPlainFile);
    }
    Ok(ldcache::parse(&std::fs::read(file)?)?)
}
