//! The fake host: eight GPUs, two drivers, the daemons' sockets, the firmware, an image.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::super::ldcache::{self, Entry, LdCache, OWN_FLAGS};
use super::super::{HostPaths, Ldconfig};

pub(super) const LOADED: &str = "550.54.15";
pub(super) const STALE: &str = "535.104.05";
/// The eight GPUs' bus locations (their order is `nvidia-smi`'s numbering) and the minor the
/// driver gave each: not their index.
pub(super) const BUSES: [&str; 8] = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
];
pub(super) const MINORS: [u32; 8] = [4, 5, 6, 7, 0, 1, 2, 3];

pub(super) fn s(p: &Path) -> String {
    p.display().to_string()
}

pub(super) fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Whether this process may make device nodes; says so when it may not.
pub(super) fn may_mknod(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!(
            "SKIPPED {test}: making device nodes (mknod) needs root; CI runs the tests as root"
        );
    }
    root
}

pub(super) fn mknod(path: &Path, major: u32, minor: u32) {
    use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    mknodat(
        CWD,
        path,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        makedev(major, minor),
    )
    .unwrap();
}

/// A shared library of this machine's (`libz.so.1`, found through its own loader cache) to
/// stand in for the driver's `libcuda`, so that the loader in a sandbox can really load it.
pub(super) fn real_library() -> Option<PathBuf> {
    let cache = ldcache::parse(&std::fs::read("/etc/ld.so.cache").ok()?).ok()?;
    let entry = cache
        .entries
        .iter()
        .find(|e| e.key == b"libz.so.1" && e.flags == OWN_FLAGS)?;
    let path = PathBuf::from(String::from_utf8(entry.value.clone()).ok()?);
    path.canonicalize().ok()
}

/// The eight GPUs' nodes (and DRM nodes, by bus location), their `information` files, and
/// the driver's control nodes.
pub(super) fn fake_gpus(dev: &Path, proc: &Path) {
    for (i, (bus, minor)) in BUSES.iter().zip(MINORS).enumerate().rev() {
        mknod(&dev.join(format!("nvidia{minor}")), 195, minor);
        mknod(&dev.join(format!("dri/card{minor}")), 226, minor);
        mknod(
            &dev.join(format!("dri/renderD{}", 128 + minor)),
            226,
            128 + minor,
        );
        std::fs::create_dir_all(dev.join("dri/by-path")).unwrap();
        for (kind, node) in [
            ("card", format!("card{minor}")),
            ("render", format!("renderD{}", 128 + minor)),
        ] {
            let link = dev.join(format!("dri/by-path/pci-{bus}-{kind}"));
            symlink(format!("../{node}"), link).unwrap();
        }
        write(
            &proc.join(format!("gpus/{bus}/information")),
            &format!(
                "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t {}\nGPU UUID: \t GPU-{i:08x}-0000-0000-0000-000000000000\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nBus Location: \t {bus}\nDevice Minor: \t {minor}\nGPU Excluded:\t No\n",
                200 + i
            ),
        );
    }
    mknod(&dev.join("nvidiactl"), 195, 255);
    mknod(&dev.join("nvidia-modeset"), 195, 254);
    mknod(&dev.join("nvidia-uvm"), 510, 0);
    mknod(&dev.join("nvidia-uvm-tools"), 510, 1);
}

/// This machine's driver, faked under `root`: `/dev`, `/proc/driver/nvidia`, the libraries
/// of two versions and ldconfig's listing of them, `nvidia-smi`, `/run`'s sockets and
/// `/lib/firmware`. The sockets' listeners are returned to keep them open.
pub(super) fn fake_host(root: &Path) -> (HostPaths, Vec<std::os::unix::net::UnixListener>) {
    let dev = root.join("dev");
    let proc = root.join("proc/driver/nvidia");
    fake_gpus(&dev, &proc);
    mknod(&dev.join("nvidia-caps/nvidia-cap1"), 237, 1);
    mknod(&dev.join("nvidia-caps/nvidia-cap2"), 237, 2);
    write(
        &proc.join("version"),
        &format!(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {LOADED}  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
        ),
    );
    write(
        &proc.join("params"),
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n",
    );
    write(&proc.join("registry"), "Binary: \"\"\n");
    write(
        &proc.join("capabilities/gpu7/mig/monitor"),
        "DeviceFileMinor: 2\n",
    );
    write(
        &proc.join("capabilities/gpu0/mig/monitor"),
        "DeviceFileMinor: 9\n",
    );
    let listing = fake_libraries(root);
    write(
        &root.join("usr/bin/nvidia-smi"),
        "#!/bin/sh\necho fake nvidia-smi\n",
    );
    std::fs::set_permissions(
        root.join("usr/bin/nvidia-smi"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    for version in [LOADED, STALE] {
        write(
            &root.join(format!("lib/firmware/nvidia/{version}/gsp_ga10x.bin")),
            version,
        );
    }
    let mut listeners = Vec::new();
    for socket in ["nvidia-persistenced/socket", "nvidia-fabricmanager/socket"] {
        let path = root.join("run").join(socket);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        listeners.push(std::os::unix::net::UnixListener::bind(&path).unwrap());
    }
    let host = HostPaths {
        dev,
        proc_driver: proc,
        firmware: root.join("lib/firmware"),
        run: root.join("run"),
        ldconfig: Ldconfig::Listing(listing),
        program_dirs: vec![root.join("nowhere"), root.join("usr/bin")],
    };
    (host, listeners)
}

/// The driver's libraries as its installer leaves them (a versioned file, its soname a link
/// to it), the loaded version's and a stale one's, and ldconfig's listing of them among
/// others, the stale `libcuda.so.1` first.
pub(super) fn fake_libraries(root: &Path) -> String {
    let new = root.join("usr/lib/x86_64-linux-gnu");
    let old = root.join("usr/lib/old-driver");
    let lib32 = root.join("usr/lib/i386-linux-gnu");
    match real_library() {
        Some(real) => {
            std::fs::create_dir_all(&new).unwrap();
            std::fs::copy(real, new.join(format!("libcuda.so.{LOADED}"))).unwrap();
        }
        None => write(&new.join(format!("libcuda.so.{LOADED}")), "not an ELF file"),
    }
    for (dir, version) in [(&new, LOADED), (&old, STALE)] {
        for lib in ["libcuda", "libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"] {
            let file = dir.join(format!("{lib}.so.{version}"));
            if !file.exists() {
                write(&file, version);
            }
        }
        for (link, lib) in [
            ("libcuda.so.1", "libcuda"),
            ("libnvidia-ml.so.1", "libnvidia-ml"),
            ("libnvidia-ml.so", "libnvidia-ml"),
            ("libnvidia-cfg.so.1", "libnvidia-cfg"),
            ("libnvidia-nscq.so.2", "libnvidia-nscq"),
        ] {
            symlink(format!("{lib}.so.{version}"), dir.join(link)).unwrap();
        }
    }
    symlink("libcuda.so.1", old.join("libcuda.so")).unwrap();
    write(&lib32.join("libcuda.so.1"), "elf32");
    write(
        &new.join("libcudart.so.12"),
        "the CUDA runtime: the image's business",
    );
    let (n, o) = (s(&new), s(&old));
    format!(
        "12 libs found in cache `/etc/ld.so.cache'\n\
         \tlibnvidia-nscq.so.2 (libc6,x86-64) => {n}/libnvidia-nscq.so.2\n\
         \tlibnvidia-ml.so.1 (libc6,x86-64) => {n}/libnvidia-ml.so.1\n\
         \tlibnvidia-ml.so (libc6,x86-64) => {n}/libnvidia-ml.so\n\
         \tlibnvidia-cfg.so.1 (libc6,x86-64) => {o}/libnvidia-cfg.so.1\n\
         \tlibcudart.so.12 (libc6,x86-64) => {n}/libcudart.so.12\n\
         \tlibcuda.so.1 (libc6,x86-64) => {o}/libcuda.so.1\n\
         \tlibcuda.so.1 (libc6,x86-64) => {n}/libcuda.so.1\n\
         \tlibcuda.so.1 (libc6) => {}/libcuda.so.1\n\
         \tlibcuda.so (libc6,x86-64) => {o}/libcuda.so\n\
         \tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => {n}/libnvidia-ptxjitcompiler.so.1\n\
         \tlibcuda.so.1/../../etc (libc6,x86-64) => {n}/libcuda.so.1\n\
         \tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n",
        s(&lib32)
    )
}

/// An image to run in: this machine's `sh`, `true`, `cat`, `readlink` and `env` with the
/// libraries `ldd` names (and the loader), an `/etc/ld.so.cache` of its own that names a
/// CUDA compatibility `libcuda.so.1` of its own, a `/run` and a `/lib/firmware` with one entry
/// each. Returns the loader's path in it.
pub(super) fn fake_image(rootfs: &Path) -> Option<String> {
    let mut loader = None;
    let mut libc = None;
    for program in ["sh", "true", "cat", "readlink", "env"] {
        let path = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(program))
            .find(|p| p.is_file())?;
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        std::fs::copy(path.canonicalize().ok()?, rootfs.join("bin").join(program)).ok()?;
        let ldd = std::process::Command::new("ldd").arg(&path).output().ok()?;
        for line in String::from_utf8_lossy(&ldd.stdout).lines() {
            let file = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            let Some(file) = file.filter(|f| f.starts_with('/')) else {
                continue;
            };
            if line.contains("ld-linux") {
                loader = Some(file.to_owned());
            }
            if line.contains("libc.so.6") {
                libc = Some(file.to_owned());
            }
            let to = rootfs.join(file.trim_start_matches('/'));
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(Path::new(file).canonicalize().ok()?, to).ok()?;
        }
    }
    image_files(rootfs, &libc?);
    loader
}

/// The image's own files the driver's go beside: an `/etc/ld.so.cache` that names a CUDA
/// compatibility `libcuda.so.1` of the image's own and its `libc`, a `/run` and a
/// `/lib/firmware` with one entry each.
pub(super) fn image_files(rootfs: &Path, libc: &str) {
    let entry = |key: &str, value: &str| Entry {
        flags: OWN_FLAGS,
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        osversion: 0,
        hwcap: 0,
    };
    let image_cache = LdCache {
        entries: vec![
            entry("libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1"),
            entry("libc.so.6", libc),
        ],
        hwcaps: Vec::new(),
    };
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::write(
        rootfs.join("etc/ld.so.cache"),
        ldcache::write(&image_cache, "test"),
    )
    .unwrap();
    std::fs::create_dir_all(rootfs.join("run/lock")).unwrap();
    write(
        &rootfs.join("lib/firmware/regulatory.db"),
        "the image's own",
    );
}

/// The (source, destination) of every `op` in `args`.
pub(super) fn pairs(args: &[String], op: &str) -> Vec<(String, String)> {
    args.windows(3)
        .filter(|w| w[0] == op)
        .map(|w| (w[1].clone(), w[2].clone()))
        .collect()
}
