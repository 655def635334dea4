//! The benchmark's images, built here: Debian's packages fetched with `apt-get` and unpacked
//! with `dpkg -x` into three layers, made into OCI images and pushed to a registry on
//! loopback that the benchmark starts.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

/// The benchmark image's layers, lowest first: each holds what `apt-get install` of its
/// packages and those of the layers below brings that the layers below do not have.
pub(super) const LAYERS: [(&str, &[&str]); 3] = [
    (
        "base",
        &[
            "bash",
            "coreutils",
            "findutils",
            "grep",
            "sed",
            "gzip",
            "tar",
            "util-linux",
            "ncurses-base",
            "debianutils",
        ],
    ),
    ("python", &["python3-numpy", "python3-pip"]),
    ("ml", &["python3-pandas", "python3-sympy", "gcc"]),
];

/// The second image's own layer, over the first two of [`LAYERS`].
pub(super) const SECOND_TOP: (&str, &[&str]) = ("app", &["python3-requests", "python3-yaml"]);

/// Debian's `docker-registry` on a loopback port, killed when dropped.
pub(super) struct Registry {
    pub(super) child: Child,
    pub(super) addr: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    pub(super) fn start(bin: &Path, tmp: &Path) -> Result<Registry> {
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let addr = format!("127.0.0.1:{port}");
            let config = tmp.join("registry.yml");
            fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                    tmp.join("registry").display()
                ),
            )?;
            let mut child = Command::new(bin)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting docker-registry")?;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if std::net::TcpStream::connect(&addr).is_ok() {
                    return Ok(Registry { child, addr });
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken meanwhile: another
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    bail!("docker-registry did not listen on {addr} within 30 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        bail!("docker-registry would not start on any port")
    }
}

/// The layer trees of both images: [`LAYERS`] (`trees[..3]`) and [`SECOND_TOP`]
/// (`trees[3]`), each its packages unpacked with `dpkg -x` into a folder of `tmp`.
pub(super) fn debian_layers(debs: &Path, tmp: &Path) -> Result<Vec<PathBuf>> {
    let mut wanted: Vec<&str> = Vec::new();
    let mut below: BTreeSet<String> = BTreeSet::new();
    let mut trees = Vec::new();
    let mut python_below = BTreeSet::new();
    for (i, (name, packages)) in LAYERS.iter().chain([&SECOND_TOP]).enumerate() {
        if i == LAYERS.len() {
            // The second image's layer is over the first two only.
            wanted.truncate(LAYERS[0].1.len() + LAYERS[1].1.len());
            below = std::mem::take(&mut python_below);
        }
        wanted.extend(packages.iter());
        let dir = debs.join(name);
        let all = download(&dir, &wanted)?;
        let tree = tmp.join(format!("layer-{name}"));
        fs::create_dir_all(&tree)?;
        let mut count = 0;
        for deb in all.iter().filter(|d| !below.contains(*d)) {
            quiet(Command::new("dpkg").arg("-x").arg(dir.join(deb)).arg(&tree))?;
            count += 1;
        }
        eprintln!(
            "layer {name}: {count} packages, {:.0} MiB unpacked",
            disk(std::slice::from_ref(&tree)) as f64 / 1_048_576.0
        );
        below.extend(all);
        if i == 1 {
            python_below = below.clone();
        }
        trees.push(tree);
    }
    Ok(trees)
}

/// The `.deb` files `apt-get install` of `packages` would fetch onto an empty system,
/// fetched into `dir` (what is there already is kept, and older versions left there are not
/// taken); returns their names.
pub(super) fn download(dir: &Path, packages: &[&str]) -> Result<BTreeSet<String>> {
    fs::create_dir_all(dir.join("partial"))?;
    let apt = |what: &str| {
        let mut c = Command::new("apt-get");
        c.args(["-qq", "-y", what])
            .args(["-o", "Dir::State::status=/dev/null"])
            .arg("-o")
            .arg(format!("Dir::Cache::archives={}", dir.display()))
            .args(["-o", "Debug::NoLocking=1"])
            .args(["-o", "APT::Install-Recommends=false"])
            .arg("install")
            .args(packages);
        c
    };
    quiet(&mut apt("--download-only"))
        .context("fetching the benchmark image's packages (has `apt-get update` been run?)")?;
    // `Inst NAME (VERSION SOURCE [ARCH])`: the file apt keeps is NAME_VERSION_ARCH.deb, an
    // epoch's colon written `%3a`.
    let out = apt("-s").output().context("running apt-get -s")?;
    ensure!(out.status.success(), "apt-get -s failed ({})", out.status);
    let mut names = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rest) = line.strip_prefix("Inst ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        let arch = rest
            .split('[')
            .nth(1)
            .and_then(|a| a.split(']').next())
            .unwrap_or("all");
        let file = format!(
            "{name}_{}_{arch}.deb",
            version.trim_start_matches('(').replace(':', "%3a")
        );
        ensure!(
            dir.join(&file).is_file(),
            "apt-get fetched no `{file}` into {}",
            dir.display()
        );
        names.insert(file);
    }
    ensure!(
        !names.is_empty(),
        "apt-get would install nothing of {packages:?}"
    );
    Ok(names)
}

/// The images pushed, and the layer blobs of the first (for `tar -xzf`).
pub(super) struct Images {
    /// `ADDR/bench/img:1`: the three layers of [`LAYERS`].
    pub(super) first: String,
    /// `ADDR/bench/img2:1`: its first two layers and [`SECOND_TOP`].
    pub(super) second: String,
    /// `ADDR/bench/busybox:1`.
    pub(super) busybox: String,
    /// The first image's gzip layers, lowest first.
    pub(super) blobs: Vec<PathBuf>,
}

/// One gzip layer made of a folder: its blob in the layout, digest, size, diff_id.
pub(super) struct LayerBlob {
    pub(super) path: PathBuf,
    pub(super) digest: String,
    pub(super) size: u64,
    pub(super) diff_id: String,
}

/// Tars `rel` of `root` (GNU `tar`, `gzip -n`; `umoci insert` 0.4.7 was seen writing a
/// truncated layer) into the layout's blobs.
pub(super) fn layer_blob(blobs: &Path, tmp: &Path, root: &Path, rel: &str) -> Result<LayerBlob> {
    let raw = tmp.join("layer.tar");
    quiet(
        Command::new("tar")
            .arg("-C")
            .arg(root)
            .arg("-cf")
            .arg(&raw)
            .arg(rel),
    )?;
    let diff_id = format!("sha256:{}", sha256(&raw)?);
    let gz = tmp.join("layer.tar.gz");
    let status = Command::new("gzip")
        .arg("-nc")
        .arg(&raw)
        .stdout(fs::File::create(&gz)?)
        .status()
        .context("running gzip")?;
    ensure!(status.success(), "gzip failed ({status})");
    fs::remove_file(&raw)?;
    let (digest, size) = add_blob(blobs, &gz)?;
    let path = blobs.join(digest.trim_start_matches("sha256:"));
    Ok(LayerBlob {
        path,
        digest,
        size,
        diff_id,
    })
}

/// Builds the images as an OCI layout, each layer tarred once, and pushes them with
/// `skopeo`.
pub(super) fn build_and_push(
    tools: &Tools,
    addr: &str,
    tmp: &Path,
    trees: &[PathBuf],
) -> Result<Images> {
    let layout = tmp.join("layout");
    let blobs = layout.join("blobs/sha256");
    fs::create_dir_all(&blobs)?;
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    // busybox-static as /bin/sh and /bin/true: all `-- true` needs.
    let tree = tmp.join("busybox-tree");
    fs::create_dir_all(tree.join("bin"))?;
    fs::copy(&tools.busybox, tree.join("bin/busybox"))?;
    for applet in ["sh", "true"] {
        std::os::unix::fs::symlink("busybox", tree.join("bin").join(applet))?;
    }
    let mut made: HashMap<usize, LayerBlob> = HashMap::new();
    for (i, t) in trees.iter().enumerate() {
        made.insert(i, layer_blob(&blobs, tmp, t, ".")?);
    }
    made.insert(trees.len(), layer_blob(&blobs, tmp, &tree, "bin")?);
    let images: [(&str, Vec<usize>); 3] = [
        ("img", vec![0, 1, 2]),
        ("img2", vec![0, 1, 3]),
        ("busybox", vec![trees.len()]),
    ];
    let mut manifests = Vec::new();
    for (tag, layers) in &images {
        let layers: Vec<&LayerBlob> = layers.iter().map(|i| &made[i]).collect();
        manifests.push(add_image(&blobs, tmp, tag, &layers)?);
    }
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": manifests}))?,
    )?;
    let mut refs = Vec::new();
    for (tag, _) in &images {
        let reference = format!("{addr}/bench/{tag}:1");
        quiet(
            Command::new(&tools.skopeo)
                .args(["copy", "-q", "--dest-tls-verify=false"])
                .arg(format!("oci:{}:{tag}", layout.display()))
                .arg(format!("docker://{reference}")),
        )?;
        refs.push(reference);
    }
    let compressed: u64 = (0..3).map(|i| made[&i].size).sum();
    println!(
        "image: {} (3 layers of Debian packages: {:.0} MiB unpacked, {:.0} MiB compressed); second image on its base: {} (+{:.1} MiB compressed); {}",
        refs[0],
        disk(&trees[..3]) as f64 / 1_048_576.0,
        compressed as f64 / 1_048_576.0,
        refs[1],
        made[&3].size as f64 / 1_048_576.0,
        refs[2],
    );
    Ok(Images {
        first: refs[0].clone(),
        second: refs[1].clone(),
        busybox: refs[2].clone(),
        blobs: (0..3).map(|i| made[&i].path.clone()).collect(),
    })
}

/// Writes an image's config and manifest into the layout; returns its index entry.
pub(super) fn add_image(
    blobs: &Path,
    tmp: &Path,
    tag: &str,
    layers: &[&LayerBlob],
) -> Result<serde_json::Value> {
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| &l.diff_id).collect::<Vec<_>>()},
    }))?;
    let (config_digest, config_size) = add_bytes(blobs, tmp, &config)?;
    let descs: Vec<_> = layers
        .iter()
        .map(|l| serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": l.digest, "size": l.size}))
        .collect();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": descs,
    }))?;
    let (digest, size) = add_bytes(blobs, tmp, &manifest)?;
    Ok(serde_json::json!({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": digest, "size": size,
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }))
}

/// The SHA-256 of a file, in hex, by `sha256sum`.
pub(super) fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    ensure!(out.status.success(), "sha256sum {} failed", path.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or_default();
    ensure!(hex.len() == 64, "sha256sum said `{}`", text.trim());
    Ok(hex.to_owned())
}

/// Moves a file into the layout's blobs; returns its digest and size.
pub(super) fn add_blob(blobs: &Path, file: &Path) -> Result<(String, u64)> {
    let hex = sha256(file)?;
    let size = fs::metadata(file)?.len();
    fs::rename(file, blobs.join(&hex))?;
    Ok((format!("sha256:{hex}"), size))
}

/// Writes bytes as a blob of the layout; returns its digest and size.
pub(super) fn add_bytes(blobs: &Path, tmp: &Path, bytes: &[u8]) -> Result<(String, u64)> {
    let file = tmp.join("blob.json");
    fs::write(&file, bytes)?;
    add_blob(blobs, &file)
}

/// The programs the benchmark needs, found on `PATH`.
pub(super) struct Tools {
    pub(super) registry: PathBuf,
    pub(super) skopeo: PathBuf,
    pub(super) umoci: PathBuf,
    pub(super) busybox: PathBuf,
}

impl Tools {
    pub(super) fn find() -> Result<Tools> {
        let find = |name: &str| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .with_context(|| {
                    format!("`{name}` is not installed; apt-get install -y docker-registry skopeo umoci busybox-static")
                })
        };
        Ok(Tools {
            registry: find("docker-registry")?,
            skopeo: find("skopeo")?,
            umoci: find("umoci")?,
            busybox: find("busybox")?,
        })
    }
}

/// Runs `cmd` with its output kept for the error; fails unless it exits 0.
pub(super) fn quiet(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// What `paths` take on disk as `du` counts it: every inode's blocks, once.
pub(super) fn disk(paths: &[PathBuf]) -> u64 {
    pub(super) fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
        let Ok(m) = fs::symlink_metadata(p) else {
            return 0;
        };
        let mut total = if seen.insert((m.dev(), m.ino())) {
            m.blocks() * 512
        } else {
            0
        };
        if m.is_dir()
            && let Ok(rd) = fs::read_dir(p)
        {
            for e in rd.flatten() {
                total += walk(&e.path(), seen);
            }
        }
        total
    }
    let mut seen = HashSet::new();
    paths.iter().map(|p| walk(p, &mut seen)).sum()
}
