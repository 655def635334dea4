//! Nothing unverified is cached: a tampered blob is refused, a pull cut mid-layer resumes
//! and ends verified.

use std::sync::Mutex;

use div_image::{Credentials, EnsureError, ImageRef, NoProgress, Progress};
use div_test_support::proxy::{Fault, Proxy, Upstream};

use super::{amd64, cached_blobs, store};
use crate::support::{self, E, Registry, build, file, push};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_blob_is_refused_and_never_cached() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let image = build(
        &[vec![file("a", "good"), file("b", &"x".repeat(5000))]],
        "amd64",
        &[],
        "",
    );
    push(&reg.addr, "bad/app", "1", &image, &Credentials::none()).await;
    // An attacker on the registry's disk flips bytes in the layer, keeping its size.
    let data = reg.blob_data(&image.layers[0]);
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();

    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let r: ImageRef = format!("{}/bad/app:1", reg.addr).parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    let EnsureError::DigestMismatch { expected, .. } = &err else {
        panic!("expected a digest mismatch, got {err:?}");
    };
    assert_eq!(expected, &image.layers[0]);
    assert!(
        err.to_string().ends_with("refused, nothing cached"),
        "{err}"
    );
    assert!(!cached_blobs(&store).contains(&image.layers[0].hex().to_owned()));
    assert_eq!(
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count(),
        0
    );
    assert!(store.list().unwrap().is_empty());

    // A blob longer than its descriptor says is cut off at the first byte too many.
    let image = build(&[vec![file("c", "longer")]], "amd64", &[], "");
    push(&reg.addr, "bad/app", "2", &image, &Credentials::none()).await;
    let data = reg.blob_data(&image.layers[0]);
    let mut bytes = std::fs::read(&data).unwrap();
    bytes.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&data, &bytes).unwrap();
    let r: ImageRef = format!("{}/bad/app:2", reg.addr).parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(
        matches!(err, EnsureError::SizeMismatch { what: "larger", .. }),
        "{err:?}"
    );
    assert!(!cached_blobs(&store).contains(&image.layers[0].hex().to_owned()));
    assert_eq!(
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_cut_mid_layer_resumes_and_ends_verified() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let big = support::noise(3 << 20, 7);
    let image = build(
        &[vec![E::File("big", 0o644, big.clone())]],
        "amd64",
        &[],
        "",
    );
    push(&reg.addr, "big/app", "1", &image, &Credentials::none()).await;
    let layer_size = image.blobs[0].1.len() as u64;

    let proxy = Proxy::start(Upstream::Tcp(reg.addr.parse().unwrap())).await;
    // Three connections in a row die after 1 MiB of response each.
    proxy.push([
        Fault::TruncateResponse(1 << 20),
        Fault::ResetResponse(1 << 20),
        Fault::TruncateResponse(1 << 20),
    ]);
    let r: ImageRef = format!("{}/big/app:1", proxy.addr()).parse().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let retries = Mutex::new(Vec::new());
    let sink = |e: &Progress| {
        if let Progress::Retrying { offset, .. } = e {
            retries.lock().unwrap().push(*offset);
        }
    };
    let got = store
        .ensure(&r, &amd64(), &Credentials::none(), &sink)
        .await
        .expect("pull through faults");
    assert_eq!(std::fs::read(got.rootfs.join("big")).unwrap(), big);
    assert_eq!(proxy.faulted(), 3);
    let retries = retries.lock().unwrap().clone();
    // (hyper itself may retry a request on a pooled connection that died before answering,
    // so a fault can be spent without a retry of ours.)
    assert!(!retries.is_empty(), "no retry seen");
    // Each attempt resumed where the last one stopped, never from zero...
    assert!(
        retries.windows(2).all(|w| w[0] <= w[1]) && retries[0] > 0,
        "{retries:?}"
    );
    // ...so the layer crossed the wire about once (plus what the reset connection's socket
    // dropped, at most its 1 MiB), where starting over would take 3 MiB more.
    assert!(
        proxy.bytes_down() < layer_size + (3 << 19),
        "{} down for a {layer_size}-byte layer",
        proxy.bytes_down()
    );
}
