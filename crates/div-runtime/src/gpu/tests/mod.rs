//! A GPU run against a fake driver tree: eight GPUs whose device minors are not their
//! indices, two driver versions side by side (the loaded one and a stale one ldconfig lists
//! first), the daemons' sockets and the GSP firmware, and an image to run in. Device nodes
//! are made with `mknod`, which needs root: CI runs the tests as root, and without it the
//! tests that need one say they are skipped.

mod fixture;
mod loader;

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use super::ldcache::{self, libcmp};
use super::{GpuError, GpuPlan, HostPaths, cuda_env, libraries, parse_version};
use fixture::*;
use loader::listed;

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
