//! Cold pull and unpack: div-image against `skopeo copy` + `umoci raw unpack --rootless`,
//! of the same image from the same loopback registry.
//!
//! `cargo run --release -p div-image --example pull_bench [DIR...]` builds an image with one
//! gzip layer per directory (default: this machine's Python standard library), pushes it to
//! Debian's `docker-registry` on loopback, then times each tool into fresh
//! directories, five rounds interleaved, and prints the medians and the median of the
//! per-round ratios (docs/images.md records it).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    unreachable_pub,
    dead_code
)]

#[path = "../tests/it/support.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use div_image::{Credentials, Digest, ImageRef, ImageStore, Platform, Progress, StoreOptions};

fn layer_of(dir: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(dir.trim_start_matches('/'), dir).unwrap();
    support::gzip(&b.into_inner().unwrap())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let dirs: Vec<String> = std::env::args().skip(1).collect();
    let dirs = if dirs.is_empty() {
        vec![
            "/usr/lib/python3.11".to_owned(),
            "/usr/lib/python3".to_owned(),
        ]
    } else {
        dirs
    };
    let (Some(reg), Some(skopeo), Some(umoci)) = (
        support::Registry::start(None),
        support::program("skopeo"),
        support::program("umoci"),
    ) else {
        std::process::exit(2);
    };
    // An image of real directories: layers as the tests build them, plus a config and manifest.
    let mut image = support::build(&vec![vec![]; dirs.len()], "amd64", &[], "");
    let mut diff_ids = Vec::new();
    let mut descs = Vec::new();
    image.blobs.clear();
    for d in &dirs {
        let gz = layer_of(d);
        let raw = {
            use std::io::Read as _;
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut out)
                .unwrap();
            out
        };
        diff_ids.push(Digest::sha256_of(&raw).to_string());
        let dg = Digest::sha256_of(&gz);
        descs.push(serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": dg.to_string(), "size": gz.len()}));
        image.blobs.push((dg, gz));
    }
    let config = serde_json::to_vec(&serde_json::json!({"architecture": "amd64", "os": "linux", "config": {}, "rootfs": {"type": "layers", "diff_ids": diff_ids}})).unwrap();
    image.config = (Digest::sha256_of(&config), config);
    image.manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": support::OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": image.config.0.to_string(), "size": image.config.1.len()},
        "layers": descs,
    })).unwrap();
    image.manifest_digest = Digest::sha256_of(&image.manifest);
    let bytes: usize = image.blobs.iter().map(|b| b.1.len()).sum();
    support::push(&reg.addr, "bench/img", "1", &image, &Credentials::none()).await;
    println!(
        "image: {} layers, {:.1} MiB compressed, from {dirs:?}",
        dirs.len(),
        bytes as f64 / 1048576.0
    );

    let r: ImageRef = format!("{}/bench/img:1", reg.addr).parse().unwrap();
    let platform: Platform = "linux/amd64".parse().unwrap();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let store = ImageStore::open_with(dir.path(), StoreOptions::default()).unwrap();
        let unpack_start = std::sync::Mutex::new(None);
        let sink = |e: &Progress| {
            if matches!(e, Progress::Unpacking { index: 0, .. }) {
                *unpack_start.lock().unwrap() = Some(t.elapsed());
            }
        };
        store
            .ensure(&r, &platform, &Credentials::none(), &sink)
            .await
            .unwrap();
        ours.push(t.elapsed());
        let pulled = unpack_start.lock().unwrap().unwrap();
        println!(
            "  div-image: pull {pulled:?}, unpack {:?}",
            t.elapsed() - pulled
        );

        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let st = Command::new(&skopeo)
            .args(["copy", "-q", "--src-tls-verify=false"])
            .arg(format!("docker://{r}"))
            .arg(format!("oci:{}:1", dir.path().join("oci").display()))
            .status()
            .unwrap();
        assert!(st.success(), "skopeo copy failed");
        let copied = t.elapsed();
        let st = Command::new(&umoci)
            .args(["raw", "unpack", "--rootless", "--image"])
            .arg(format!("{}:1", dir.path().join("oci").display()))
            .arg(dir.path().join("rootfs"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "umoci raw unpack failed");
        theirs.push(t.elapsed());
        println!(
            "  skopeo copy {copied:?}, umoci raw unpack {:?}",
            t.elapsed() - copied
        );
        println!(
            "round {round}: div-image {:?}, skopeo+umoci {:?}",
            ours[round], theirs[round]
        );
    }
    let ratios: Vec<f64> = ours
        .iter()
        .zip(&theirs)
        .map(|(o, t)| o.as_secs_f64() / t.as_secs_f64())
        .collect();
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let (o, t) = (median(ours), median(theirs));
    println!(
        "median: div-image {o:?}, skopeo copy + umoci raw unpack {t:?}; per-round ratios {ratios:.2?}, median {:.2}",
        sorted[sorted.len() / 2]
    );
}
