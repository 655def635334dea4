//! `cargo xtask bench image [--rounds N] [--div PATH] [DIR…]`: the image benchmarks of
//! issue 16 (docs/performance.md, Images), against Debian's `docker-registry` on loopback.
//!
//! - **Cold pull and unpack**: an image with one gzip layer per `DIR` (default: this
//!   machine's `/usr/lib/python3.11` and `/usr/lib/python3`), built here as an OCI layout and
//!   pushed with `skopeo copy`; each round times div-image's `ImageStore::ensure` into an empty cache
//!   against `skopeo copy docker://… oci:…` followed by `umoci raw unpack --rootless` into an
//!   empty directory. Goal: ≤ 1.0×.
//! - **A run in a cached image**: `div run --gpu cpu --image X -- true` (X a busybox-static
//!   image, pulled once before the rounds) against `div run --gpu cpu -- true` on this
//!   machine's own system, on one warm local control plane. Goal: ≤ 1.2×.
//!
//! Rounds are interleaved (one of each, in turn); each part prints every round, the medians,
//! the median of the per-round ratios and the machine's load. It needs `docker-registry`,
//! `skopeo`, `umoci` and a static `busybox` (`apt-get install -y docker-registry skopeo umoci
//! busybox-static`), and is never part of `cargo test`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use div_image::{Credentials, ImageRef, ImageStore, NoProgress, Platform, StoreOptions};

use crate::timing::{percentile, verdict};

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
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{arg}` needs a value"));
        match arg.as_str() {
            "--rounds" => rounds = value()?.parse().context("--rounds is a count")?,
            "--div" => div = Some(PathBuf::from(value()?)),
            flag if flag.starts_with("--") => {
                bail!("unknown flag `{flag}`; expected --rounds, --div or directories")
            }
            dir => dirs.push(PathBuf::from(dir)),
        }
    }
    ensure!(rounds > 0, "--rounds must be at least 1");
    if dirs.is_empty() {
        dirs = ["/usr/lib/python3.11", "/usr/lib/python3"]
            .iter()
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .collect();
        ensure!(
            !dirs.is_empty(),
            "no /usr/lib/python3.11 or /usr/lib/python3 here to build the image from; name directories: `cargo xtask bench image DIR…`"
        );
    }
    for dir in &dirs {
        ensure!(
            dir.is_absolute() && dir.is_dir(),
            "`{}` is not an absolute path to a directory",
            dir.display()
        );
    }
    let tools = Tools::find()?;
    let div = crate::bench_local::div_binary(div.as_deref())?;
    eprintln!("div: {}", div.display());
    let tmp = tempfile::tempdir().context("creating a temporary folder")?;
    let registry = Registry::start(&tools.registry, tmp.path())?;
    let (image, busybox) = build_and_push(&tools, &registry.addr, tmp.path(), &dirs)?;
    cold_pull(&tools, &image, tmp.path(), rounds)?;
    cached_run(&div, &busybox, tmp.path(), rounds)?;
    Ok(())
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

/// Builds both images as an OCI layout (layers made with GNU `tar` and `gzip -n`, digests
/// with `sha256sum`: `umoci insert` 0.4.7 was seen writing a truncated layer of
/// `/usr/lib/python3.11`) and pushes them with `skopeo`; returns their references
/// (`ADDR/bench/img:1`, `ADDR/bench/busybox:1`).
fn build_and_push(
    tools: &Tools,
    addr: &str,
    tmp: &Path,
    dirs: &[PathBuf],
) -> Result<(String, String)> {
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
    let python_layers: Vec<(PathBuf, String)> = dirs
        .iter()
        .map(|d| {
            let rel = d.strip_prefix("/").unwrap_or(d);
            (PathBuf::from("/"), rel.display().to_string())
        })
        .collect();
    let images = [
        ("img", python_layers),
        ("busybox", vec![(tree.clone(), "bin".to_owned())]),
    ];
    let mut manifests = Vec::new();
    let mut bytes = 0u64;
    for (tag, layers) in &images {
        let (mut descs, mut diff_ids) = (Vec::new(), Vec::new());
        for (i, (root, rel)) in layers.iter().enumerate() {
            let raw = tmp.join(format!("{tag}-{i}.tar"));
            quiet(
                Command::new("tar")
                    .arg("-C")
                    .arg(root)
                    .arg("-cf")
                    .arg(&raw)
                    .arg(rel),
            )?;
            diff_ids.push(format!("sha256:{}", sha256(&raw)?));
            let gz = tmp.join(format!("{tag}-{i}.tar.gz"));
            let out = fs::File::create(&gz)?;
            let status = Command::new("gzip")
                .arg("-nc")
                .arg(&raw)
                .stdout(out)
                .status()
                .context("running gzip")?;
            ensure!(status.success(), "gzip failed ({status})");
            let (digest, size) = add_blob(&blobs, &gz)?;
            bytes += size;
            descs.push(serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": size}));
        }
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64", "os": "linux", "config": {},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }))?;
        let (config_digest, config_size) = add_bytes(&blobs, tmp, &config)?;
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
            "layers": descs,
        }))?;
        let (digest, size) = add_bytes(&blobs, tmp, &manifest)?;
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest, "size": size,
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }));
    }
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": manifests}))?,
    )?;
    let mut refs = Vec::new();
    for (tag, name) in [("img", "bench/img:1"), ("busybox", "bench/busybox:1")] {
        let reference = format!("{addr}/{name}");
        quiet(
            Command::new(&tools.skopeo)
                .args(["copy", "-q", "--dest-tls-verify=false"])
                .arg(format!("oci:{}:{tag}", layout.display()))
                .arg(format!("docker://{reference}")),
        )?;
        refs.push(reference);
    }
    println!(
        "images: {} ({} layer{} from {dirs:?}) and {}; {:.1} MiB compressed in all",
        refs[0],
        dirs.len(),
        if dirs.len() == 1 { "" } else { "s" },
        refs[1],
        bytes as f64 / 1_048_576.0
    );
    let busybox = refs.pop().unwrap_or_default();
    let image = refs.pop().unwrap_or_default();
    Ok((image, busybox))
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

/// div-image's cold `ensure` against `skopeo copy` + `umoci raw unpack`, interleaved.
fn cold_pull(tools: &Tools, image: &str, tmp: &Path, rounds: usize) -> Result<()> {
    let reference: ImageRef = image
        .parse()
        .map_err(|e| anyhow!("`{image}` is not a reference: {e}"))?;
    let platform = Platform::host();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let cache = tempfile::tempdir_in(tmp)?;
        let t = Instant::now();
        let store = ImageStore::open_with(cache.path(), StoreOptions::default())
            .context("opening the image cache")?;
        rt.block_on(store.ensure(&reference, &platform, &Credentials::none(), &NoProgress))
            .with_context(|| format!("div-image could not pull {image}"))?;
        let o = t.elapsed();
        drop(cache);

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
        let s = t.elapsed();
        println!(
            "round {round}: div-image {:.3} s; skopeo copy {:.3} s + umoci raw unpack {:.3} s = {:.3} s; ratio {:.2}",
            o.as_secs_f64(),
            copied.as_secs_f64(),
            (s - copied).as_secs_f64(),
            s.as_secs_f64(),
            o.as_secs_f64() / s.as_secs_f64()
        );
        ours.push(o);
        theirs.push(s);
    }
    summary(
        "cold pull + unpack, div-image against skopeo copy + umoci raw unpack",
        &mut ours,
        &mut theirs,
        1.0,
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
            crate::bench_local::stop_runs(self.0);
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
