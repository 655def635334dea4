//! The cache over several pulls: prune removes unused images and only their own blobs; a
//! tag that moved names the new image, and each image counts what its pull downloaded.

use div_image::{Credentials, ImageRef, ImageStore, NoProgress, PruneOptions, PullPolicy};

use super::{amd64, busybox_layer, cached_blobs, store};
use crate::support::{self, Registry, build, file, push};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_removes_unused_images_and_only_their_own_blobs() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let base = vec![file("shared", &"s".repeat(10_000))];
    let one = build(&[base.clone(), vec![file("one", "1")]], "amd64", &[], "");
    let two = build(&[base, vec![file("two", "2")]], "amd64", &[], "");
    push(&reg.addr, "p/app", "one", &one, &Credentials::none()).await;
    push(&reg.addr, "p/app", "two", &two, &Credentials::none()).await;
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    for tag in ["one", "two"] {
        let r: ImageRef = format!("{}/p/app:{tag}", reg.addr).parse().unwrap();
        store
            .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
            .await
            .unwrap();
    }
    // The shared base layer is stored once.
    assert_eq!(cached_blobs(&store).len(), 2 * 3 + 1);
    let before = store.disk_usage().unwrap();
    assert!(before.images > 0 && before.blobs > 0, "{before:?}");

    let report = store
        .prune(&PruneOptions {
            keep: vec![two.manifest_digest.clone()],
            unused_since: None,
        })
        .await
        .unwrap();
    assert_eq!(report.images, std::slice::from_ref(&one.manifest_digest));
    assert_eq!(report.blobs, 3, "one's manifest, config and top layer");
    let left: Vec<_> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|i| i.digest)
        .collect();
    assert_eq!(left, std::slice::from_ref(&two.manifest_digest));
    assert!(cached_blobs(&store).contains(&two.layers[0].hex().to_owned()));
    assert!(store.disk_usage().unwrap().total() < before.total());

    // An image used after the cut-off stays.
    let report = store
        .prune(&PruneOptions {
            keep: vec![],
            unused_since: Some(std::time::UNIX_EPOCH),
        })
        .await
        .unwrap();
    assert!(report.images.is_empty());
}

/// A tag pushed again names the new image once a pull resolves it: `Missing` keeps what the
/// cache has until `Always` asks; the old image keeps no tag; each image counts what its pull
/// downloaded (the shared layer once), and when its tag resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_that_moved_names_the_new_image_once_resolved_and_each_counts_its_download() {
    let (Some(reg), Some(layer)) = (Registry::start(None), busybox_layer()) else {
        return;
    };
    let marked = |which: &str| {
        build(
            &[layer.clone(), vec![file("etc/which", which)]],
            "amd64",
            &["PATH=/bin"],
            "/",
        )
    };
    let (a, b) = (marked("A"), marked("B"));
    push(&reg.addr, "app", "t", &a, &Credentials::none()).await;
    let tmp = tempfile::tempdir().unwrap();
    let missing = store(tmp.path()).with_pull_policy(PullPolicy::Missing);
    let r: ImageRef = format!("{}/app:t", reg.addr).parse().unwrap();
    let ensure = |s: ImageStore| {
        let r = r.clone();
        async move {
            s.ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
                .await
                .expect("ensure")
        }
    };
    let got = ensure(missing.clone()).await;
    assert_eq!(
        (got.digest.clone(), got.source),
        (a.manifest_digest.clone(), div_image::ImageSource::Pulled)
    );
    push(&reg.addr, "app", "t", &b, &Credentials::none()).await;
    let got = ensure(missing.clone()).await;
    assert_eq!(got.digest, a.manifest_digest, "missing: the cache's");
    assert!(
        matches!(
            got.source,
            div_image::ImageSource::Cached {
                resolved_at: Some(_)
            }
        ),
        "{:?}",
        got.source
    );
    let always = missing.with_pull_policy(PullPolicy::Always);
    let got = ensure(always.clone()).await;
    assert_eq!(
        (got.digest.clone(), got.source),
        (b.manifest_digest.clone(), div_image::ImageSource::Pulled)
    );
    let got = ensure(always).await;
    assert_eq!(got.source, div_image::ImageSource::Checked);
    let got = ensure(missing.clone()).await;
    assert_eq!(
        got.digest, b.manifest_digest,
        "the tag moved in the cache too"
    );
    let got = ensure(missing.with_pull_policy(PullPolicy::Never)).await;
    assert_eq!(got.digest, b.manifest_digest);

    let list = missing.list().unwrap();
    let info = |d: &div_image::Digest| list.iter().find(|i| &i.digest == d).expect("listed");
    let (ia, ib) = (info(&a.manifest_digest), info(&b.manifest_digest));
    assert!(ia.references.is_empty(), "{ia:?}");
    assert!(ia.resolved.is_empty(), "{ia:?}");
    assert_eq!(ib.references, [r.to_string()]);
    assert_eq!(ib.resolved.len(), 1);
    let sum = |i: &support::Built, skip: &[div_image::Digest]| {
        (i.manifest.len() + i.config.1.len()) as u64
            + i.blobs
                .iter()
                .filter(|(d, _)| !skip.contains(d))
                .map(|(_, bytes)| bytes.len() as u64)
                .sum::<u64>()
    };
    assert_eq!(ia.downloaded_bytes, Some(sum(&a, &[])));
    assert_eq!(ib.downloaded_bytes, Some(sum(&b, &a.layers)));
    assert!(ib.downloaded_bytes < Some(ib.compressed_bytes));
}
