//! This machine's NVIDIA driver as its own files tell it: the loaded kernel module's version
//! (`/proc/driver/nvidia/version`), its GPUs (`/proc/driver/nvidia/gpus/<bus>/information`:
//! where each sits on the PCI bus and the minor number of its `/dev/nvidia<minor>`), and the
//! user-space files that belong to that module (ldconfig's listing, filtered by version).

use std::path::{Path, PathBuf};

use super::host::{GpuError, Ldconfig};

/// The driver's user-space libraries a CUDA or NVML program loads (nvidia-container-toolkit's
/// `compute` and `utility` sets, `libnvidia-nscq` for NVSwitch machines among them): a name
/// matches itself or itself with a version after it (`libcuda.so`, `libcuda.so.1`).
const LIBRARIES: [&str; 14] = [
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-ml.so",
    "libnvidia-cfg.so",
    "libnvidia-nscq.so",
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
const PROGRAMS: [&str; 5] = [
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

/// `ldconfig -p`'s tag for this machine's own libraries (not the 32-bit ones beside them).
pub(crate) const LDCONFIG_ARCH: &str = if cfg!(target_arch = "aarch64") {
    "AArch64"
} else {
    "x86-64"
};

/// One of this machine's GPUs as the driver lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGpu {
    /// Its directory under `/proc/driver/nvidia/gpus` (`0000:3b:00.0`).
    pub bus_id: String,
    /// The minor number of its device node, `/dev/nvidia<minor>`.
    pub minor: u32,
    /// Its PCI domain, bus, device and function, the order `nvidia-smi` numbers GPUs in.
    pub location: (u32, u32, u32, u32),
}

/// The loaded kernel module's version from the text of `/proc/driver/nvidia/version`: the
/// first word of its `NVRM version:` line made of digits and dots (`550.54.15` in `NVRM
/// version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 …`, and in the open
/// module's `… Open Kernel Module for x86_64  550.54.15  Release Build …`).
pub fn parse_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
}

/// The loaded driver's version, from `proc_driver/version`.
pub(crate) fn version(proc_driver: &Path) -> Result<String, GpuError> {
    let path = proc_driver.join("version");
    let text = std::fs::read_to_string(&path).map_err(|e| GpuError::Version {
        path: path.clone(),
        why: e.to_string(),
    })?;
    parse_version(&text).ok_or(GpuError::Version {
        path,
        why: "it has no `NVRM version:` line with a version in it".to_owned(),
    })
}

/// `0000:3b:00.0` as numbers (a 16- or 32-bit domain, as the driver writes either).
fn parse_location(text: &str) -> Option<(u32, u32, u32, u32)> {
    let (domain, rest) = text.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(device)?, hex(function)?))
}

/// `Bus Location:` and `Device Minor:` of a GPU's `information` file.
fn parse_information(text: &str) -> Option<((u32, u32, u32, u32), u32)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(str::trim))
    };
    let location = parse_location(field("Bus Location:")?)?;
    let minor = field("Device Minor:")?.parse().ok()?;
    Some((location, minor))
}

/// Every GPU the driver lists in `proc_driver/gpus`, in the order of their PCI bus location:
/// the order `nvidia-smi` (NVML) numbers them in, and so the server's GPU indices.
pub(crate) fn gpus(proc_driver: &Path) -> Result<Vec<HostGpu>, GpuError> {
    let dir = proc_driver.join("gpus");
    let list = |e: std::io::Error| GpuError::GpuList {
        path: dir.clone(),
        error: e,
    };
    let mut gpus = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(list)? {
        let entry = entry.map_err(list)?;
        let Some(bus_id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // A name that is not one bus location is nothing the driver wrote.
        if parse_location(&bus_id).is_none() || bus_id.contains('/') {
            continue;
        }
        let path = entry.path().join("information");
        let text = std::fs::read_to_string(&path).map_err(|e| GpuError::GpuInformation {
            path: path.clone(),
            why: e.to_string(),
        })?;
        let (location, minor) = parse_information(&text).ok_or(GpuError::GpuInformation {
            path,
            why: "it has no `Bus Location:` and `Device Minor:` lines".to_owned(),
        })?;
        gpus.push(HostGpu {
            bus_id,
            minor,
            location,
        });
    }
    gpus.sort_by_key(|g| g.location);
    Ok(gpus)
}

/// The driver's parameters as a run is given them: `ModifyDeviceFiles: 0`, so the driver's
/// libraries never try to make device nodes of GPUs the run was not given (the toolkit does
/// the same).
pub(crate) fn run_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.trim_start().starts_with("ModifyDeviceFiles:") {
            out.push_str("ModifyDeviceFiles: 0");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The driver's libraries in ldconfig's listing, and what was left out of it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Libraries {
    /// By the name the loader asks for, the real file of the loaded driver's version, in the
    /// listing's order.
    pub chosen: Vec<(String, PathBuf)>,
    /// Files of another version (a driver left behind by an upgrade), by name, resolved.
    pub stale: Vec<(String, PathBuf)>,
}

/// The driver's libraries in `ldconfig -p`'s listing (`\tlibcuda.so.1 (libc6,x86-64) =>
/// /usr/lib/x86_64-linux-gnu/libcuda.so.1`), of architecture `arch` only: for each name the
/// first whose real file (links resolved) is named for the loaded driver's `version`
/// (`libcuda.so.550.54.15`), as libnvidia-container chooses them. An earlier file of another
/// version is left out, and listed as stale.
pub fn libraries(listing: &str, arch: &str, version: &str) -> Libraries {
    let mut out = Libraries::default();
    let suffix = format!(".so.{version}");
    for line in listing.lines() {
        let Some((left, path)) = line.trim().split_once(" => ") else {
            continue;
        };
        let Some((name, flags)) = left.split_once(' ') else {
            continue;
        };
        let ours = LIBRARIES.iter().any(|lib| {
            name.strip_prefix(lib)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        });
        // A name is one path component: nothing is bound anywhere but the driver's folder.
        if !ours || !flags.contains(arch) || name.contains('/') || name.starts_with('.') {
            continue;
        }
        if out.chosen.iter().any(|(n, _)| n == name) {
            continue;
        }
        let Ok(real) = Path::new(path).canonicalize() else {
            continue;
        };
        if !real.is_file() {
            continue;
        }
        let matches = real
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(&suffix));
        if matches {
            out.chosen.push((name.to_owned(), real));
        } else {
            out.stale.push((name.to_owned(), real));
        }
    }
    out.stale
        .retain(|(name, _)| !out.chosen.iter().any(|(n, _)| n == name));
    out
}

/// The driver's programs found in `dirs`, the first of each name, resolved.
pub fn programs(dirs: &[PathBuf]) -> Vec<(String, PathBuf)> {
    PROGRAMS
        .iter()
        .filter_map(|name| {
            dirs.iter()
                .filter_map(|d| d.join(name).canonicalize().ok())
                .find(|p| p.is_file())
                .map(|p| ((*name).to_owned(), p))
        })
        .collect()
}

/// ldconfig's listing of this machine's loader cache.
pub(crate) fn listing(ldconfig: &Ldconfig) -> Result<String, GpuError> {
    match ldconfig {
        Ldconfig::Listing(text) => Ok(text.clone()),
        Ldconfig::Program(candidates) => {
            let program =
                candidates
                    .iter()
                    .find(|p| p.is_file())
                    .ok_or_else(|| GpuError::Ldconfig {
                        why: format!(
                            "none of {} is there",
                            candidates
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    })?;
            let out = std::process::Command::new(program)
                .arg("-p")
                .env_clear()
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .map_err(|e| GpuError::Ldconfig {
                    why: format!("{} could not run: {e}", program.display()),
                })?;
            if !out.status.success() {
                return Err(GpuError::Ldconfig {
                    why: format!("`{} -p` failed ({})", program.display(), out.status),
                });
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    }
}
