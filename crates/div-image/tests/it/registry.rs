//! Pulls from Debian's `docker-registry` on loopback, of images these tests build and push.
//!
//! Split by subject: `pull.rs` (pulls that succeed), `access.rs` (logins, HTTPS, refusals),
//! `verify.rs` (tampered and cut blobs), `cache.rs` (prune, moved tags, downloads counted) and
//! `umoci.rs` (the tree against umoci's). Here: what they share.

mod access;
mod cache;
mod pull;
mod umoci;
mod verify;

use std::path::Path;

use div_image::{ImageStore, Platform, PullPolicy, StoreOptions};

use crate::support::{self, E, fast_options};

fn store(dir: &Path) -> ImageStore {
    ImageStore::open_with(
        dir,
        StoreOptions {
            registry: fast_options(),
            pull_policy: PullPolicy::Always,
            ..StoreOptions::default()
        },
    )
    .expect("open store")
}

fn amd64() -> Platform {
    "linux/amd64".parse().expect("platform")
}

fn busybox_layer() -> Option<Vec<E>> {
    let bin = support::program("busybox")?;
    let data = std::fs::read(bin).expect("read busybox");
    Some(vec![
        E::Dir("bin", 0o755),
        E::File("bin/busybox", 0o755, data),
        E::Symlink("bin/sh", "busybox"),
        E::Symlink("bin/echo", "busybox"),
        E::Dir("work", 0o755),
    ])
}

/// Every blob in the store's cache.
fn cached_blobs(store: &ImageStore) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(store.root().join("blobs/sha256"))
        .expect("blobs dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
