//! End to end: `div run --image` and `div image` on the local control plane, with images
//! built here and pushed to Debian's `docker-registry` on loopback (div-test-support's image
//! helpers).
//!
//! What the CLI says of images: the pull's lines before the run's header, where a moved
//! tag's image came from, a refusal and its exit code, `--pull`'s words, the cache listed and
//! pruned (`pull.rs`). What a run in an image gets, and what the server refuses, are
//! div-server's tests (`crates/div-server/tests/it/image/`); here, the images the tests build
//! and the registry they push to.

mod pull;

use std::path::PathBuf;

use div_image::Credentials;
use div_test_support::image as image_support;
use div_test_support::image::{Built, E, Registry, busybox_layer, push};

use crate::support::Local;

/// An image whose config carries `config` (`Env`, `WorkingDir`, `User`…), gzip layers.
fn build(layers: &[Vec<E>], config: serde_json::Value) -> Built {
    image_support::build_image(layers, image_support::this_arch(), config, true)
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
