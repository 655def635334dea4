//! The layer store: images on one base share its unpacked files by hard link, measured in
//! blocks; a later layer never changes a shared file; prune frees what only a removed image
//! used; pulls at once stay whole; a stored layer still counts against an image's bounds.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use div_image::{
    Credentials, EnsureError, ImageRef, ImageStore, Limit, NoProgress, Platform, PruneOptions,
    PullPolicy, StoreOptions, UnpackLimits,
};

use crate::support::{Built, E, Registry, build, fast_options, file, noise, push};

const MIB: u64 = 1 << 20;

fn store(dir: &Path, unpack: UnpackLimits) -> ImageStore {
    ImageStore::open_with(
        dir,
        StoreOptions {
            registry: fast_options(),
            pull_policy: PullPolicy::Always,
            unpack,
        },
    )
    .expect("open the store")
}

fn amd64() -> Platform {
    "linux/amd64".parse().expect("platform")
}

/// What the folders under `paths` take on disk, as `du` counts it: the blocks of every
/// inode met (directories, files, links), each inode once however many names it has.
fn disk(paths: &[PathBuf]) -> u64 {
    fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return 0;
        };
        let mut total = if seen.insert((m.dev(), m.ino())) {
            m.blocks() * 512
        } else {
            0
        };
        if m.is_dir() {
            for e in std::fs::read_dir(p).expect("a folder") {
                total += walk(&e.expect("an entry").path(), seen);
            }
        }
        total
    }
    let mut seen = HashSet::new();
    paths.iter().map(|p| walk(p, &mut seen)).sum()
}

/// The unpacked part of a cache: its images' trees and its layer store.
fn unpacked(cache: &Path) -> Vec<PathBuf> {
    vec![cache.join("images"), cache.join("layers")]
}

/// A base of 4 MiB that does not compress, in 64 files, with folders, a link and a
/// set-uid file.
fn base() -> Vec<E> {
    let mut layer = vec![
        E::Dir("usr", 0o755),
        E::Dir("usr/lib", 0o755),
        E::Dir("etc", 0o755),
        file("etc/conf", "from the base"),
        E::File("usr/bin-suid", 0o4755, b"set-uid".to_vec()),
        E::Symlink("lib", "usr/lib"),
    ];
    for i in 0..64u64 {
        let name: &'static str = Box::leak(format!("usr/lib/part{i}").into_boxed_str());
        layer.push(E::File(name, 0o644, noise(64 << 10, i + 1)));
    }
    layer
}

/// An image of the base and one small layer of its own.
fn on_base(top: Vec<E>, env: &str) -> Built {
    build(&[base(), top], "amd64", &[env], "")
}

async fn pull(store: &ImageStore, reg: &Registry, repo: &str, image: &Built) -> div_image::Image {
    push(&reg.addr, repo, "1", image, &Credentials::none()).await;
    let r: ImageRef = format!("{}/{repo}:1", reg.addr).parse().expect("ref");
    store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .expect("pull")
}

fn inode(p: &Path) -> (u64, u64) {
    let m = std::fs::symlink_metadata(p).expect("lstat");
    (m.dev(), m.ino())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_images_on_one_base_take_the_disk_of_one_and_their_difference() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path(), UnpackLimits::default());
    let one = pull(
        &store,
        &reg,
        "base/one",
        &on_base(vec![E::File("one", 0o644, noise(256 << 10, 101))], "A=1"),
    )
    .await;
    let first = disk(&unpacked(cache.path()));
    assert!(first >= 4 * MIB, "the base alone is 4 MiB: {first}");
    let two = pull(
        &store,
        &reg,
        "base/two",
        &on_base(vec![E::File("two", 0o644, noise(256 << 10, 102))], "B=2"),
    )
    .await;
    let both = disk(&unpacked(cache.path()));
    let added = both - first;
    // The second image adds its own 256 KiB layer, its folders and links, and its layer's
    // index: nothing of the base's 4 MiB. Unpacked twice, it would add 4 MiB more.
    assert!(
        (256 << 10..512 << 10).contains(&added),
        "a second image on the base added {added} bytes (the first took {first})"
    );
    // The base's files are one inode each, in both trees and the store.
    for name in [
        "usr/lib/part0",
        "usr/lib/part63",
        "etc/conf",
        "usr/bin-suid",
    ] {
        let (a, b) = (one.rootfs.join(name), two.rootfs.join(name));
        assert_eq!(inode(&a), inode(&b), "{name}");
        assert!(
            std::fs::symlink_metadata(&a).unwrap().nlink() >= 3,
            "{name}"
        );
    }
    // What the cache says it takes is what the blocks say.
    let usage = store.disk_usage().unwrap();
    let slack = usage.images.abs_diff(both);
    assert!(
        slack < 64 << 10,
        "disk_usage {} against {both}",
        usage.images
    );
    // Each image's own size is the whole tree, shared files included.
    for info in store.list().unwrap() {
        assert!(info.unpacked_bytes > 4 * MIB, "{info:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_layer_never_changes_a_shared_file() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path(), UnpackLimits::default());
    // The first image is the base alone (and a small layer): its tree links the store.
    let one = pull(
        &store,
        &reg,
        "shared/one",
        &on_base(vec![file("x", "x")], "A=1"),
    )
    .await;
    let conf = one.rootfs.join("etc/conf");
    let before: HashMap<&str, (std::fs::Metadata, Vec<u8>)> =
        ["etc/conf", "usr/bin-suid", "usr/lib/part1", "usr/lib/part2"]
            .into_iter()
            .map(|n| {
                let p = one.rootfs.join(n);
                (
                    n,
                    (
                        std::fs::symlink_metadata(&p).unwrap(),
                        std::fs::read(&p).unwrap(),
                    ),
                )
            })
            .collect();
    // The second overwrites one shared file, re-declares another with another mode, whites
    // one out, empties a folder, and hard-links a shared file under a new name.
    let two = pull(
        &store,
        &reg,
        "shared/two",
        &on_base(
            vec![
                file("etc/conf", "from the second image"),
                E::File("usr/bin-suid", 0o700, b"set-uid".to_vec()),
                file("usr/lib/.wh.part1", ""),
                E::Hardlink("usr/part2-again", "usr/lib/part2"),
                file("usr/lib/.wh..wh..opq", ""),
            ],
            "B=2",
        ),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(two.rootfs.join("etc/conf")).unwrap(),
        "from the second image"
    );
    assert_ne!(inode(&two.rootfs.join("etc/conf")), inode(&conf));
    assert_eq!(
        std::fs::symlink_metadata(two.rootfs.join("usr/bin-suid"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o700
    );
    assert!(!two.rootfs.join("usr/lib/part1").exists());
    assert!(!two.rootfs.join("usr/lib/part2").exists());
    assert_eq!(
        inode(&two.rootfs.join("usr/part2-again")),
        inode(&one.rootfs.join("usr/lib/part2"))
    );
    // The first image's files are as they were: same inode, contents, mode, owner, time.
    for (name, (meta, data)) in &before {
        let p = one.rootfs.join(name);
        let now = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), *data, "{name}");
        assert_eq!(
            (now.ino(), now.mode(), now.uid(), now.gid(), now.mtime()),
            (
                meta.ino(),
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.mtime()
            ),
            "{name}"
        );
    }
    assert_eq!(before["usr/bin-suid"].0.mode() & 0o7777, 0o4755);
    assert_eq!(before["etc/conf"].0.mtime(), 1_700_000_000);
    // The files of a tree are never writable through it by a run: runs bind it read-only,
    // and the store's own files are what the layer says, not writable by others.
    assert_eq!(before["usr/lib/part1"].0.mode() & 0o022, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_frees_what_only_the_removed_image_used() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path(), UnpackLimits::default());
    let one_image = on_base(vec![E::File("one", 0o644, noise(512 << 10, 201))], "A=1");
    let two_image = on_base(vec![E::File("two", 0o644, noise(512 << 10, 202))], "B=2");
    pull(&store, &reg, "prune/one", &one_image).await;
    let two = pull(&store, &reg, "prune/two", &two_image).await;
    let both = disk(&unpacked(cache.path()));
    let whole = |c: &Path| disk(&[c.to_path_buf()]);
    let both_whole = whole(cache.path());
    let layers = |c: &Path| {
        std::fs::read_dir(c.join("layers/sha256"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<HashSet<String>>()
    };
    assert_eq!(layers(cache.path()).len(), 3, "the base, and each top");

    let report = store
        .prune(&PruneOptions {
            keep: vec![two_image.manifest_digest.clone()],
            unused_since: None,
        })
        .await
        .unwrap();
    assert_eq!(report.images, vec![one_image.manifest_digest.clone()]);
    assert_eq!(report.layers, 1, "one's own top layer");
    let after = disk(&unpacked(cache.path()));
    let freed = both - after;
    // One's 512 KiB layer and its tree's folders went; the base stays for two.
    assert!(
        ((512 << 10)..(768 << 10)).contains(&freed),
        "freed {freed} of {both}"
    );
    // And what it says it freed (blobs too) is what the blocks say.
    let freed_whole = both_whole - whole(cache.path());
    assert!(
        report.bytes.abs_diff(freed_whole) < 64 << 10,
        "the report says {} and the blocks {freed_whole}",
        report.bytes
    );
    assert_eq!(
        std::fs::read(two.rootfs.join("usr/lib/part7")).unwrap(),
        noise(64 << 10, 8)
    );
    assert!(layers(cache.path()).len() == 2);

    // With the last image, the last link of every file goes.
    store.prune(&PruneOptions::default()).await.unwrap();
    assert!(layers(cache.path()).is_empty());
    assert!(disk(&unpacked(cache.path())) < 64 << 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_images_on_one_base_pulled_at_once_both_unpack_whole() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let images = [
        on_base(vec![file("one", "1")], "A=1"),
        on_base(vec![file("two", "2")], "B=2"),
    ];
    for (tag, image) in ["one", "two"].iter().zip(&images) {
        push(&reg.addr, "race/base", tag, image, &Credentials::none()).await;
    }
    let cache = tempfile::tempdir().unwrap();
    let (s1, s2) = (
        store(cache.path(), UnpackLimits::default()),
        store(cache.path(), UnpackLimits::default()),
    );
    let r = |tag: &str| -> ImageRef { format!("{}/race/base:{tag}", reg.addr).parse().unwrap() };
    let (none, platform) = (Credentials::none(), amd64());
    let (r1, r2) = (r("one"), r("two"));
    let (a, b) = tokio::join!(
        s1.ensure(&r1, &platform, &none, &NoProgress),
        s2.ensure(&r2, &platform, &none, &NoProgress)
    );
    let (a, b) = (a.expect("first pull"), b.expect("second pull"));
    for (image, own) in [(&a, "one"), (&b, "two")] {
        assert!(image.rootfs.join(own).is_file());
        for i in [0u64, 31, 63] {
            assert_eq!(
                std::fs::read(image.rootfs.join(format!("usr/lib/part{i}"))).unwrap(),
                noise(64 << 10, i + 1)
            );
        }
    }
    assert_eq!(
        std::fs::read_dir(cache.path().join("layers/sha256"))
            .unwrap()
            .count(),
        3,
        "each layer stored once"
    );
    assert_eq!(
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count(),
        0
    );
    // A third image on the base links it, whichever pull stored it.
    let three = pull(
        &s1,
        &reg,
        "race/three",
        &on_base(vec![file("three", "3")], "C=3"),
    )
    .await;
    assert_eq!(
        inode(&three.rootfs.join("usr/lib/part5")),
        inode(
            &cache
                .path()
                .join("layers/sha256")
                .join(div_image::Digest::sha256_of(&crate::support::tar(&base())).hex())
                .join("files/11")
        ),
        "entry 11 of the base is usr/lib/part5"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_layer_still_counts_against_the_image_s_limits() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    pull(
        &store(cache.path(), UnpackLimits::default()),
        &reg,
        "limits/one",
        &on_base(vec![file("one", "1")], "A=1"),
    )
    .await;
    // The base is stored now; an image on it pulled under a 2 MiB limit is refused at the
    // base, as it would be unpacked anew, and nothing of it is kept.
    let small = store(
        cache.path(),
        UnpackLimits {
            max_bytes: 2 * MIB,
            ..UnpackLimits::default()
        },
    );
    let two = on_base(vec![file("two", "2")], "B=2");
    push(&reg.addr, "limits/two", "1", &two, &Credentials::none()).await;
    let r: ImageRef = format!("{}/limits/two:1", reg.addr).parse().unwrap();
    let err = small
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnsureError::TooLarge {
                index: 1,
                layers: 2,
                limit: Limit::Size { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(small.list().unwrap().len(), 1);
    assert_eq!(
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count(),
        0
    );
}
