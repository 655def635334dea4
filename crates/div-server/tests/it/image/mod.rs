//! Runs in images, on a server in-process, with images built here and pushed to Debian's
//! `docker-registry` on loopback (div-test-support's image helpers). The server is given the
//! settings `div server` gives it out of the box (`ServerOptions::images`): this machine's own
//! system stands in for the default image, no insecure registry (a loopback one is always
//! plain HTTP), and logins read from an empty home (none).
//!
//! By subject: `pull.rs` (pulled, refused, the named default never replaced, a moved tag
//! pulled again as `pull` says), `inside.rs` (what a run in an image gets: its user, its
//! Python (or python3, or a word that it has none), its PATH and env, its working dir),
//! `hostile.rs` (a run or an image that attacks the cache); here, the images the tests build,
//! the registry they push to and the server they start.

mod hostile;
mod inside;
mod pull;

use std::path::{Path, PathBuf};

use div_image::Credentials;
use div_server::{DefaultImage, ImageSettings, SandboxMode, ServerOptions};
use div_test_support::image as image_support;
use div_test_support::image::{Built, E, Registry, busybox_layer, push};
use serde_json::{Value, json};

use crate::harness::Server;

/// The image settings `div server` gives the server out of the box, with its logins read
/// from `home` (a folder with none).
fn settings(home: &Path) -> ImageSettings {
    ImageSettings {
        default_image: DefaultImage::Host,
        insecure_registries: Vec::new(),
        credentials: div_image::CredentialSources {
            home: Some(home.to_path_buf()),
            ..Default::default()
        },
    }
}

/// Those settings on `options` (its logins' home beside its state directory).
pub(crate) fn with_settings(options: &mut ServerOptions) {
    let user_home = options
        .home
        .parent()
        .map_or_else(|| PathBuf::from("/nonexistent"), |p| p.join("user-home"));
    options.images = settings(&user_home);
}

/// A server on a temp home with those settings.
async fn start() -> Server {
    Server::start_changed(Some("h100:2"), SandboxMode::Auto, with_settings).await
}

/// An image whose config carries `config` (`Env`, `WorkingDir`, `User`…), gzip layers.
fn build(layers: &[Vec<E>], config: Value) -> Built {
    build_with(layers, config, true)
}

/// The same, with plain tar layers when `compress` is false (fast for a large tree in a debug
/// build).
fn build_with(layers: &[Vec<E>], config: Value, compress: bool) -> Built {
    image_support::build_image(layers, image_support::this_arch(), config, compress)
}

/// A registry holding `tools/busybox:1` (root, `WorkingDir` `/work`, an `Env`) and
/// `tools/busybox:user` (`User` `runner`).
pub(crate) async fn registry() -> Option<Registry> {
    let layer = busybox_layer()?;
    let reg = Registry::start(None)?;
    let root = build(
        std::slice::from_ref(&layer),
        json!({
            "Env": ["PATH=/bin", "GREETING=hello from the image", "DIVERGENT_RUN_ID=the image's, overridden"],
            "WorkingDir": "/work",
        }),
    );
    let user = build(&[layer], json!({"Env": ["PATH=/bin"], "User": "runner"}));
    push(&reg.addr, "tools/busybox", "1", &root, &Credentials::none()).await;
    push(
        &reg.addr,
        "tools/busybox",
        "user",
        &user,
        &Credentials::none(),
    )
    .await;
    Some(reg)
}

/// Pushes each `(repository, tag, layers, config)` to a fresh loopback registry; `None`
/// (skipped loudly) without `docker-registry`.
async fn registry_with(images: Vec<(&str, &str, Vec<Vec<E>>, Value)>) -> Option<Registry> {
    let reg = Registry::start(None)?;
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
    Some(reg)
}

/// The project's code as `div run` ships it (without `--no-upload`): its `train.py`.
async fn project_code(server: &Server) -> Value {
    server
        .code(&[("train.py", "def main():\n    print('trained')\n")])
        .await
}

/// The `entrypoint` and `command` fields of a run of `typed`, as `div run TYPED` sends them.
fn entrypoint(typed: &str) -> Value {
    let parsed = div_spec::Entrypoint::parse(typed).expect("an entrypoint");
    json!({"entrypoint": typed, "command": parsed.command()})
}

/// `extra` with `more`'s fields added.
fn merged(mut extra: Value, more: Value) -> Value {
    if let (Some(e), Value::Object(m)) = (extra.as_object_mut(), more) {
        e.extend(m);
    }
    extra
}

/// Places a run of `command` with `extra`, expecting it created; waits for its end. The run
/// as it ended, and its log.
async fn run_to_end(server: &Server, command: &str, extra: Value) -> (Value, String) {
    let (status, run) = server.create_run(command, extra).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    let log = server.log_text(&id).await;
    (ended, log)
}

/// As [`run_to_end`], expecting it to succeed; its log.
async fn run_ok(server: &Server, command: &str, extra: Value) -> String {
    let (ended, log) = run_to_end(server, command, extra).await;
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
    log
}

/// `POST /v1/images/pull` of `image` (with `pull` when given): each line of the answer.
async fn pull(server: &Server, image: &str, pull: Option<&str>) -> Vec<Value> {
    let mut body = json!({"image": image});
    if let Some(pull) = pull {
        body["pull"] = Value::String(pull.to_owned());
    }
    let (status, bytes) = server
        .try_request(
            "POST",
            "/v1/images/pull",
            Some(body.to_string().into_bytes()),
            &[],
        )
        .await
        .expect("the pull request went through");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert_eq!(status, 200, "{text}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The runs the server lists.
async fn runs_listed(server: &Server) -> Vec<Value> {
    let (status, list) = server.request("GET", "/v1/runs", None).await;
    assert_eq!(status, 200, "{list}");
    list["runs"].as_array().cloned().unwrap_or_default()
}

/// How many run directories the server's home holds.
fn run_dirs(home: &Path) -> usize {
    std::fs::read_dir(home.join("runs"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The unpacked trees in the image cache of the server at `home`.
fn rootfs(home: &Path) -> Vec<PathBuf> {
    let dir = home.join("images/images/sha256");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path().join("rootfs")).collect())
        .unwrap_or_default();
    v.sort();
    v
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

/// An HTTPS proxy on loopback that records the first line of each request (`CONNECT
/// host:port HTTP/1.1`), one a line in `record`, and refuses it, so nothing leaves this
/// machine. Its address.
fn refusing_proxy(record: PathBuf) -> String {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = format!("http://{}", listener.local_addr().expect("local addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(&stream);
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            let mut lines = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&record)
                .expect("the proxy's record");
            lines
                .write_all(format!("{}\n", first.trim_end()).as_bytes())
                .expect("a line of the proxy's record");
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = (&stream).write_all(
                b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    addr
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

/// A temp folder whose `home` is a tmpfs of its own, of a few MiB (root only), for a server's
/// state directory. Declared before the server it holds, it is dropped after it: the server
/// is stopped first, then the tmpfs is unmounted (lazily: a supervisor may still be writing
/// its end).
struct SmallDisk {
    home: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` (the test skips loudly) where a tmpfs cannot be mounted (not root).
    #[allow(clippy::print_stderr)]
    fn mount(mib: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("a temp dir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).expect("mkdir");
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(&home)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "\n!!!!! SKIPPED: a tmpfs cannot be mounted here (run the tests as root) !!!!!\n"
            );
            return None;
        }
        Some(SmallDisk { home, _dir: dir })
    }

    /// A server on it, with the settings `div server` gives it.
    async fn start(&self) -> Server {
        let mut options = crate::harness::options(&self.home, Some("h100:2"), SandboxMode::Auto);
        with_settings(&mut options);
        Server::at(options).await
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.home)
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
    let config = serde_json::to_vec(&json!({
        "architecture": image_support::this_arch(),
        "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers",
                   "diff_ids": layers.iter().map(|(_, d)| d.to_string()).collect::<Vec<_>>()},
    }))
    .expect("json");
    let cd = Digest::sha256_of(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": image_support::OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": cd.to_string(), "size": config.len()},
        "layers": layers.iter().map(|(data, _)| json!({
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

/// A shell script at `path` (mode 0755).
fn script(path: &'static str, body: &str) -> E {
    E::File(path, 0o755, format!("#!/bin/sh\n{body}\n").into_bytes())
}

/// Debian's `/etc/profile`, in what it does to `PATH` (and a variable of the image's that a
/// profile also sets, and one only the profile sets, to see it ran).
const DEBIAN_LIKE_PROFILE: &str = "if [ \"$(id -u)\" -eq 0 ]; then\n  PATH=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\nelse\n  PATH=\"/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games\"\nfi\nexport PATH\nexport GREETING='from the profile'\nexport PROFILE_RAN=yes\n";

/// The digest an image's first log line names (`div: image REF (sha256:…)`).
fn first_line_digest(log: &str, image: &str) -> Option<String> {
    let start = log.find(&format!("div: image {image} ("))? + image.len() + 13;
    let end = start + log[start..].find(')')?;
    Some(log[start..end].to_owned())
}
