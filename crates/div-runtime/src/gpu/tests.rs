//! A GPU run against a fake driver tree: eight GPUs whose device minors are not their
//! indices, two driver versions side by side (the loaded one and a stale one ldconfig lists
//! first), the daemons' sockets and the GSP firmware, and an image to run in. Device nodes
//! are made with `mknod`, which needs root: CI runs the tests as root, and without it the
//! tests that need one say they are skipped.

use std::cmp::Ordering;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::ldcache::{self, Entry, LdCache, OWN_FLAGS, libcmp};
use super::{GpuError, GpuPlan, HostPaths, Ldconfig, cuda_env, libraries, parse_version};

const LOADED: &str = "550.54.15";
const STALE: &str = "535.104.05";
/// The eight GPUs' bus locations (their order is `nvidia-smi`'s numbering) and the minor the
/// driver gave each: not their index.
const BUSES: [&str; 8] = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
];
const MINORS: [u32; 8] = [4, 5, 6, 7, 0, 1, 2, 3];

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Whether this process may make device nodes; says so when it may not.
fn may_mknod(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!(
            "SKIPPED {test}: making device nodes (mknod) needs root; CI runs the tests as root"
        );
    }
    root
}

fn mknod(path: &Path, major: u32, minor: u32) {
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
fn real_library() -> Option<PathBuf> {
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
fn fake_gpus(dev: &Path, proc: &Path) {
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
fn fake_host(root: &Path) -> (HostPaths, Vec<std::os::unix::net::UnixListener>) {
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
fn fake_libraries(root: &Path) -> String {
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
fn fake_image(rootfs: &Path) -> Option<String> {
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
fn image_files(rootfs: &Path, libc: &str) {
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
fn pairs(args: &[String], op: &str) -> Vec<(String, String)> {
    args.windows(3)
        .filter(|w| w[0] == op)
        .map(|w| (w[1].clone(), w[2].clone()))
        .collect()
}

#[test]
fn the_loaded_driver_s_version_is_read_from_either_kernel_module_s_line() {
    assert_eq!(
        parse_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc 12\n"
        ),
        Some("550.54.15".to_owned())
    );
    assert_eq!(
        parse_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:16:34 UTC 2024\n"
        ),
        Some("580.159.04".to_owned())
    );
    assert_eq!(parse_version("GCC version: 12.2.0\n"), None);
    assert_eq!(
        parse_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module\n"),
        None
    );
    // Nothing but digits and dots reaches a path.
    assert_eq!(
        parse_version("NVRM version: Module ../../etc 1.2/3\n"),
        None
    );
}

/// libnvidia-container's choice: per name, the first file named for the loaded version;
/// the stale `libcuda.so.1` listed before it is not bound ("the first of each name" was).
#[test]
fn only_the_loaded_driver_s_libraries_are_chosen_and_a_stale_one_listed_first_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    let listing = fake_libraries(tmp.path());
    let new = tmp
        .path()
        .join("usr/lib/x86_64-linux-gnu")
        .canonicalize()
        .unwrap();
    let old = tmp
        .path()
        .join("usr/lib/old-driver")
        .canonicalize()
        .unwrap();
    let got = libraries(&listing, "x86-64", LOADED);
    let real = |lib: &str| new.join(format!("{lib}.so.{LOADED}"));
    assert_eq!(
        got.chosen,
        vec![
            ("libnvidia-nscq.so.2".to_owned(), real("libnvidia-nscq")),
            ("libnvidia-ml.so.1".to_owned(), real("libnvidia-ml")),
            ("libnvidia-ml.so".to_owned(), real("libnvidia-ml")),
            ("libcuda.so.1".to_owned(), real("libcuda")),
        ]
    );
    // Left out and said: the stale versions of names with no loaded one.
    assert_eq!(
        got.stale,
        vec![
            (
                "libnvidia-cfg.so.1".to_owned(),
                old.join(format!("libnvidia-cfg.so.{STALE}"))
            ),
            (
                "libcuda.so".to_owned(),
                old.join(format!("libcuda.so.{STALE}"))
            ),
        ]
    );
    // The other version's view of the same listing: its own files alone.
    let other = libraries(&listing, "x86-64", STALE);
    assert!(
        other.chosen.iter().all(|(_, p)| p.starts_with(&old)),
        "{other:?}"
    );
    // A version that is a suffix of the loaded one's is not it.
    assert!(libraries(&listing, "x86-64", "54.15").chosen.is_empty());
}

/// The loader's order, glibc's `_dl_cache_libcmp`: digits as numbers.
#[test]
fn library_names_compare_as_glibc_s_loader_compares_them() {
    let cmp = |a: &str, b: &str| libcmp(a.as_bytes(), b.as_bytes());
    assert_eq!(cmp("libfoo.so.10", "libfoo.so.9"), Ordering::Greater);
    assert_eq!(cmp("libfoo.so.1", "libfoo.so.01"), Ordering::Equal);
    assert_eq!(cmp("libfoo.so", "libfoo.so.1"), Ordering::Less);
    assert_eq!(cmp("libz.so.1", "libcuda.so.1"), Ordering::Greater);
    assert_eq!(
        cmp("lib2", "liba"),
        Ordering::Greater,
        "a digit sorts after a letter"
    );
    assert_eq!(cmp("liba", "lib2"), Ordering::Less);
    assert_eq!(cmp("libcuda.so.1", "libcuda.so.1"), Ordering::Equal);
}

/// An image's cache: one library, the driver's `libcuda.so.1` under a compat folder and
/// a glibc-hwcaps one (both of this machine's ABI), a 32-bit one, libc.
fn image_cache() -> LdCache {
    let entry = |key: &str, value: &str, flags: i32, hwcap: u64| Entry {
        flags,
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        osversion: 0,
        hwcap,
    };
    LdCache {
        entries: vec![
            entry("libz.so.1", "/lib/libz.so.1", OWN_FLAGS, 0),
            entry(
                "libcuda.so.1",
                "/usr/lib/glibc-hwcaps/x86-64-v3/libcuda.so.1",
                OWN_FLAGS,
                1 << 62 | 3 << 32,
            ),
            entry(
                "libcuda.so.1",
                "/usr/local/cuda/compat/libcuda.so.1",
                OWN_FLAGS,
                0,
            ),
            entry("libcuda.so.1", "/usr/lib32/libcuda.so.1", 0x0003, 0),
            entry("libc.so.6", "/lib/libc.so.6", OWN_FLAGS, 0),
        ],
        hwcaps: vec![b"x86-64-v3".to_vec()],
    }
}

const DRIVER_ENTRIES: [(&str, &str); 2] = [
    ("libcuda.so.1", "/.div/nvidia/lib/libcuda.so.1"),
    ("libnvidia-ml.so.1", "/.div/nvidia/lib/libnvidia-ml.so.1"),
];

fn with_driver(cache: LdCache) -> LdCache {
    let driver: Vec<(String, String)> = DRIVER_ENTRIES
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ldcache::with_libraries(cache, &driver)
}

/// The entries' (name, file) in order.
fn listed(cache: &LdCache) -> Vec<(String, String)> {
    cache
        .entries
        .iter()
        .map(|e| {
            (
                String::from_utf8_lossy(&e.key).into_owned(),
                String::from_utf8_lossy(&e.value).into_owned(),
            )
        })
        .collect()
}

/// A cache written here reads back the same (glibc-hwcaps names and all); the driver's
/// entries replace the image's of the same name and ABI and nothing else, in the loader's
/// order; what is not a cache is said, never taken for one.
#[test]
fn a_loader_cache_keeps_the_image_s_entries_and_the_driver_s_replace_theirs_by_name() {
    let image = image_cache();
    let bytes = ldcache::write(&image, "a test");
    assert_eq!(ldcache::parse(&bytes).unwrap(), image, "a round trip");
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        listed(&with_driver(image)),
        vec![
            pair("libz.so.1", "/lib/libz.so.1"),
            pair("libnvidia-ml.so.1", "/.div/nvidia/lib/libnvidia-ml.so.1"),
            pair("libcuda.so.1", "/.div/nvidia/lib/libcuda.so.1"),
            pair("libcuda.so.1", "/usr/lib32/libcuda.so.1"),
            pair("libc.so.6", "/lib/libc.so.6"),
        ]
    );
    assert_eq!(
        ldcache::parse(b"not a cache"),
        Err(super::LdCacheError::Magic)
    );
    assert_eq!(
        ldcache::parse(&bytes[..60]),
        Err(super::LdCacheError::Truncated)
    );
    let mut big_endian = bytes.clone();
    big_endian[28] = 3;
    assert_eq!(
        ldcache::parse(&big_endian),
        Err(super::LdCacheError::ByteOrder)
    );
    // A crafted one costs a moment at most: entries and names are bounded.
    let mut crafted = bytes[..48].to_vec();
    crafted[20..24].copy_from_slice(&70_000u32.to_le_bytes());
    crafted.resize(48 + 70_000 * 24 + 8192, b'x');
    assert_eq!(ldcache::parse(&crafted), Err(super::LdCacheError::TooBig));
    crafted[20..24].copy_from_slice(&1u32.to_le_bytes());
    crafted[52..56].copy_from_slice(&100u32.to_le_bytes());
    assert_eq!(
        ldcache::parse(&crafted),
        Err(super::LdCacheError::Truncated)
    );
}

/// `ldconfig -p -C <file>`'s lines, with this machine's glibc; `None` without ldconfig.
fn glibc_lists(file: &Path) -> Option<Vec<String>> {
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).is_file())?;
    let out = std::process::Command::new(ldconfig)
        .args(["-p", "-C"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
    )
}

/// glibc's own ldconfig reads the cache written for a run: every entry, in order, and who
/// wrote it.
#[test]
fn glibc_s_ldconfig_reads_the_run_s_loader_cache_as_it_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ld.so.cache");
    let merged = with_driver(image_cache());
    std::fs::write(&file, ldcache::write(&merged, "div's test")).unwrap();
    let Some(lines) = glibc_lists(&file) else {
        eprintln!(
            "SKIPPED glibc_s_ldconfig_reads_the_run_s_loader_cache_as_it_was_written: no ldconfig here"
        );
        return;
    };
    let files: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.rsplit_once(" => ").map(|(_, f)| f))
        .collect();
    let want: Vec<String> = listed(&merged).into_iter().map(|(_, f)| f).collect();
    assert_eq!(files, want, "{lines:?}");
    assert!(
        lines.iter().any(|l| l == "Cache generated by: div's test"),
        "{lines:?}"
    );
}

/// This machine's own cache, read and written again, is what glibc's ldconfig lists for the
/// original, entry for entry.
#[test]
fn this_machine_s_own_loader_cache_reads_and_writes_again_as_glibc_lists_it() {
    let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
        eprintln!("SKIPPED: this machine has no /etc/ld.so.cache");
        return;
    };
    let cache = ldcache::parse(&bytes).unwrap();
    assert!(!cache.entries.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ld.so.cache");
    std::fs::write(&file, ldcache::write(&cache, "again")).unwrap();
    let entries = |lines: Option<Vec<String>>| {
        lines.map(|l| {
            l.into_iter()
                .filter(|l| l.contains("=>"))
                .collect::<Vec<_>>()
        })
    };
    let Some(again) = entries(glibc_lists(&file)) else {
        eprintln!("SKIPPED: no ldconfig here");
        return;
    };
    assert_eq!(
        Some(again),
        entries(glibc_lists(Path::new("/etc/ld.so.cache")))
    );
}

#[test]
fn a_run_in_the_sandbox_numbers_its_gpus_from_0_and_one_without_it_as_the_machine_does() {
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        cuda_env(&[3, 5], true),
        vec![
            pair("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            pair("CUDA_VISIBLE_DEVICES", "0,1")
        ]
    );
    assert_eq!(
        cuda_env(&[3, 5], false),
        vec![
            pair("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            pair("CUDA_VISIBLE_DEVICES", "3,5")
        ]
    );
}

/// The fake machine, an image, and the plan for a run on its GPUs 3 and 5 in the image.
struct OnThreeAndFive {
    _tmp: tempfile::TempDir,
    host: HostPaths,
    rootfs: PathBuf,
    files: PathBuf,
    plan: GpuPlan,
    _sockets: Vec<std::os::unix::net::UnixListener>,
}

fn on_3_and_5() -> OnThreeAndFive {
    let tmp = tempfile::tempdir().unwrap();
    let (host, sockets) = fake_host(&tmp.path().join("host"));
    let rootfs = tmp.path().join("image");
    image_files(&rootfs, "/lib/x86_64-linux-gnu/libc.so.6");
    let files = tmp.path().join("run-dir/gpu");
    let plan = GpuPlan::resolve(&host, &[3, 5], Some(&rootfs), &files).unwrap();
    OnThreeAndFive {
        _tmp: tmp,
        host,
        rootfs,
        files,
        plan,
        _sockets: sockets,
    }
}

/// Eight GPUs, the run on GPUs 3 and 5 (by `nvidia-smi`'s numbering: PCI bus order): their
/// nodes by the minor the driver gave each, and `/proc/driver/nvidia` with them alone.
#[test]
fn eight_gpus_a_run_on_3_and_5_is_given_their_nodes_by_minor_and_them_alone_in_proc() {
    if !may_mknod(
        "eight_gpus_a_run_on_3_and_5_is_given_their_nodes_by_minor_and_them_alone_in_proc",
    ) {
        return;
    }
    let OnThreeAndFive {
        host, files, plan, ..
    } = &on_3_and_5();
    // GPU 3 is the fourth on the bus, minor 7; GPU 5 the sixth, minor 1.
    assert_eq!(
        plan.gpus
            .iter()
            .map(|g| (g.bus_id.as_str(), g.minor))
            .collect::<Vec<_>>(),
        [("0000:5d:00.0", 7), ("0000:ab:00.0", 1)]
    );
    let dev = |name: &str| (s(&host.dev.join(name)), format!("/dev/{name}"));
    assert_eq!(
        pairs(plan.dev_args(), "--dev-bind"),
        [
            dev("nvidia7"),
            dev("nvidia1"),
            dev("nvidiactl"),
            dev("nvidia-uvm"),
            dev("nvidia-uvm-tools"),
            dev("nvidia-modeset"),
            dev("nvidia-caps"),
            dev("dri/card7"),
            dev("dri/renderD135"),
            dev("dri/card1"),
            dev("dri/renderD129"),
        ]
    );
    let proc = |name: &str| {
        (
            s(&host.proc_driver.join(name)),
            format!("/proc/driver/nvidia/{name}"),
        )
    };
    assert_eq!(
        pairs(plan.proc_args(), "--ro-bind"),
        [
            (
                s(&files.join("params")),
                "/proc/driver/nvidia/params".to_owned()
            ),
            proc("version"),
            proc("registry"),
            proc("gpus/0000:5d:00.0"),
            proc("capabilities/gpu7"),
            proc("gpus/0000:ab:00.0"),
        ]
    );
    let args = plan.proc_args();
    assert_eq!(args[..2], ["--tmpfs", "/proc/driver/nvidia"]);
    assert_eq!(
        args[args.len() - 2..],
        ["--remount-ro", "/proc/driver/nvidia"]
    );
    let params = std::fs::read_to_string(files.join("params")).unwrap();
    assert!(
        params.contains("ModifyDeviceFiles: 0\n") && !params.contains("ModifyDeviceFiles: 1"),
        "{params}"
    );
    // On this machine's own system the driver's files are there already: the same devices
    // and /proc, nothing else.
    let own = GpuPlan::resolve(host, &[3, 5], None, files).unwrap();
    assert_eq!(
        (own.dev_args(), own.proc_args()),
        (plan.dev_args(), plan.proc_args())
    );
    assert!(own.root_args().is_empty() && own.command_prefix().is_empty() && own.notes.is_empty());
    // Without nvidia-uvm (its module not loaded) the run starts, and its log says CUDA will
    // not work, and how to load it.
    std::fs::remove_file(host.dev.join("nvidia-uvm")).unwrap();
    let no_uvm = GpuPlan::resolve(host, &[3, 5], None, files).unwrap();
    assert!(!no_uvm.dev_args().iter().any(|a| a == "/dev/nvidia-uvm"));
    assert!(
        no_uvm.notes[0].contains("no /dev/nvidia-uvm")
            && no_uvm.notes[0].contains("nvidia-modprobe -u"),
        "{:?}",
        no_uvm.notes
    );
}

/// In an image, the loaded driver's libraries (never the stale version's, listed first) and
/// the `libcuda.so` link; nothing to export but `PATH`; what was left out said.
#[test]
fn eight_gpus_a_run_on_3_and_5_in_an_image_is_given_the_loaded_driver_s_libraries() {
    if !may_mknod("eight_gpus_a_run_on_3_and_5_in_an_image_is_given_the_loaded_driver_s_libraries")
    {
        return;
    }
    let OnThreeAndFive { host, plan, .. } = &on_3_and_5();
    let root = plan.root_args();
    let binds = pairs(root, "--ro-bind");
    let bound = |to: &str| binds.iter().find(|(_, d)| d == to).map(|(f, _)| f.clone());
    let loaded = |lib: &str| {
        Some(s(&host
            .proc_driver
            .ancestors()
            .nth(3)
            .unwrap()
            .join("usr/lib/x86_64-linux-gnu")
            .canonicalize()
            .unwrap()
            .join(format!("{lib}.so.{LOADED}"))))
    };
    assert_eq!(bound("/.div/nvidia/lib/libcuda.so.1"), loaded("libcuda"));
    assert_eq!(
        bound("/.div/nvidia/lib/libnvidia-ml.so.1"),
        loaded("libnvidia-ml")
    );
    assert_eq!(
        bound("/.div/nvidia/lib/libnvidia-nscq.so.2"),
        loaded("libnvidia-nscq")
    );
    assert!(
        !root
            .iter()
            .any(|a| a.contains(STALE) || a.contains("libnvidia-cfg") || a.contains("libcudart")),
        "{root:?}"
    );
    assert_eq!(
        pairs(root, "--symlink"),
        [
            (
                "libnvidia-ml.so.1".to_owned(),
                "/.div/nvidia/lib/libnvidia-ml.so".to_owned()
            ),
            (
                "libcuda.so.1".to_owned(),
                "/.div/nvidia/lib/libcuda.so".to_owned()
            ),
        ]
    );
    // No LD_LIBRARY_PATH: the cache finds the driver; nvidia-smi on PATH, after the image's.
    assert_eq!(
        plan.command_prefix(),
        "export PATH=\"${PATH:+$PATH:}/.div/nvidia/bin\"\n"
    );
    let stale_cfg = host
        .proc_driver
        .ancestors()
        .nth(3)
        .unwrap()
        .join("usr/lib/old-driver")
        .canonicalize()
        .unwrap()
        .join(format!("libnvidia-cfg.so.{STALE}"));
    assert_eq!(
        plan.notes,
        [format!(
            "div: left out {} (libnvidia-cfg.so.1 in ldconfig's cache): not of the loaded driver {LOADED}",
            s(&stale_cfg)
        )]
    );
}

/// In an image: `nvidia-smi`, the run's own loader cache over the image's (the image's
/// compat `libcuda.so.1` replaced, its libc kept), the daemons' sockets and the loaded
/// version's GSP firmware, made on tmpfs covers of the image's `/run` and `/lib/firmware`.
#[test]
fn eight_gpus_a_run_on_3_and_5_in_an_image_is_given_its_cache_sockets_and_firmware() {
    if !may_mknod("eight_gpus_a_run_on_3_and_5_in_an_image_is_given_its_cache_sockets_and_firmware")
    {
        return;
    }
    let OnThreeAndFive {
        host,
        rootfs,
        files,
        plan,
        ..
    } = &on_3_and_5();
    let root = plan.root_args();
    let binds = pairs(root, "--ro-bind");
    let bound = |to: &str| binds.iter().find(|(_, d)| d == to).map(|(f, _)| f.clone());
    let smi = host.program_dirs[1]
        .join("nvidia-smi")
        .canonicalize()
        .unwrap();
    assert_eq!(bound("/.div/nvidia/bin/nvidia-smi"), Some(s(&smi)));
    assert_eq!(
        bound("/etc/ld.so.cache"),
        Some(s(&files.join("ld.so.cache")))
    );
    for socket in ["nvidia-persistenced/socket", "nvidia-fabricmanager/socket"] {
        assert_eq!(
            bound(&format!("/run/{socket}")),
            Some(s(&host.run.join(socket)))
        );
    }
    let firmware = format!("nvidia/{LOADED}");
    assert_eq!(
        bound(&format!("/lib/firmware/{firmware}")),
        Some(s(&host.firmware.join(&firmware)))
    );
    // Made on tmpfs covers of the image's /run and /lib/firmware, their entries bound again.
    assert_eq!(bound("/run/lock"), Some(s(&rootfs.join("run/lock"))));
    for cover in ["/run", "/lib/firmware"] {
        let tmpfs = root
            .windows(2)
            .position(|w| w[0] == "--tmpfs" && w[1] == cover)
            .unwrap();
        let read_only = root
            .windows(2)
            .position(|w| w[0] == "--remount-ro" && w[1] == cover)
            .unwrap();
        assert!(
            root[tmpfs..read_only]
                .iter()
                .any(|a| a.starts_with(cover) && a != cover)
        );
    }
    // The cache: the image's compat libcuda replaced by the driver's, its libc kept.
    let cache = ldcache::parse(&std::fs::read(files.join("ld.so.cache")).unwrap()).unwrap();
    let files_of = |name: &str| {
        listed(&cache)
            .into_iter()
            .filter(|(k, _)| k == name)
            .map(|(_, f)| f)
            .collect::<Vec<_>>()
    };
    assert_eq!(files_of("libcuda.so.1"), ["/.div/nvidia/lib/libcuda.so.1"]);
    assert_eq!(files_of("libcuda.so"), ["/.div/nvidia/lib/libcuda.so"]);
    assert_eq!(files_of("libc.so.6"), ["/lib/x86_64-linux-gnu/libc.so.6"]);
}

/// What cannot be given is refused with the reason, never given wrong.
#[test]
fn a_run_is_refused_when_the_driver_s_files_do_not_say_what_it_needs() {
    if !may_mknod("a_run_is_refused_when_the_driver_s_files_do_not_say_what_it_needs") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (host, _sockets) = fake_host(&tmp.path().join("host"));
    let rootfs = tmp.path().join("image");
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    let files = tmp.path().join("files");
    let e = GpuPlan::resolve(&host, &[8], None, &files).unwrap_err();
    assert!(
        matches!(
            e,
            GpuError::NoSuchGpu {
                index: 8,
                count: 8,
                ..
            }
        ),
        "{e}"
    );
    // A node whose minor is not the driver's: refused, not bound.
    std::fs::remove_file(host.dev.join("nvidia7")).unwrap();
    mknod(&host.dev.join("nvidia7"), 195, 3);
    let e = GpuPlan::resolve(&host, &[3], None, &files).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} is not the device node the NVIDIA driver names: it is not the character device 195:7",
            s(&host.dev.join("nvidia7"))
        )
    );
    // No readable version: a run on this machine's system needs none; a run in an image is
    // refused, its libraries not matched blind.
    std::fs::remove_file(host.proc_driver.join("version")).unwrap();
    assert!(GpuPlan::resolve(&host, &[5], None, &files).is_ok());
    let e = GpuPlan::resolve(&host, &[5], Some(&rootfs), &files).unwrap_err();
    assert!(matches!(e, GpuError::Version { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("cannot be told from another driver's"),
        "{e}"
    );
    std::fs::remove_dir_all(host.proc_driver.join("gpus")).unwrap();
    let e = GpuPlan::resolve(&host, &[5], None, &files).unwrap_err();
    assert!(matches!(e, GpuError::GpuList { .. }), "{e}");
}

/// The device nodes a run on GPUs 3 and 5 sees (a shell's sorted glob).
const NODES_SEEN: [&str; 12] = [
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia1",
    "/dev/nvidia7",
    "/dev/nvidiactl",
    "/dev/nvidia-caps/nvidia-cap1",
    "/dev/nvidia-caps/nvidia-cap2",
    "/dev/dri/card1",
    "/dev/dri/card7",
    "/dev/dri/renderD129",
    "/dev/dri/renderD135",
];

/// What the run prints of what it sees: its device nodes, `/proc/driver/nvidia`, its
/// variables, the `libcuda.so` link, the loader's search for `libcuda.so.1` in an empty
/// environment (`loader`: the image's `ld.so`), the sockets, `/run`, the firmware, and
/// `nvidia-smi` found on its `PATH`.
fn what_the_run_sees(loader: &str) -> String {
    format!(
        "for f in /dev/nvidia* /dev/nvidia-caps/* /dev/dri/*; do [ -c \"$f\" ] && echo \"node $f\"; done\n\
         echo gpus /proc/driver/nvidia/gpus/*\n\
         echo proc /proc/driver/nvidia/*\n\
         cat /proc/driver/nvidia/params\n\
         echo caps /proc/driver/nvidia/capabilities/*\n\
         ( : > /proc/driver/nvidia/x ) 2>/dev/null && echo proc-writable || echo proc-read-only\n\
         echo env $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER ${{LD_LIBRARY_PATH-no-ld-library-path}}\n\
         echo link $(readlink /.div/nvidia/lib/libcuda.so)\n\
         env -i LD_DEBUG=libs {loader} --preload libcuda.so.1 /bin/true 2>&1\n\
         [ -S /run/nvidia-persistenced/socket ] && echo socket persistenced\n\
         [ -S /run/nvidia-fabricmanager/socket ] && echo socket fabricmanager\n\
         echo run /run/*\n\
         echo firmware /lib/firmware/* /lib/firmware/nvidia/*\n\
         cat /lib/firmware/nvidia/*/gsp_ga10x.bin; echo\n\
         nvidia-smi\n"
    )
}

/// Runs `command` in bubblewrap as a run on GPUs 3 and 5 in the image at `rootfs` is run
/// (`crate::sandbox::bwrap_argv`, its variables as the launcher gives them); its output.
fn run_sandboxed(dir: &Path, plan: &GpuPlan, rootfs: &Path, command: &str) -> String {
    let places: Vec<PathBuf> = ["home", "workspace", "tmp", "mnt", "cache"]
        .iter()
        .map(|d| dir.join(d))
        .collect();
    for p in &places {
        std::fs::create_dir_all(p).unwrap();
    }
    let image = crate::sandbox::ImageRoot {
        rootfs: rootfs.to_path_buf(),
        user: None,
        name_resolution: false,
    };
    let mut argv = crate::sandbox::bwrap_argv(&crate::sandbox::SandboxInput {
        home: &places[0],
        workspace: &places[1],
        tmp: &places[2],
        mnt: &places[3],
        volumes: &[],
        cache: &places[4],
        gpu: Some(plan),
        command,
        chdir: "/",
        image: Some(&image),
        shim_by_supervisor: false,
        init: None,
    });
    // This machine has no NVIDIA driver: a `/proc/driver/nvidia` is made for the run's
    // arguments to mask, as the real one would be there.
    let cover = argv
        .windows(3)
        .position(|w| w[0] == "--ro-bind-try" && w[1] == "/proc/driver")
        .unwrap();
    for (k, a) in ["--tmpfs", "/proc/driver", "--dir", "/proc/driver/nvidia"]
        .iter()
        .enumerate()
    {
        argv.insert(cover + 3 + k, (*a).to_owned());
    }
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/bin")
        .envs(cuda_env(&[3, 5], true))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The whole sandbox, for real: bubblewrap with the run's arguments against the fake tree
/// and image. What the run sees: its two GPUs' nodes (by minor), `/proc/driver/nvidia` with
/// its GPUs alone, its GPUs numbered from 0, the loaded driver found by a process with an
/// empty environment through the run's loader cache, the sockets, the firmware.
#[test]
fn in_its_sandbox_a_run_sees_its_gpus_alone_and_finds_the_driver_without_ld_library_path() {
    let test =
        "in_its_sandbox_a_run_sees_its_gpus_alone_and_finds_the_driver_without_ld_library_path";
    if !may_mknod(test) {
        return;
    }
    if !crate::sandbox::bwrap_works() {
        eprintln!("SKIPPED {test}: bubblewrap does not work here");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (host, _sockets) = fake_host(&tmp.path().join("host"));
    let rootfs = tmp.path().join("image");
    let Some(loader) = fake_image(&rootfs) else {
        eprintln!(
            "SKIPPED {test}: this machine's sh and its libraries could not be copied into an image"
        );
        return;
    };
    let files = tmp.path().join("run-dir/gpu");
    let plan = GpuPlan::resolve(&host, &[3, 5], Some(&rootfs), &files).unwrap();
    let text = run_sandboxed(tmp.path(), &plan, &rootfs, &what_the_run_sees(&loader));
    let lines: Vec<&str> = text.lines().collect();
    let nodes: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("node "))
        .collect();
    assert_eq!(nodes, NODES_SEEN, "{text}");
    let has = |line: &str| lines.contains(&line);
    assert!(
        has("gpus /proc/driver/nvidia/gpus/0000:5d:00.0 /proc/driver/nvidia/gpus/0000:ab:00.0"),
        "{text}"
    );
    assert!(
        has(
            "proc /proc/driver/nvidia/capabilities /proc/driver/nvidia/gpus /proc/driver/nvidia/params /proc/driver/nvidia/registry /proc/driver/nvidia/version"
        ),
        "{text}"
    );
    assert!(
        has("ModifyDeviceFiles: 0") && !text.contains("ModifyDeviceFiles: 1"),
        "{text}"
    );
    assert!(has("caps /proc/driver/nvidia/capabilities/gpu7"), "{text}");
    assert!(has("proc-read-only"), "{text}");
    assert!(has("env 0,1 PCI_BUS_ID no-ld-library-path"), "{text}");
    assert!(has("link libcuda.so.1"), "{text}");
    // An empty environment: the loader looks in the run's cache and finds the driver.
    assert!(text.contains("search cache=/etc/ld.so.cache"), "{text}");
    assert!(
        text.contains("trying file=/.div/nvidia/lib/libcuda.so.1"),
        "{text}"
    );
    if real_library().is_some() {
        assert!(!text.contains("cannot be preloaded"), "{text}");
    }
    assert!(!text.contains("/usr/local/cuda/compat"), "{text}");
    assert!(
        has("socket persistenced") && has("socket fabricmanager"),
        "{text}"
    );
    assert!(
        has("run /run/lock /run/nvidia-fabricmanager /run/nvidia-persistenced"),
        "{text}"
    );
    assert!(
        has(&format!(
            "firmware /lib/firmware/nvidia /lib/firmware/regulatory.db /lib/firmware/nvidia/{LOADED}"
        )),
        "{text}"
    );
    assert!(has(LOADED) && !text.contains(STALE), "{text}");
    assert!(has("fake nvidia-smi"), "{text}");
}
