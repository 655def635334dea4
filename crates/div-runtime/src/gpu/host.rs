//! The host a GPU run is given from: where its driver's files are ([`HostPaths`], a fake
//! tree's in tests), how the loader cache is listed ([`Ldconfig`]), and why a run cannot be
//! given its GPUs ([`GpuError`]).

use std::path::PathBuf;

/// Where this machine's driver is looked at: its real places for a run
/// ([`HostPaths::host`]); a fake tree's in tests.
#[derive(Debug, Clone)]
pub struct HostPaths {
    /// `/dev`: the GPUs' device nodes.
    pub dev: PathBuf,
    /// `/proc/driver/nvidia`: the driver's version, parameters and GPUs.
    pub proc_driver: PathBuf,
    /// `/lib/firmware`: the GSP firmware, in `nvidia/<version>`.
    pub firmware: PathBuf,
    /// `/run`: the driver daemons' sockets.
    pub run: PathBuf,
    /// Where the driver's libraries are listed.
    pub ldconfig: Ldconfig,
    /// Where the driver's programs are looked for, in order.
    pub program_dirs: Vec<PathBuf>,
}

/// How ldconfig's listing of the loader cache (`ldconfig -p`) is had.
#[derive(Debug, Clone)]
pub enum Ldconfig {
    /// Running the first of these that exists.
    Program(Vec<PathBuf>),
    /// This text (tests).
    Listing(String),
}

impl HostPaths {
    /// This machine's own places.
    pub fn host() -> HostPaths {
        let paths = |list: &[&str]| list.iter().map(PathBuf::from).collect();
        HostPaths {
            dev: PathBuf::from("/dev"),
            proc_driver: PathBuf::from("/proc/driver/nvidia"),
            firmware: PathBuf::from("/lib/firmware"),
            run: PathBuf::from("/run"),
            ldconfig: Ldconfig::Program(paths(&[
                "/sbin/ldconfig",
                "/usr/sbin/ldconfig",
                "/usr/bin/ldconfig",
            ])),
            program_dirs: paths(&["/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin", "/sbin"]),
        }
    }
}

/// Why a GPU run cannot be given its GPUs.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("the NVIDIA driver's list of GPUs ({}) could not be read: {error}", .path.display())]
    GpuList {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} is not as the NVIDIA driver writes it: {why}", .path.display())]
    GpuInformation { path: PathBuf, why: String },
    #[error("this run was given GPU {index}, but the NVIDIA driver lists {count} ({})", .path.display())]
    NoSuchGpu {
        index: u32,
        count: usize,
        path: PathBuf,
    },
    #[error("{} is not the device node the NVIDIA driver names: {why}", .path.display())]
    DeviceNode { path: PathBuf, why: String },
    #[error(
        "the loaded NVIDIA driver's version could not be read from {} ({why}), and without it its libraries cannot be told from another driver's",
        .path.display()
    )]
    Version { path: PathBuf, why: String },
    #[error("the driver's libraries could not be listed: {why}")]
    Ldconfig { why: String },
    #[error("the run's GPU files could not be written in {}: {error}", .path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}
