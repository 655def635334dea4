//! `cargo xtask bench image [--rounds N] [--div PATH]`: the image benchmarks of issues 16
//! and 30 (docs/performance.md, Images), against Debian's `docker-registry` on loopback.
//!
//! - **The image** is built here from Debian's packages, as ML images are built: three
//!   layers, each the packages `apt-get` would install for it that the layers below lack
//!   ([`LAYERS`]: a base system, Python with numpy and pip, then pandas, sympy and gcc),
//!   fetched with `apt-get --download-only` into `target/bench-image/debs/` (kept between
//!   runs), unpacked with `dpkg -x`, each a gzip layer made with GNU `tar` and `gzip -n`. It
//!   unpacks to about 450 MB in about 11,000 files (Debian 12). A second image shares its
//!   base and Python layers and adds a small layer of its own ([`SECOND_TOP`]).
//! - **Cold pull and unpack**: each round times div-image's `ImageStore::ensure` into an
//!   empty cache against `skopeo copy docker://… oci:…` followed by `umoci raw unpack
//!   --rootless` into an empty directory, and against `tar -xzf` of the same layer blobs, one
//!   after the other, into an empty directory (no download, no checks: the floor of a
//!   sequential unpack). Goal: ≤ 0.6× skopeo + umoci.
//! - **A second image on the same base**: after each cold pull, the second image is pulled
//!   into the same cache; the bytes it added (the cache's blocks, each inode once, as `du`
//!   counts them) and its time are printed beside what its tree alone holds.
//! - **A run in a cached image**: `div run --gpu cpu --image X -- true` (X a busybox-static
//!   image, pulled once before the rounds) against `div run --gpu cpu -- true` on this
//!   machine's own system, on one warm local control plane. Goal: ≤ 1.2×.
//!
//! Rounds are interleaved (one of each, in turn, the order reversed every other round, each
//! after a `sync`); each part prints every round, the medians,
//! the median of the per-round ratios and the machine's load. It needs `docker-registry`,
//! `skopeo`, `umoci`, a static `busybox` and `apt-get` with Debian's package lists
//! (`apt-get update; apt-get install -y docker-registry skopeo umoci busybox-static`), and is
//! never part of `cargo test`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use div_image::{Credentials, ImageRef, ImageStore, NoProgress, Platform, StoreOptions};

use crate::timing::{percentile, verdict};

/// The benchmark image's layers, lowest first: each holds what `apt-get install` of its
/// packages and those of the layers below brings that the layers below do not have.
const LAYERS: [(&str, &[&str]); 3] = [
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
const SECOND_TOP: (&str, &[&str]) = ("app", &["python3-requests", "python3-yaml"]);

pub(crate) fn run(rest: &[String]) -> Result<()> {
    // div-image is timed in this process: a debug build of it would be measured, not the
    // release build the server runs. `cargo xtask` builds debug, so it runs itself again in
    // release.
    if cfg!(debug_assertions) {
        return crate::run(
            crate::cargo()
                .args([
                    "run",
                    "--release",
                    "--quiet",
                    "-p",
                    "xtask",
                    "--",
                    "bench",
                    "image",
                ])
                .args(rest),
        );
    }
    let mut rounds: usize = 5;
    let mut div: Option<PathBuf> = None;
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{arg}` needs a value"));
        match arg.as_str() {
            "--rounds" => rounds = value()?.parse().context("--rounds is a count")?,
            "--div" => div = Some(PathBuf::from(value()?)),
            other => bail!("unknown argument `{other}`; expected --rounds N or --div PATH"),
        }
    }
    ensure!(rounds > 0, "--rounds must be at least 1");
    let tools = Tools::find()?;
    let div = crate::bench_run::div_binary(div.as_deref())?;
    eprintln!("div: {}", div.display());
    let tmp = tempfile::tempdir().context("creating a temporary folder")?;
    let trees = debian_layers(&bench_dir().join("debs"), tmp.path())?;
    let registry = Registry::start(&tools.registry, tmp.path())?;
    let images = build_and_push(&tools, &registry.addr, tmp.path(), &trees)?;
    cold_pull(&tools, &images, tmp.path(), rounds)?;
    cached_run(&div, &images.busybox, tmp.path(), rounds)?;
    Ok(())
}

/// `target/bench-image` (or under `CARGO_TARGET_DIR`): what the benchmark keeps between runs.
fn bench_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
            PathBuf::from,
        )
        .join("bench-image")
}

/// The programs the benchmark needs, found on `PATH`.
struct Tools {
    registry: PathBuf,
    skopeo: PathBuf,
    umoci: PathBuf,
    busybox: PathBuf,
}

impl Tools {
    fn find() -> Result<Tools> {
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
fn quiet(cmd: &mut Command) -> Result<()> {
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

/// Debian's `docker-registry` on a loopback port, killed when dropped.
struct Registry {
    child: Child,
    addr: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn start(bin: &Path, tmp: &Path) -> Result<Registry> {
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
fn debian_layers(debs: &Path, tmp: &Path) -> Result<Vec<PathBuf>> {
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
fn download(dir: &Path, packages: &[&str]) -> Result<BTreeSet<String>> {
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

/// What `paths` take on disk as `du` counts it: every inode's blocks, once.
fn disk(paths: &[PathBuf]) -> u64 {
    fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
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

/// The images pushed, and the layer blobs of the first (for `tar -xzf`).
struct Images {
    /// `ADDR/bench/img:1`: the three layers of [`LAYERS`].
    first: String,
    /// `ADDR/bench/img2:1`: its first two layers and [`SECOND_TOP`].
    second: String,
    /// `ADDR/bench/busybox:1`.
    busybox: String,
    /// The first image's gzip layers, lowest first.
    blobs: Vec<PathBuf>,
}

/// One gzip layer made of a folder: its blob in the layout, digest, size, diff_id.
struct LayerBlob {
    path: PathBuf,
    digest: String,
    size: u64,
    diff_id: String,
}

/// Tars `rel` of `root` (GNU `tar`, `gzip -n`; `umoci insert` 0.4.7 was seen writing a
/// truncated layer) into the layout's blobs.
fn layer_blob(blobs: &Path, tmp: &Path, root: &Path, rel: &str) -> Result<LayerBlob> {
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
fn build_and_push(tools: &Tools, addr: &str, tmp: &Path, trees: &[PathBuf]) -> Result<Images> {
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
fn add_image(
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
fn sha256(path: &Path) -> Result<String> {
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
fn add_blob(blobs: &Path, file: &Path) -> Result<(String, u64)> {
    let hex = sha256(file)?;
    let size = fs::metadata(file)?.len();
    fs::rename(file, blobs.join(&hex))?;
    Ok((format!("sha256:{hex}"), size))
}

/// Writes bytes as a blob of the layout; returns its digest and size.
fn add_bytes(blobs: &Path, tmp: &Path, bytes: &[u8]) -> Result<(String, u64)> {
    let file = tmp.join("blob.json");
    fs::write(&file, bytes)?;
    add_blob(blobs, &file)
}

/// Medians of both, the median of the per-round ratios, and the goal line.
fn summary(what: &str, ours: &mut [Duration], theirs: &mut [Duration], goal: f64) {
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(theirs.iter())
        .map(|(o, t)| o.as_secs_f64() / t.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median_ratio = ratios[ratios.len() / 2];
    let (o, t) = (percentile(ours, 50), percentile(theirs, 50));
    println!(
        "{what}: medians {:.3} s against {:.3} s; median of the per-round ratios {median_ratio:.2}× (goal ≤ {goal:.1}×: {}); load average {}",
        o.as_secs_f64(),
        t.as_secs_f64(),
        verdict(median_ratio <= goal),
        fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// One cold pull by div-image into an empty cache under `tmp`, then the second image into
/// the same cache: the first's time, the second's time, the bytes the second added to the
/// cache (blocks, each inode once), and what the second's tree holds.
fn div_image_round(
    rt: &tokio::runtime::Runtime,
    images: &Images,
    tmp: &Path,
    keep: &mut Vec<tempfile::TempDir>,
) -> Result<(Duration, Duration, u64, u64)> {
    let platform = Platform::host();
    let reference = |image: &str| -> Result<ImageRef> {
        image
            .parse()
            .map_err(|e| anyhow!("`{image}` is not a reference: {e}"))
    };
    let (first, second) = (reference(&images.first)?, reference(&images.second)?);
    let cache = tempfile::tempdir_in(tmp)?;
    let t = Instant::now();
    let store = ImageStore::open_with(cache.path(), StoreOptions::default())
        .context("opening the image cache")?;
    rt.block_on(store.ensure(&first, &platform, &Credentials::none(), &NoProgress))
        .with_context(|| format!("div-image could not pull {first}"))?;
    let cold = t.elapsed();
    let before = disk(&[cache.path().to_path_buf()]);
    let t = Instant::now();
    let image = rt
        .block_on(store.ensure(&second, &platform, &Credentials::none(), &NoProgress))
        .with_context(|| format!("div-image could not pull {second}"))?;
    let on_base = t.elapsed();
    let added = disk(&[cache.path().to_path_buf()]).saturating_sub(before);
    let alone = disk(&[image.rootfs]);
    keep.push(cache);
    Ok((cold, on_base, added, alone))
}

/// `skopeo copy` then `umoci raw unpack --rootless` of `image` into an empty folder: the
/// copy's time and the whole.
fn skopeo_umoci(
    tools: &Tools,
    image: &str,
    tmp: &Path,
    keep: &mut Vec<tempfile::TempDir>,
) -> Result<(Duration, Duration)> {
    let dir = tempfile::tempdir_in(tmp)?;
    let oci = dir.path().join("oci");
    let t = Instant::now();
    quiet(
        Command::new(&tools.skopeo)
            .args(["copy", "-q", "--src-tls-verify=false"])
            .arg(format!("docker://{image}"))
            .arg(format!("oci:{}:1", oci.display())),
    )?;
    let copied = t.elapsed();
    quiet(
        Command::new(&tools.umoci)
            .args(["raw", "unpack", "--rootless", "--image"])
            .arg(format!("{}:1", oci.display()))
            .arg(dir.path().join("rootfs")),
    )?;
    let whole = t.elapsed();
    keep.push(dir);
    Ok((copied, whole))
}

/// `tar -xzf` of each blob, in order, into one empty folder.
fn tar_xzf(blobs: &[PathBuf], tmp: &Path, keep: &mut Vec<tempfile::TempDir>) -> Result<Duration> {
    let dir = tempfile::tempdir_in(tmp)?;
    let t = Instant::now();
    for blob in blobs {
        quiet(
            Command::new("tar")
                .arg("-xzf")
                .arg(blob)
                .arg("-C")
                .arg(dir.path()),
        )?;
    }
    let took = t.elapsed();
    keep.push(dir);
    Ok(took)
}

/// `sync`: the page cache written back, so that a timing does not pay for the writes of
/// the one before it (each writes the image's 450 MB).
fn settle() -> Result<()> {
    quiet(&mut Command::new("sync"))
}

fn mib(n: u64) -> f64 {
    n as f64 / 1_048_576.0
}

/// div-image's cold `ensure` against `skopeo copy` + `umoci raw unpack` and against `tar
/// -xzf` of the same layers, interleaved; and the second image on the same base.
fn cold_pull(tools: &Tools, images: &Images, tmp: &Path, rounds: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    let (mut ours, mut theirs, mut tars) = (Vec::new(), Vec::new(), Vec::new());
    let (mut second, mut added, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    let mut keep = Vec::new();
    for round in 1..=rounds {
        // Each starts with nothing left to write back from the one before; every other
        // round the order is reversed, so that neither side always follows the other.
        // The trees each part made are removed only at the end: removing gigabytes on a
        // filesystem mounted with `discard` was seen slowing the parts that followed 5×.
        let ours_first = round % 2 == 1;
        let theirs_part = |keep: &mut Vec<tempfile::TempDir>| -> Result<_> {
            settle()?;
            let (copied, s) = skopeo_umoci(tools, &images.first, tmp, keep)?;
            settle()?;
            Ok((copied, s, tar_xzf(&images.blobs, tmp, keep)?))
        };
        let before = if ours_first {
            None
        } else {
            Some(theirs_part(&mut keep)?)
        };
        settle()?;
        let (o, on_base, add, own) = div_image_round(&rt, images, tmp, &mut keep)?;
        let (copied, s, x) = match before {
            Some(done) => done,
            None => theirs_part(&mut keep)?,
        };
        println!(
            "round {round}: div-image {:.3} s; skopeo copy {:.3} s + umoci raw unpack {:.3} s = {:.3} s; ratio {:.2}; tar -xzf of the layers {:.3} s (div-image {:.2}× it); second image on the base {:.3} s, +{:.1} MiB on disk (its tree {:.0} MiB)",
            o.as_secs_f64(),
            copied.as_secs_f64(),
            (s - copied).as_secs_f64(),
            s.as_secs_f64(),
            o.as_secs_f64() / s.as_secs_f64(),
            x.as_secs_f64(),
            o.as_secs_f64() / x.as_secs_f64(),
            on_base.as_secs_f64(),
            mib(add),
            mib(own),
        );
        ours.push(o);
        theirs.push(s);
        tars.push(x);
        second.push(on_base);
        added.push(add);
        alone.push(own);
    }
    summary(
        "cold pull + unpack, div-image against skopeo copy + umoci raw unpack",
        &mut ours.clone(),
        &mut theirs,
        0.6,
    );
    let mut tar_ratios: Vec<f64> = ours
        .iter()
        .zip(&tars)
        .map(|(o, x)| o.as_secs_f64() / x.as_secs_f64())
        .collect();
    tar_ratios.sort_by(f64::total_cmp);
    println!(
        "cold pull + unpack, div-image against tar -xzf of the same layers in sequence (no download, no checks): medians {:.3} s against {:.3} s; median of the per-round ratios {:.2}×",
        percentile(&mut ours, 50).as_secs_f64(),
        percentile(&mut tars, 50).as_secs_f64(),
        tar_ratios[tar_ratios.len() / 2]
    );
    added.sort_unstable();
    alone.sort_unstable();
    println!(
        "a second image on the same base: +{:.1} MiB on disk (median), its tree {:.0} MiB; pulled in {:.3} s (median)",
        mib(added[added.len() / 2]),
        mib(alone[alone.len() / 2]),
        percentile(&mut second, 50).as_secs_f64()
    );
    Ok(())
}

/// `div run --image X -- true` with X cached against `div run -- true`, interleaved, on one
/// warm local control plane in a temp state directory (stopped at the end).
fn cached_run(div: &Path, busybox: &str, tmp: &Path, rounds: usize) -> Result<()> {
    let home = tmp.join("div-home");
    let project = tmp.join("project");
    fs::create_dir_all(&project)?;
    fs::write(project.join("README"), "x\n")?;
    let command = |args: &[&str]| -> Command {
        let mut c = Command::new(div);
        c.args(args)
            .current_dir(&project)
            .env("DIVERGENT_HOME", &home)
            .env("HOME", tmp)
            .env("NO_COLOR", "1")
            .env_remove("DIVERGENT_API_URL")
            .env_remove("DIVERGENT_TOKEN")
            .env_remove("DIVERGENT_EMULATE_GPUS")
            .env_remove("DIVERGENT_DEFAULT_IMAGE");
        c
    };
    let div_cmd = |args: &[&str]| -> Result<Duration> {
        let t = Instant::now();
        quiet(&mut command(args))?;
        Ok(t.elapsed())
    };
    /// Its runs, then the server, stopped however the benchmark ends.
    struct Stop<'a>(&'a dyn Fn(&[&str]) -> Command);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            crate::bench_run::stop_runs(self.0);
            let _ = (self.0)(&["server", "stop"]).output();
        }
    }
    div_cmd(&["server", "start"])?;
    let _stop = Stop(&command);
    let in_image = ["run", "--gpu", "cpu", "--image", busybox, "--", "true"];
    let on_host = ["run", "--gpu", "cpu", "--", "true"];
    // The pull, the first shipment and the first launch out of the way.
    div_cmd(&in_image)?;
    div_cmd(&on_host)?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let i = div_cmd(&in_image)?;
        let h = div_cmd(&on_host)?;
        println!(
            "round {round}: div run --image (cached) {:.3} s, div run on the host {:.3} s; ratio {:.2}",
            i.as_secs_f64(),
            h.as_secs_f64(),
            i.as_secs_f64() / h.as_secs_f64()
        );
        ours.push(i);
        theirs.push(h);
    }
    summary(
        "div run --image X -- true (X cached) against div run -- true",
        &mut ours,
        &mut theirs,
        1.2,
    );
    Ok(())
}
