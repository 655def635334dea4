//! Images for tests (feature `image`): a real registry on loopback (Debian's
//! `docker-registry`), images and layers built in memory, pushing them, OCI layouts for umoci,
//! and a tree's contents to compare. div-image's tests, div-server's runs in images and
//! div-cli's `div run --image` tests share them.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use div_image::{Credentials, Digest, ImageRef, Login, Pusher, RegistryOptions};

/// Finds a program, or says loudly that the test is skipped.
pub fn program(name: &str) -> Option<PathBuf> {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "\n!!!!! SKIPPED: `{name}` is not installed (apt-get install -y docker-registry umoci apache2-utils busybox-static); .ci/run installs it !!!!!\n"
        );
    }
    None
}

/// Debian's `docker-registry` (distribution) serving on a loopback port, killed on drop.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The registry's own storage folder.
    pub storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("local addr").port()
}

impl Registry {
    /// Starts one; with `login`, it asks for HTTP basic auth (htpasswd, bcrypt).
    pub fn start(login: Option<(&str, &str)>) -> Option<Registry> {
        let bin = program("docker-registry")?;
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = dir.path().join("storage");
        let mut auth = String::new();
        if let Some((user, pass)) = login {
            let htpasswd = program("htpasswd")?;
            let out = Command::new(htpasswd)
                .args(["-Bbn", user, pass])
                .output()
                .expect("run htpasswd");
            assert!(out.status.success(), "htpasswd failed");
            let file = dir.path().join("htpasswd");
            std::fs::write(&file, &out.stdout).expect("write htpasswd");
            auth = format!(
                "auth:\n  htpasswd:\n    realm: div-test\n    path: {}\n",
                file.display()
            );
        }
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth}",
                    storage.display()
                ),
            )
            .expect("write config");
            let mut child = Command::new(&bin)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start docker-registry");
            // A deadline, not a measure: a machine loaded by other suites' runs (a thread bomb
            // among them) took over 30 s to start the registry.
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if std::net::TcpStream::connect(&addr).is_ok() {
                    return Some(Registry {
                        child,
                        addr,
                        storage,
                        _dir: dir,
                    });
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken: try another
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("docker-registry did not listen on {addr} within 120 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("docker-registry would not start on any port");
    }

    /// The path of a blob in the registry's own storage (to tamper with it).
    pub fn blob_data(&self, d: &Digest) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&d.hex()[..2])
            .join(d.hex())
            .join("data")
    }
}

/// Registry options with a 5 ms backoff, so retries cost a test nothing.
pub fn fast_options() -> RegistryOptions {
    RegistryOptions {
        backoff: Duration::from_millis(5),
        ..RegistryOptions::default()
    }
}

/// Credentials holding one login for `registry`.
pub fn login(registry: &str, user: &str, pass: &str) -> Credentials {
    let mut c = Credentials::none();
    c.insert(
        registry,
        Login {
            username: user.to_owned(),
            password: pass.to_owned(),
        },
    );
    c
}

/// One tar entry of a layer built by a test.
#[derive(Clone, Debug)]
pub enum E {
    /// A folder and its mode.
    Dir(&'static str, u32),
    /// A file, its mode and content.
    File(&'static str, u32, Vec<u8>),
    /// A symlink and its target.
    Symlink(&'static str, &'static str),
    /// A hard link and the path it links to.
    Hardlink(&'static str, &'static str),
    /// A character device (1, 3).
    CharDev(&'static str),
    /// A FIFO.
    Fifo(&'static str),
    /// A regular file whose raw name is written as is (`..`, absolute).
    RawFile(&'static str, Vec<u8>),
}

/// A 0644 file holding `content`.
pub fn file(path: &'static str, content: &str) -> E {
    E::File(path, 0o644, content.as_bytes().to_vec())
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(1_700_000_000);
    h.set_uid(0);
    h.set_gid(0);
    h
}

/// Writes `name` and `link` into the header as raw bytes: the tar crate refuses `..` and
/// absolute paths, which hostile layers hold.
fn raw_names(h: &mut tar::Header, name: &str, link: &str) {
    assert!(
        name.len() <= 100 && link.len() <= 100,
        "test names fit the old header"
    );
    let old = h.as_old_mut();
    old.name.fill(0);
    old.name[..name.len()].copy_from_slice(name.as_bytes());
    old.linkname.fill(0);
    old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.set_cksum();
}

/// A tar stream of `entries`, in order.
pub fn tar(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let (mut h, name, link, data): (tar::Header, &str, &str, &[u8]) = match e {
            E::Dir(p, mode) => (header(tar::EntryType::Directory, *mode, 0), p, "", &[]),
            E::File(p, mode, data) => (
                header(tar::EntryType::Regular, *mode, data.len() as u64),
                p,
                "",
                &data[..],
            ),
            E::Symlink(p, target) => (header(tar::EntryType::Symlink, 0o777, 0), p, target, &[]),
            E::Hardlink(p, target) => (header(tar::EntryType::Link, 0o644, 0), p, target, &[]),
            E::CharDev(p) => {
                let mut h = header(tar::EntryType::Char, 0o666, 0);
                h.set_device_major(1).expect("major");
                h.set_device_minor(3).expect("minor");
                (h, p, "", &[])
            }
            E::Fifo(p) => (header(tar::EntryType::Fifo, 0o644, 0), p, "", &[]),
            E::RawFile(p, data) => (
                header(tar::EntryType::Regular, 0o644, data.len() as u64),
                p,
                "",
                &data[..],
            ),
        };
        raw_names(&mut h, name, link);
        b.append(&h, data).expect("append entry");
    }
    b.into_inner().expect("finish tar")
}

/// `data`, gzipped (fast level).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).expect("gzip");
    enc.finish().expect("gzip finish")
}

/// Deterministic incompressible bytes.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// An image built in memory: gzip layers, a config and a manifest.
#[derive(Debug)]
pub struct Built {
    /// The layers, compressed, with their digests.
    pub blobs: Vec<(Digest, Vec<u8>)>,
    /// The config and its digest.
    pub config: (Digest, Vec<u8>),
    /// The manifest's bytes.
    pub manifest: Vec<u8>,
    /// The manifest's digest.
    pub manifest_digest: Digest,
    /// The layers' digests, in order.
    pub layers: Vec<Digest>,
}

/// An OCI image manifest's media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index's media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

fn sha256_hex(b: &[u8]) -> String {
    Digest::sha256_of(b).to_string()
}

/// An image of `layers` for `arch`, with `env` and `workdir` in its config (gzip layers).
pub fn build(layers: &[Vec<E>], arch: &str, env: &[&str], workdir: &str) -> Built {
    build_image(
        layers,
        arch,
        serde_json::json!({"Env": env, "WorkingDir": workdir, "Cmd": ["sh"]}),
        true,
    )
}

/// An image of `layers` for `arch` whose config carries `config` (its `Env`, `WorkingDir`,
/// `User`…): gzip layers, or plain tar ones when `compress` is false (fast for a large tree
/// in a debug build).
pub fn build_image(
    layers: &[Vec<E>],
    arch: &str,
    config: serde_json::Value,
    compress: bool,
) -> Built {
    let mut blobs = Vec::new();
    let mut diff_ids = Vec::new();
    let mut descs = Vec::new();
    let mut layer_digests = Vec::new();
    for l in layers {
        let raw = tar(l);
        diff_ids.push(sha256_hex(&raw));
        let (data, media_type) = if compress {
            (gzip(&raw), "application/vnd.oci.image.layer.v1.tar+gzip")
        } else {
            (raw, "application/vnd.oci.image.layer.v1.tar")
        };
        let d = Digest::sha256_of(&data);
        descs.push(serde_json::json!({
            "mediaType": media_type,
            "digest": d.to_string(),
            "size": data.len(),
        }));
        layer_digests.push(d.clone());
        blobs.push((d, data));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .expect("config json");
    let cd = Digest::sha256_of(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd.to_string(), "size": config.len()},
        "layers": descs,
    }))
    .expect("manifest json");
    Built {
        manifest_digest: Digest::sha256_of(&manifest),
        blobs,
        config: (cd, config),
        manifest,
        layers: layer_digests,
    }
}

/// This machine's architecture as OCI names it (`amd64`, `arm64`).
pub fn this_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Pushes `image` to `registry/repo:tag`.
pub async fn push(registry: &str, repo: &str, tag: &str, image: &Built, creds: &Credentials) {
    let r: ImageRef = format!("{registry}/{repo}:{tag}").parse().expect("ref");
    let p = Pusher::connect(&r, creds, &fast_options())
        .await
        .expect("connect to push");
    for (_, b) in &image.blobs {
        p.blob(b.clone()).await.expect("push layer");
    }
    p.blob(image.config.1.clone()).await.expect("push config");
    p.manifest(tag, image.manifest.clone(), OCI_MANIFEST)
        .await
        .expect("push manifest");
}

/// Writes `image` as an OCI layout (for umoci) tagged `tag`.
pub fn oci_layout(dir: &Path, image: &Built, tag: &str) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).expect("layout dir");
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)
        .expect("oci-layout");
    for (d, b) in image.blobs.iter().chain(std::iter::once(&image.config)) {
        std::fs::write(blobs.join(d.hex()), b).expect("blob");
    }
    std::fs::write(blobs.join(image.manifest_digest.hex()), &image.manifest).expect("manifest");
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": OCI_MANIFEST,
            "digest": image.manifest_digest.to_string(),
            "size": image.manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    });
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&index).expect("index"),
    )
    .expect("index.json");
}

/// What a tree holds: per path, its kind, mode, and content or link target.
pub fn tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, p: &Path, out: &mut BTreeMap<String, String>) {
        let m = std::fs::symlink_metadata(p).expect("lstat");
        let rel = format!("/{}", p.strip_prefix(root).expect("under root").display());
        let mode = m.permissions().mode() & 0o7777;
        let what = if m.file_type().is_symlink() {
            format!(
                "symlink -> {}",
                std::fs::read_link(p).expect("readlink").display()
            )
        } else if m.is_dir() {
            format!("dir {mode:o}")
        } else if m.is_file() {
            let data = std::fs::read(p).expect("read");
            format!(
                "file {mode:o} nlink={} {}",
                m.nlink(),
                String::from_utf8(data.clone())
                    .unwrap_or_else(|_| Digest::sha256_of(&data).to_string())
            )
        } else {
            format!("other {:o}", m.mode())
        };
        out.insert(rel, what);
        if m.is_dir() {
            let mut names: Vec<_> = std::fs::read_dir(p)
                .expect("readdir")
                .map(|e| e.expect("entry").path())
                .collect();
            names.sort();
            for n in names {
                walk(root, &n, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out.remove("/");
    out
}

/// A busybox-static tree for runs in an image: `/bin` with the applets the tests use (each a
/// link to `busybox`), an `/etc/os-release` that is not this machine's (`ID=divtest`),
/// `/etc/passwd` and `/etc/group` naming `runner` (1234:2345), and an empty `/work`. `None`
/// when busybox-static is not installed.
pub fn busybox_layer() -> Option<Vec<E>> {
    let bin = program("busybox")?;
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
