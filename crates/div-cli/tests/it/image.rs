//! End to end: `div run --image` on the local control plane, with images built here and
//! pushed to Debian's `docker-registry` on loopback (div-test-support's image helpers).

use std::path::{Path, PathBuf};

use div_image::Credentials;

use crate::support::{Local, text};

use div_test_support::image as image_support;
use image_support::{Built, E, Registry, file, push};

/// An image whose config carries `config` (`Env`, `WorkingDir`, `User`…), gzip layers.
fn build(layers: &[Vec<E>], config: serde_json::Value) -> Built {
    build_with(layers, config, true)
}

/// The same, with plain tar layers when `compress` is false (fast for a large tree in a debug
/// build).
fn build_with(layers: &[Vec<E>], config: serde_json::Value, compress: bool) -> Built {
    image_support::build_image(layers, image_support::this_arch(), config, compress)
}

/// A busybox-static tree: `/bin` with the applets the tests use, an `/etc/os-release` that
/// is not this machine's, `/etc/passwd` naming `runner`.
fn busybox_layer() -> Option<Vec<E>> {
    let bin = image_support::program("busybox")?;
    let data = std::fs::read(bin).expect("read busybox");
    let mut layer = vec![
        E::Dir("bin", 0o755),
        E::File("bin/busybox", 0o755, data),
        E::Dir("etc", 0o755),
        file("etc/os-release", "ID=divtest\nNAME=\"div test busybox\"\n"),
        file(
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\nrunner:x:1234:2345::/home/runner:/bin/sh\n",
        ),
        file("etc/group", "root:x:0:\nrunners:x:2345:\n"),
        E::Dir("work", 0o755),
    ];
    for applet in [
        "sh", "cat", "ls", "id", "pwd", "echo", "touch", "env", "grep", "head", "mkdir", "rm",
    ] {
        let path: &'static str = Box::leak(format!("bin/{applet}").into_boxed_str());
        layer.push(E::Symlink(path, "busybox"));
    }
    Some(layer)
}

/// A registry holding `tools/busybox:1` (root, `WorkingDir` `/work`, an `Env`) and
/// `tools/busybox:user` (`User` `runner`).
pub(crate) fn registry() -> Option<Registry> {
    let layer = busybox_layer()?;
    let reg = Registry::start(None)?;
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let root = build(
        std::slice::from_ref(&layer),
        serde_json::json!({
            "Env": ["PATH=/bin", "GREETING=hello from the image", "DIVERGENT_RUN_ID=the image's, overridden"],
            "WorkingDir": "/work",
        }),
    );
    let user = build(
        &[layer],
        serde_json::json!({"Env": ["PATH=/bin"], "User": "runner"}),
    );
    rt.block_on(async {
        push(&reg.addr, "tools/busybox", "1", &root, &Credentials::none()).await;
        push(
            &reg.addr,
            "tools/busybox",
            "user",
            &user,
            &Credentials::none(),
        )
        .await;
    });
    Some(reg)
}

/// The project `project` on the local control plane.
fn project() -> Local {
    Local::new(
        "project",
        &[("train.py", "def main():\n    print('trained')\n")],
    )
}

impl Local {
    /// `div` with more environment (the local control plane it starts inherits it).
    fn div_with(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        self.command(args)
            .envs(env.iter().copied())
            .output()
            .expect("div runs")
    }

    /// The unpacked trees in the image cache.
    fn rootfs(&self) -> Vec<PathBuf> {
        let dir = self.home().join("images/images/sha256");
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path().join("rootfs")).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// Every path under `root`, with its size, to compare a tree before and after a run.
fn listing(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let meta = std::fs::symlink_metadata(e.path()).expect("metadata");
            if meta.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), meta.len()));
        }
    }
    out.sort();
    out
}

#[test]
fn a_run_in_an_image_pulled_from_a_loopback_registry_has_the_image_as_its_root() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--no-upload",
        "--",
        "cat /etc/os-release; pwd; echo \"$GREETING\"; echo \"id=$DIVERGENT_RUN_ID\"; id -u; ls /",
    ]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let trees = local.rootfs();
    assert_eq!(trees.len(), 1, "one image unpacked: {trees:?}");
    // The pull's progress, before the header line.
    let pulling = stderr
        .find(&format!("pulling {image}: 1 layer, "))
        .expect("a pulling line");
    let ready = stderr
        .find(&format!("image {image} ready (sha256:"))
        .expect("a ready line");
    let header = stderr.find("  CPU  ").expect("the header line");
    assert!(pulling < ready && ready < header, "{stderr}");
    let digest = trees[0]
        .parent()
        .and_then(Path::file_name)
        .map(|h| format!("sha256:{}", h.to_string_lossy()))
        .expect("a digest");
    // The first log line names the image and its digest.
    assert!(
        stdout.contains(&format!("div: image {image} ({digest})")),
        "{stdout}"
    );
    // `/` is the image's: its os-release, its working directory, its Env under runtime.md's.
    assert!(stdout.contains("ID=divtest"), "{stdout}");
    assert!(stdout.contains("\n/work\n"), "{stdout}");
    assert!(stdout.contains("hello from the image"), "{stdout}");
    assert!(stdout.contains("id=r_"), "runtime.md's rows win: {stdout}");
    assert!(!stdout.contains("the image's, overridden"), "{stdout}");
    assert!(stdout.contains("\n0\n"), "root by default: {stdout}");
    let listed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "0")
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with(' ') && !l.contains(':'))
        .collect();
    assert!(
        listed.contains(&"bin") && listed.contains(&"work"),
        "{listed:?}"
    );
    // Nothing of this machine's own system: no /usr, /var, /home.
    for host_only in ["usr", "var", "home", "lib"] {
        assert!(!listed.contains(&host_only), "{host_only}: {listed:?}");
    }
}

#[test]
fn the_image_s_user_is_who_the_command_runs_as() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:user", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--no-upload",
        "--",
        "echo \"uid=$(id -u) gid=$(id -g) pwd=$(pwd)\"; touch /tmp/divergent/mine && echo wrote",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // No WorkingDir: a run that shipped nothing starts at `/`.
    assert!(stdout.contains("uid=1234 gid=2345 pwd=/\n"), "{stdout}");
    assert!(stdout.contains("\nwrote\n"), "{stdout}");
}

#[test]
fn an_image_that_does_not_exist_is_refused_and_no_run_is_created() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/nothing:1", reg.addr);
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", "echo ran"]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "the registry `{}` has no image `{image}`",
            reg.addr
        )),
        "{stderr}"
    );
    let ls = local.div(&["ls", "--json"]);
    let listed = text(&ls.stdout);
    assert!(!listed.contains("\"id\""), "no run: {listed}");
    let runs = local.home().join("runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).expect("runs").next().is_none(),
        "a run directory was left"
    );
}

/// An HTTPS proxy on loopback that records the first line of each request (`CONNECT
/// host:port HTTP/1.1`) and refuses it, so nothing leaves this machine.
fn refusing_proxy() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = format!("http://{}", listener.local_addr().expect("local addr"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(&stream);
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            record
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(first.trim_end().to_owned());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = (&stream).write_all(
                b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    (addr, seen)
}

#[test]
fn an_explicitly_named_default_image_is_pulled_never_replaced() {
    // Every HTTPS request the control plane makes goes to a proxy that records and refuses
    // it: a pull of the default image reaches for Docker Hub, and fails, offline.
    let (proxy, seen) = refusing_proxy();
    let env = [
        ("HTTPS_PROXY", proxy.as_str()),
        ("https_proxy", proxy.as_str()),
        ("NO_PROXY", "127.0.0.1,localhost"),
    ];
    let local = project();
    let image = "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime";

    // Named, the default image is pulled like any other (the server's setting is `host`,
    // out of the box): it cannot be reached, so the run is refused before it exists.
    let out = local.div_with(
        &[
            "run",
            "--gpu",
            "cpu",
            "--image",
            image,
            "--no-upload",
            "--",
            "echo ran",
        ],
        &env,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "cannot reach the registry `docker.io` for `docker.io/{image}`"
        )),
        "{stderr}"
    );
    let asked = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        !asked.is_empty()
            && asked
                .iter()
                .all(|l| l.starts_with("CONNECT ") && l.contains("docker.io:443")),
        "the pull went to Docker Hub, through the proxy: {asked:?}"
    );
    let ls = local.div_with(&["ls", "--json"], &env);
    assert!(
        !text(&ls.stdout).contains("\"id\""),
        "no run: {}",
        text(&ls.stdout)
    );
    let runs = local.home().join("runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).expect("runs").next().is_none(),
        "a run directory was left"
    );

    // Unnamed, this machine's own system stands in for it, offline, and the run's first log
    // line (which `div run` prints) says so; the run's record names the default image.
    let before = seen.lock().unwrap_or_else(|e| e.into_inner()).len();
    let out = local.div_with(
        &[
            "run",
            "--gpu",
            "cpu",
            "--no-upload",
            "--json",
            "--",
            "echo ran",
        ],
        &env,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "\ndiv: no image pulled: this machine's own system stands in for {image} (DIVERGENT_DEFAULT_IMAGE=host; set it to pull to run in the image itself)\nran\n"
        )),
        "{stderr}"
    );
    let run: serde_json::Value = serde_json::from_str(&stdout).expect("the run as JSON");
    assert_eq!(run["image"], image, "{run}");
    assert_eq!(
        seen.lock().unwrap_or_else(|e| e.into_inner()).len(),
        before,
        "nothing was pulled"
    );
}

#[test]
fn a_py_entrypoint_in_an_image_without_python_says_so_last() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "train.py::main"]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains(&format!(
            "div: the image {image} has no `python` on its PATH, and the entrypoint train.py::main is Python"
        )),
        "{all}"
    );
}

#[test]
fn a_hostile_run_cannot_write_its_image_or_the_cache() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    // Pull it (a first run), then take the cache's listing.
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cache = local.home().join("images");
    let before = listing(&cache);
    let home = local.home();
    let attack = format!(
        "for f in /bin/busybox /etc/os-release /etc/passwd /new /work/new /etc/resolv.conf; do \
           (echo pwned > $f) 2>/dev/null && echo \"WROTE $f\"; done; \
         rm -f /bin/sh 2>/dev/null && echo 'REMOVED /bin/sh'; \
         mkdir /etc/x 2>/dev/null && echo 'MADE /etc/x'; \
         ls {home} 2>/dev/null && echo 'SAW THE STATE DIRECTORY'; \
         ls {cache} 2>/dev/null && echo 'SAW THE CACHE'; \
         echo done",
        home = home.display(),
        cache = cache.display(),
    );
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", &attack]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("\ndone\n"), "{stdout}");
    for bad in ["WROTE", "REMOVED", "MADE", "SAW THE"] {
        assert!(!stdout.contains(bad), "{stdout}");
    }
    assert_eq!(listing(&cache), before, "the cache changed");
    let os_release =
        std::fs::read_to_string(local.rootfs()[0].join("etc/os-release")).expect("os-release");
    assert!(os_release.starts_with("ID=divtest"), "{os_release}");
}

#[test]
fn div_image_lists_the_cache_and_prunes_it() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    let out = local.div(&["image", "ls"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("0 images cached in"),
        "{}",
        text(&out.stderr)
    );
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = local.div(&["image", "ls"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("IMAGE\tDIGEST\tRESOLVED\tDOWNLOADED\tUNPACKED\n"),
        "{stdout}"
    );
    let row = stdout.lines().nth(1).unwrap_or_default();
    let fields: Vec<&str> = row.split('\t').collect();
    assert_eq!(fields.len(), 5, "{row}");
    assert_eq!(fields[0], image, "{row}");
    assert!(fields[1].starts_with("sha256:"), "{row}");
    // Pulled by this cache: when the tag resolved, and what came down (all of it here).
    assert!(fields[2].ends_with('Z'), "{row}");
    assert!(fields[3].ends_with('B'), "{row}");
    assert!(stderr.contains("1 image cached in"), "{stderr}");
    assert!(stderr.contains(" on disk ("), "{stderr}");

    let out = local.div(&["image", "prune"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("removed 1 image and 3 blobs"),
        "the manifest, config and layer: {stderr}"
    );
    assert!(local.rootfs().is_empty(), "{:?}", local.rootfs());
    let out = local.div(&["image", "ls"]);
    assert!(
        text(&out.stderr).contains("0 images cached in"),
        "{}",
        text(&out.stderr)
    );
}

/// A Python image built from this machine's own files, the legitimate offline way: the
/// interpreter, the shared libraries `ldd` names (at their real paths, with `/lib` and
/// `/lib64` linked as Debian has them), the standard library (less its tests and tools), and
/// busybox for `/bin/sh`. `None` (the test skips loudly) when any is missing.
fn python_layer() -> Option<Vec<E>> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let python = std::fs::canonicalize("/usr/bin/python3").ok()?;
    let stdlib = python
        .file_name()
        .map(|n| Path::new("/usr/lib").join(n))
        .filter(|p| p.is_dir());
    let (Some(stdlib), Some(busybox)) = (stdlib, image_support::program("busybox")) else {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "\n!!!!! SKIPPED: no python3 and its standard library, or no busybox !!!!!\n"
            );
        }
        return None;
    };
    let mut layer = vec![
        E::Dir("usr", 0o755),
        E::Dir("usr/bin", 0o755),
        E::Dir("usr/lib", 0o755),
        E::Dir("usr/lib64", 0o755),
        E::Symlink("bin", "usr/bin"),
        E::Symlink("lib", "usr/lib"),
        E::Symlink("lib64", "usr/lib64"),
        E::File(
            "usr/bin/busybox",
            0o755,
            std::fs::read(busybox).expect("read busybox"),
        ),
        E::Symlink("usr/bin/sh", "busybox"),
        E::File(
            "usr/bin/python3",
            0o755,
            std::fs::read(&python).expect("read python"),
        ),
        E::Symlink("usr/bin/python", "python3"),
    ];
    let ldd = std::process::Command::new("ldd")
        .arg(&python)
        .output()
        .expect("ldd runs");
    let mut dirs = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // `linux-vdso.so.1 (0x…)` is the kernel's: no file.
        let Some(path) = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(Path::new)
        else {
            continue;
        };
        let real = std::fs::canonicalize(path).expect("a library ldd names");
        // At the path the loader asks for, resolved through /lib -> usr/lib.
        let parent = std::fs::canonicalize(path.parent().expect("a folder")).expect("its folder");
        let inside = parent.join(path.file_name().expect("a name"));
        let rel = inside.strip_prefix("/").expect("absolute").to_path_buf();
        let mut dir = rel.parent().map(Path::to_path_buf);
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(d.clone());
            dir = d.parent().map(Path::to_path_buf);
        }
        layer.push(E::File(
            leak(rel.display().to_string()),
            0o755,
            std::fs::read(real).expect("read a library"),
        ));
    }
    let made = ["usr", "usr/bin", "usr/lib", "usr/lib64"];
    let new_dirs: Vec<E> = dirs
        .iter()
        .map(|d| d.display().to_string())
        .filter(|d| !made.contains(&d.as_str()))
        .map(|d| E::Dir(leak(d), 0o755))
        .collect();
    layer.splice(4..4, new_dirs);
    const LEFT_OUT: [&str; 9] = [
        "test",
        "idlelib",
        "tkinter",
        "ensurepip",
        "lib2to3",
        "pydoc_data",
        "site-packages",
        "dist-packages",
        "__pycache__",
    ];
    let mut stack = vec![stdlib];
    while let Some(dir) = stack.pop() {
        let rel = dir
            .strip_prefix("/")
            .expect("absolute")
            .display()
            .to_string();
        layer.push(E::Dir(leak(rel), 0o755));
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .expect("read the standard library")
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            if LEFT_OUT.iter().any(|l| name == *l) {
                continue;
            }
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            let rel = leak(
                path.strip_prefix("/")
                    .expect("absolute")
                    .display()
                    .to_string(),
            );
            if meta.is_dir() {
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).expect("a link");
                layer.push(E::Symlink(rel, leak(target.display().to_string())));
            } else if meta.is_file() {
                layer.push(E::File(rel, 0o644, std::fs::read(&path).expect("read")));
            }
        }
    }
    Some(layer)
}

#[test]
fn a_train_py_run_with_checks_in_a_python_image() {
    let Some(layer) = python_layer() else { return };
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let image = build_with(
        &[layer],
        serde_json::json!({"Env": ["PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"]}),
        false,
    );
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(push(
            &reg.addr,
            "tools/python",
            "1",
            &image,
            &Credentials::none(),
        ));
    let local = project();
    std::fs::write(
        local.tmp.path().join("project/train.py"),
        "import json, os, sys\n\ndef main():\n    print('python', sys.version.split()[0], 'at', sys.executable)\n    print('usr' in os.listdir('/'), os.path.exists('/var'))\n    json.dump({'metrics': {'accuracy': 0.93}}, open(os.environ['DIVERGENT_RESULT_PATH'], 'w'))\n",
    )
    .expect("write train.py");
    let name = format!("{}/tools/python:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &name,
        "train.py::main",
        "--check",
        "metrics.accuracy>=0.9",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("div: image {name} (sha256:")),
        "{stdout}"
    );
    assert!(stdout.contains("python 3."), "{stdout}");
    // The image's tree: /usr is there, the host's /var is not.
    assert!(stdout.contains("True False"), "{stdout}");
    assert!(
        stdout.contains("check passed: metrics.accuracy >= 0.9 (found 0.93)"),
        "the check's verdict: {stdout}"
    );
    assert!(stderr.contains("passed 1 of 1 check"), "{stderr}");
}

/// A project whose state directory is a tmpfs of its own, of a few MiB (root only). When
/// dropped, its server is stopped first, then the tmpfs is unmounted (lazily: a supervisor
/// may still be writing its end).
struct OnSmallDisk {
    local: Local,
}

impl OnSmallDisk {
    /// `None` (the test skips loudly) where a tmpfs cannot be mounted (not root).
    #[allow(clippy::print_stderr)]
    fn mount(local: Local, mib: u64) -> Option<OnSmallDisk> {
        let at = local.home();
        std::fs::create_dir_all(&at).expect("mkdir");
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(&at)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "\n!!!!! SKIPPED: a tmpfs cannot be mounted here (run the tests as root) !!!!!\n"
            );
            return None;
        }
        Some(OnSmallDisk { local })
    }
}

impl Drop for OnSmallDisk {
    fn drop(&mut self) {
        let _ = self.local.div(&["server", "stop"]);
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.local.home())
            .status();
    }
}

/// A file a run waits for in its volume `gate`: made by [`Gate::open`], or when dropped.
struct Gate(PathBuf);

impl Gate {
    fn open(&self) {
        std::fs::create_dir_all(&self.0).expect("the gate's volume");
        std::fs::write(self.0.join("open"), "").expect("open the gate");
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::create_dir_all(&self.0);
        let _ = std::fs::write(self.0.join("open"), "");
    }
}

/// An image of gzip `layers` (blob, and the diff_id its config names).
fn image_of(layers: &[(Vec<u8>, div_image::Digest)]) -> Built {
    use div_image::Digest;
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": image_support::this_arch(),
        "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers",
                   "diff_ids": layers.iter().map(|(_, d)| d.to_string()).collect::<Vec<_>>()},
    }))
    .expect("json");
    let cd = Digest::sha256_of(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": image_support::OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": cd.to_string(), "size": config.len()},
        "layers": layers.iter().map(|(data, _)| serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": Digest::sha256_of(data).to_string(),
            "size": data.len(),
        })).collect::<Vec<_>>(),
    }))
    .expect("json");
    Built {
        manifest_digest: Digest::sha256_of(&manifest),
        blobs: layers
            .iter()
            .map(|(data, _)| (Digest::sha256_of(data), data.clone()))
            .collect(),
        config: (cd, config),
        manifest,
        layers: layers.iter().map(|(d, _)| Digest::sha256_of(d)).collect(),
    }
}

/// A gzip layer whose tar holds one file of `mib` MiB of zeros, in a few KiB a MiB: gzip
/// members concatenated, which layers are read as (one stream).
fn zero_bomb(mib: u64) -> Vec<u8> {
    // The header of an empty file, its size then set (octal) and its checksum made again.
    let mut header = image_support::tar(&[E::File("zeros", 0o644, Vec::new())])[..512].to_vec();
    header[124..136].copy_from_slice(format!("{:011o}\0", mib << 20).as_bytes());
    header[148..156].fill(b' ');
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let member = image_support::gzip(&vec![0u8; 1 << 20]);
    let mut out = image_support::gzip(&header);
    for _ in 0..mib {
        out.extend_from_slice(&member);
    }
    out.extend_from_slice(&image_support::gzip(&[0u8; 1024]));
    out
}

#[test]
fn a_decompression_bomb_and_a_wrong_diff_id_are_refused_while_a_run_beside_them_finishes_whole() {
    use div_image::Digest;
    let Some(reg) = Registry::start(None) else {
        return;
    };
    // The state directory (and so the image cache and every run's files) on a 64 MiB disk:
    // the bomb's 256 MiB of zeros would fill it.
    let Some(disk) = OnSmallDisk::mount(project(), 64) else {
        return;
    };
    let local = &disk.local;
    let bomb = zero_bomb(256);
    let bomb_layer = Digest::sha256_of(&bomb);
    let honest = image_support::tar(&[E::Dir("etc", 0o755), file("etc/x", "x")]);
    let honest_gz = image_support::gzip(&honest);
    let wrong = Digest::sha256_of(b"another stream");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let bomb_image = image_of(&[(bomb, Digest::sha256_of(b"never reached"))]);
        push(
            &reg.addr,
            "attacks/bomb",
            "1",
            &bomb_image,
            &Credentials::none(),
        )
        .await;
        let diff_image = image_of(&[(honest_gz.clone(), wrong.clone())]);
        push(
            &reg.addr,
            "attacks/diff",
            "1",
            &diff_image,
            &Credentials::none(),
        )
        .await;
    });

    // The run beside: a log line every tick until the test opens its gate (at the end, or
    // when it fails: the run never outlives the test).
    let gate = Gate(local.home().join("volumes/gate"));
    let out = local.div(&[
        "run",
        "--detach",
        "--gpu",
        "cpu",
        "--no-upload",
        "--",
        // (Bounded by itself too: 2400 ticks, so a gate never seen fails the test, not hangs it.)
        "n=0; until [ -e /mnt/gate/open ] || [ $n -ge 2400 ]; do n=$((n+1)); echo \"tick $n\"; sleep 0.05; done; \
         [ -e /mnt/gate/open ] && echo \"ticked $n times\"",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let name = text(&out.stdout).trim().to_owned();
    // It is going: its first line is in its log.
    let runs = local.home().join("runs");
    let patience = std::time::Duration::from_secs(120);
    div_test_support::wait_until("the run's first line in its log", patience, || {
        let logged = std::fs::read_dir(&runs)
            .map(|d| {
                d.flatten().any(|e| {
                    std::fs::read_to_string(e.path().join("log"))
                        .is_ok_and(|l| l.contains("tick 1\n"))
                })
            })
            .unwrap_or(false);
        if logged { Ok(()) } else { Err("") }
    });

    let bomb_ref = format!("{}/attacks/bomb:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &bomb_ref,
        "--no-upload",
        "--",
        "echo ran",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "caused by: the image cannot be used: layer 1 of 1 (`{bomb_layer}`) of `{bomb_ref}` unpacks past the free space of the image cache's filesystem ("
        )) && stderr.contains("kept free for everything else there: refused, nothing of the image kept"),
        "{stderr}"
    );

    let diff_ref = format!("{}/attacks/diff:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &diff_ref,
        "--no-upload",
        "--",
        "echo ran",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "caused by: the image cannot be used: layer 1 of 1 (`{}`) of `{diff_ref}` unpacks to `{}`, but the image's config says its diff_id is `{wrong}`: refused, nothing of the image kept",
            Digest::sha256_of(&honest_gz),
            Digest::sha256_of(&honest),
        )),
        "{stderr}"
    );
    // Nothing of either is kept as unpacked.
    let cache = local.home().join("images");
    assert_eq!(
        std::fs::read_dir(cache.join("tmp")).expect("tmp").count(),
        0,
        "{:?}",
        listing(&cache.join("tmp"))
    );
    assert!(local.rootfs().is_empty(), "{:?}", local.rootfs());

    // The run beside goes on to its end with every line it wrote.
    gate.open();
    let out = local.div(&["logs", "--follow", &name]);
    let log = text(&out.stdout);
    assert!(out.status.success(), "{log}\n{}", text(&out.stderr));
    let ticks: u64 = log
        .lines()
        .find_map(|l| {
            l.strip_prefix("ticked ")?
                .strip_suffix(" times")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no last line in {log}"));
    for n in 1..=ticks {
        assert_eq!(
            log.matches(&format!("tick {n}\n")).count(),
            1,
            "tick {n} in {log}"
        );
    }
    // And the next run runs.
    let out = local.div(&["run", "--gpu", "cpu", "--no-upload", "--", "echo after"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("after\n"),
        "{}",
        text(&out.stdout)
    );
}

/// Pushes each `(repository, tag, layers, config)` to a fresh loopback registry; `None`
/// (skipped loudly) without `docker-registry` or busybox.
fn registry_with(images: Vec<(&str, &str, Vec<Vec<E>>, serde_json::Value)>) -> Option<Registry> {
    let reg = Registry::start(None)?;
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        for (repo, tag, layers, config) in images {
            push(
                &reg.addr,
                repo,
                tag,
                &build(&layers, config),
                &Credentials::none(),
            )
            .await;
        }
    });
    Some(reg)
}

/// A shell script at `path` (mode 0755).
fn script(path: &'static str, body: &str) -> E {
    E::File(path, 0o755, format!("#!/bin/sh\n{body}\n").into_bytes())
}

/// Debian's `/etc/profile`, in what it does to `PATH` (and a variable of the image's that a
/// profile also sets, and one only the profile sets, to see it ran).
const DEBIAN_LIKE_PROFILE: &str = "if [ \"$(id -u)\" -eq 0 ]; then\n  PATH=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\nelse\n  PATH=\"/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games\"\nfi\nexport PATH\nexport GREETING='from the profile'\nexport PROFILE_RAN=yes\n";

#[test]
fn the_image_s_path_and_env_survive_a_profile_that_resets_them() {
    let Some(mut layer) = busybox_layer() else {
        return;
    };
    layer.extend([
        E::Symlink("bin/which", "busybox"),
        file("etc/profile", DEBIAN_LIKE_PROFILE),
        E::Dir("opt", 0o755),
        E::Dir("opt/venv", 0o755),
        E::Dir("opt/venv/bin", 0o755),
        script("opt/venv/bin/marker", "echo \"marker from the venv\""),
    ]);
    let path = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    let Some(reg) = registry_with(vec![(
        "tools/venv",
        "1",
        vec![layer],
        serde_json::json!({"Env": [format!("PATH={path}"), "GREETING=from the image"]}),
    )]) else {
        return;
    };
    let local = project();
    let image = format!("{}/tools/venv:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--env",
        "MINE=from --env",
        "--no-upload",
        "--",
        "echo \"path=$PATH\"; which marker; marker; echo \"greeting=$GREETING mine=$MINE profile=$PROFILE_RAN\"; env | grep -c __div_ || true",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // The image's PATH, whatever the profile set; the profile still ran (`sh -lc`).
    assert!(stdout.contains(&format!("\npath={path}\n")), "{stdout}");
    assert!(
        stdout.contains("\n/opt/venv/bin/marker\nmarker from the venv\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\ngreeting=from the image mine=from --env profile=yes\n"),
        "{stdout}"
    );
    // div's copies are gone before the command starts.
    assert!(stdout.contains("\n0\n"), "{stdout}");
}

#[test]
fn a_py_entrypoint_runs_with_python3_where_the_image_has_no_python() {
    let Some(layer) = busybox_layer() else {
        return;
    };
    let python3 = vec![
        E::Dir("usr", 0o755),
        E::Dir("usr/bin", 0o755),
        script("usr/bin/python3", "echo \"fake python3 got: $*\""),
    ];
    let mut both = python3.clone();
    both.push(script("usr/bin/python", "echo \"fake python got: $*\""));
    let config = serde_json::json!({"Env": ["PATH=/usr/bin:/bin"]});
    let Some(reg) = registry_with(vec![
        (
            "tools/py",
            "3only",
            vec![layer.clone(), python3],
            config.clone(),
        ),
        ("tools/py", "both", vec![layer, both], config),
    ]) else {
        return;
    };
    let local = project();
    let only = format!("{}/tools/py:3only", reg.addr);
    for (entrypoint, command) in [
        ("train.py::main", "-u -c 'from train import main; main()'"),
        ("train.py", "-u train.py"),
    ] {
        let out = local.div(&["run", "--gpu", "cpu", "--image", &only, entrypoint]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        let said = format!(
            "div: the image {only} has no `python` on its PATH, only `python3`: the entrypoint {entrypoint} runs as `python3 {command}`"
        );
        let said_at = stdout
            .find(&said)
            .unwrap_or_else(|| panic!("said: {stdout}"));
        let ran_at = stdout
            .find(&format!(
                "fake python3 got: {}\n",
                command.replace('\'', "")
            ))
            .unwrap_or_else(|| panic!("ran: {stdout}"));
        assert!(said_at < ran_at, "said in the first lines: {stdout}");
    }
    // A command the user wrote is never rewritten: its last line says what the image has.
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &only,
        "--",
        "python train.py",
    ]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains(&format!(
            "div: the image {only} has no `python` on its PATH, and the entrypoint python train.py is Python: it has `python3`: write that in the command"
        )),
        "{all}"
    );
    // Where `python` is there, it is what runs, and nothing is said.
    let both = format!("{}/tools/py:both", reg.addr);
    let out = local.div(&["run", "--gpu", "cpu", "--image", &both, "train.py"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("fake python got: -u train.py\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("python3"), "{stdout}");
}

#[test]
fn a_working_dir_the_image_lacks_is_made_for_the_run_and_never_in_the_cache() {
    let Some(mut layer) = busybox_layer() else {
        return;
    };
    layer.extend([
        E::Dir("usr", 0o755),
        E::Dir("usr/src", 0o755),
        file("usr/src/kept", "the image's\n"),
        file("file", "not a directory\n"),
    ]);
    let Some(reg) = registry_with(vec![
        (
            "tools/wd",
            "top",
            vec![layer.clone()],
            serde_json::json!({"Env": ["PATH=/bin"], "WorkingDir": "/app/sub"}),
        ),
        (
            "tools/wd",
            "deep",
            vec![layer.clone()],
            serde_json::json!({"Env": ["PATH=/bin"], "WorkingDir": "/usr/src/app"}),
        ),
        (
            "tools/wd",
            "file",
            vec![layer],
            serde_json::json!({"Env": ["PATH=/bin"], "WorkingDir": "/file/app"}),
        ),
    ]) else {
        return;
    };
    let local = project();
    for (tag, dir) in [("top", "/app/sub"), ("deep", "/usr/src/app")] {
        let image = format!("{}/tools/wd:{tag}", reg.addr);
        let out = local.div(&[
            "run",
            "--gpu",
            "cpu",
            "--image",
            &image,
            "--no-upload",
            "--",
            "pwd; touch here && echo wrote; ls; cat /usr/src/kept; (echo x > /usr/src/new) 2>/dev/null && echo WROTE THE IMAGE; ls /usr/src",
        ]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{tag}: {stdout}\n{}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains(&format!(
                "div: the image has no {dir}, its WorkingDir: made for this run"
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("\n{dir}\nwrote\nhere\nthe image's\n")),
            "{tag}: {stdout}"
        );
        assert!(!stdout.contains("WROTE THE IMAGE"), "{tag}: {stdout}");
        // The rest of the image as it was: `/usr/src` keeps its entries.
        assert!(stdout.contains("kept"), "{tag}: {stdout}");
    }
    // Nothing was made in the cached trees.
    for tree in local.rootfs() {
        assert!(!tree.join("app").exists(), "{tree:?}");
        assert!(!tree.join("usr/src/app").exists(), "{tree:?}");
    }
    // A WorkingDir that cannot be a directory: the run fails, saying why.
    let image = format!("{}/tools/wd:file", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--no-upload",
        "--",
        "pwd",
    ]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("the image's WorkingDir `/file/app` cannot be where the run starts: `/file` is a file in the image, not a directory"),
        "{all}"
    );
}

/// The digest an image's first log line names (`div: image REF (sha256:…)`).
fn first_line_digest(stdout: &str, image: &str) -> Option<String> {
    let start = stdout.find(&format!("div: image {image} ("))? + image.len() + 13;
    let end = start + stdout[start..].find(')')?;
    Some(stdout[start..end].to_owned())
}

#[test]
fn a_tag_that_moved_is_pulled_again_as_pull_says() {
    let Some(layer) = busybox_layer() else {
        return;
    };
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let marked = |which: &str| {
        build(
            &[
                layer.clone(),
                vec![file("etc/which", &format!("image {which}\n"))],
            ],
            serde_json::json!({"Env": ["PATH=/bin"]}),
        )
    };
    let (a, b) = (marked("A"), marked("B"));
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(push(
        &reg.addr,
        "tools/moving",
        "t",
        &a,
        &Credentials::none(),
    ));
    rt.block_on(push(
        &reg.addr,
        "tools/other",
        "1",
        &a,
        &Credentials::none(),
    ));
    let local = project();
    let image = format!("{}/tools/moving:t", reg.addr);
    let run = |pull: Option<&str>| {
        let mut args = vec!["run", "--gpu", "cpu", "--image", &image];
        if let Some(pull) = pull {
            args.extend(["--pull", pull]);
        }
        args.extend(["--no-upload", "--", "cat /etc/which"]);
        let out = local.div(&args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{pull:?}: {stdout}\n{stderr}");
        (stdout, stderr)
    };
    let (a_digest, b_digest) = (a.manifest_digest.to_string(), b.manifest_digest.to_string());

    let (stdout, _) = run(None);
    assert!(stdout.contains("\nimage A\n"), "{stdout}");
    assert_eq!(
        first_line_digest(&stdout, &image).as_deref(),
        Some(a_digest.as_str())
    );

    // The tag moves to B at the registry.
    rt.block_on(push(
        &reg.addr,
        "tools/moving",
        "t",
        &b,
        &Credentials::none(),
    ));
    for pull in [None, Some("missing")] {
        let (stdout, stderr) = run(pull);
        assert!(stdout.contains("\nimage A\n"), "{pull:?}: {stdout}");
        assert_eq!(
            first_line_digest(&stdout, &image).as_deref(),
            Some(a_digest.as_str())
        );
        assert!(
            stderr.contains(&format!(
                "image {image}: {a_digest} from the cache, as the tag resolved at "
            )) && stderr.contains("(--pull always looks for a newer one)"),
            "{pull:?}: {stderr}"
        );
        assert!(!stderr.contains("pulling "), "{stderr}");
    }
    let (stdout, stderr) = run(Some("always"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");
    assert_eq!(
        first_line_digest(&stdout, &image).as_deref(),
        Some(b_digest.as_str())
    );
    assert!(
        stderr.contains(&format!("pulling {image}: 2 layers, ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("image {image} ready ({b_digest})")),
        "{stderr}"
    );
    // From now on the tag names B in the cache too; asking again finds it unchanged.
    let (stdout, _) = run(Some("missing"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");
    let (stdout, stderr) = run(Some("always"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "image {image}: {b_digest}, as the registry has it now, already cached"
        )),
        "{stderr}"
    );
    let (stdout, _) = run(Some("never"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");

    // `div image ls`: the tag's digest and when it resolved; what each pull downloaded (B's
    // shared busybox layer came with A, so B downloaded less than its size).
    let out = local.div(&["image", "ls"]);
    let listed = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        listed.starts_with("IMAGE\tDIGEST\tRESOLVED\tDOWNLOADED\tUNPACKED\n"),
        "{listed}"
    );
    let row = |first: &str| -> Vec<String> {
        listed
            .lines()
            .find(|l| l.starts_with(&format!("{first}\t")))
            .unwrap_or_else(|| panic!("no row for {first}: {listed}"))
            .split('\t')
            .map(str::to_owned)
            .collect()
    };
    let size = |built: &Built, skip: &[div_image::Digest]| -> u64 {
        (built.manifest.len() + built.config.1.len()) as u64
            + built
                .blobs
                .iter()
                .filter(|(d, _)| !skip.contains(d))
                .map(|(_, bytes)| bytes.len() as u64)
                .sum::<u64>()
    };
    let tagged = row(&image);
    assert_eq!(tagged[1], b_digest[..19], "{listed}");
    assert!(
        tagged[2].ends_with('Z') && tagged[2].contains('T'),
        "{listed}"
    );
    let b_downloaded = size(&b, &a.layers);
    assert_eq!(tagged[3], div_spec::format_bytes(b_downloaded), "{listed}");
    assert!(b_downloaded < size(&b, &[]), "a shared layer");
    // A keeps no tag (`<none>`) and what it downloaded: all of it.
    let untagged = row("<none>");
    assert_eq!(untagged[1], a_digest[..19], "{listed}");
    assert_eq!(untagged[2], "-", "{listed}");
    assert_eq!(
        untagged[3],
        div_spec::format_bytes(size(&a, &[])),
        "{listed}"
    );

    // `--pull never` with nothing cached: refused before anything is created or shipped.
    let runs_before = std::fs::read_dir(local.home().join("runs"))
        .expect("runs")
        .count();
    let trees_before = local.rootfs();
    let other = format!("{}/tools/other:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &other,
        "--pull",
        "never",
        "train.py::main",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "`{other}` is not in this machine's image cache, and --pull never forbids pulling it: pull it once with --pull missing (the default) or --pull always"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains('→'), "nothing shipped: {stderr}");
    let runs_after = std::fs::read_dir(local.home().join("runs"))
        .expect("runs")
        .count();
    assert_eq!(runs_after, runs_before, "no run created");
    assert_eq!(local.rootfs(), trees_before, "nothing pulled");
    // A word `--pull` does not take is refused by the parser, with the ones it does.
    let out = local.div(&[
        "run",
        "--image",
        &other,
        "--pull",
        "sometimes",
        "--",
        "true",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[possible values: missing, always, never]"),
        "{stderr}"
    );
}
