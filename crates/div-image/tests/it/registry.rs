//! Pulls from Debian's `docker-registry` on loopback, of images these tests build and push.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use div_image::{
    CredentialSources, Credentials, EnsureError, ImageRef, ImageStore, NoProgress, Platform,
    Progress, PruneOptions, PullPolicy, StoreOptions,
};
use div_test_support::proxy::{Fault, Proxy, Upstream};

use crate::support::{
    self, E, OCI_INDEX, OCI_MANIFEST, Registry, build, fast_options, file, login, push,
};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_a_busybox_image_that_runs() {
    let (Some(reg), Some(layer)) = (Registry::start(None), busybox_layer()) else {
        return;
    };
    let image = build(&[layer], "amd64", &["PATH=/bin", "GREETING=hello"], "/work");
    push(
        &reg.addr,
        "tools/busybox",
        "1",
        &image,
        &Credentials::none(),
    )
    .await;

    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let r: ImageRef = format!("{}/tools/busybox:1", reg.addr).parse().unwrap();
    let events = Mutex::new(Vec::new());
    let sink = |e: &Progress| events.lock().unwrap().push(e.clone());
    let got = store
        .ensure(&r, &amd64(), &Credentials::none(), &sink)
        .await
        .expect("pull");
    assert_eq!(got.digest, image.manifest_digest);
    assert_eq!(got.config.env, ["PATH=/bin", "GREETING=hello"]);
    assert_eq!(got.config.working_dir.as_deref(), Some("/work"));
    assert_eq!(
        std::fs::read(got.rootfs.join("bin/busybox")).unwrap(),
        std::fs::read(support::program("busybox").unwrap()).unwrap()
    );
    for mount_point in ["proc", "dev", "sys", "tmp"] {
        assert!(
            got.rootfs.join(mount_point).is_dir(),
            "/{mount_point} added"
        );
    }
    {
        let events = events.lock().unwrap();
        assert!(
            matches!(events[0], Progress::Resolved { layers: 1, .. }),
            "{events:?}"
        );
        assert!(events.iter().any(|e| matches!(e, Progress::Bytes { .. })));
        assert!(
            matches!(events.last(), Some(Progress::Ready { .. })),
            "{events:?}"
        );
    }

    // The second time, nothing is downloaded or unpacked again.
    events.lock().unwrap().clear();
    let again = store
        .ensure(&r, &amd64(), &Credentials::none(), &sink)
        .await
        .unwrap();
    assert_eq!(again.rootfs, got.rootfs);
    assert_eq!(
        *events.lock().unwrap(),
        [Progress::Cached {
            manifest: image.manifest_digest.clone()
        }]
    );
    let list = store.list().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].references, [r.to_string()]);

    // The unpacked tree runs, in bubblewrap, as a run will.
    if let Some(bwrap) = support::program("bwrap") {
        let out = Command::new(bwrap)
            .arg("--ro-bind")
            .arg(&got.rootfs)
            .args([
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--unshare-all",
                "--die-with-parent",
            ])
            .args([
                "--setenv",
                "PATH",
                "/bin",
                "/bin/sh",
                "-c",
                "echo hello from $(busybox basename /bin/busybox)",
            ])
            .output()
            .expect("run bwrap");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello from busybox\n",
            "stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_with_basic_auth_needs_the_login_from_the_auth_file() {
    let Some(reg) = Registry::start(Some(("alice", "wonder"))) else {
        return;
    };
    let image = build(&[vec![file("hello", "secret image")]], "amd64", &[], "");
    push(
        &reg.addr,
        "private/app",
        "v1",
        &image,
        &login(&reg.addr, "alice", "wonder"),
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let r: ImageRef = format!("{}/private/app:v1", reg.addr).parse().unwrap();

    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::Unauthorized { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "the registry `{0}` refused access to `{0}/private/app:v1` (HTTP 401); log in first (`docker login {0}`), or check the image's name",
            reg.addr
        )
    );

    // The login as `podman login` writes it, found through REGISTRY_AUTH_FILE's value.
    let auth_file = cache.path().join("auth.json");
    std::fs::write(
        &auth_file,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "YWxpY2U6d29uZGVy"}}}}}}"#,
            reg.addr
        ),
    )
    .unwrap();
    let creds = Credentials::load(&CredentialSources {
        registry_auth_file: Some(auth_file),
        ..CredentialSources::default()
    })
    .unwrap();
    let got = store
        .ensure(&r, &amd64(), &creds, &NoProgress)
        .await
        .expect("pull with login");
    assert_eq!(
        std::fs::read_to_string(got.rootfs.join("hello")).unwrap(),
        "secret image"
    );

    let wrong = login(&reg.addr, "alice", "guess");
    let other: ImageRef = format!("{}/private/app:v1", reg.addr).parse().unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let err = crate::registry::store(fresh.path())
        .ensure(&other, &amd64(), &wrong, &NoProgress)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("check the login stored for it"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn picks_the_platform_from_a_multi_platform_index() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let amd = build(&[vec![file("arch", "amd64")]], "amd64", &[], "");
    let arm = build(&[vec![file("arch", "arm64")]], "arm64", &[], "");
    push(
        &reg.addr,
        "multi/app",
        "amd64-only",
        &amd,
        &Credentials::none(),
    )
    .await;
    push(
        &reg.addr,
        "multi/app",
        "arm64-only",
        &arm,
        &Credentials::none(),
    )
    .await;
    let index_bytes = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": amd.manifest_digest.to_string(), "size": amd.manifest.len(), "platform": {"os": "linux", "architecture": "amd64"}},
            {"mediaType": OCI_MANIFEST, "digest": arm.manifest_digest.to_string(), "size": arm.manifest.len(), "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"mediaType": OCI_MANIFEST, "digest": amd.manifest_digest.to_string(), "size": amd.manifest.len(), "platform": {"os": "unknown", "architecture": "unknown"}},
        ],
    }))
    .unwrap();
    let r: ImageRef = format!("{}/multi/app:latest", reg.addr).parse().unwrap();
    let p = div_image::Pusher::connect(&r, &Credentials::none(), &fast_options())
        .await
        .unwrap();
    p.manifest("latest", index_bytes.clone(), OCI_INDEX)
        .await
        .unwrap();

    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    for (platform, want, digest) in [
        ("linux/arm64", "arm64", &arm.manifest_digest),
        ("linux/amd64", "amd64", &amd.manifest_digest),
    ] {
        let got = store
            .ensure(
                &r,
                &platform.parse().unwrap(),
                &Credentials::none(),
                &NoProgress,
            )
            .await
            .expect("pull from index");
        assert_eq!(
            std::fs::read_to_string(got.rootfs.join("arch")).unwrap(),
            want
        );
        assert_eq!(&got.digest, digest);
    }
    let err = store
        .ensure(
            &r,
            &"linux/s390x".parse().unwrap(),
            &Credentials::none(),
            &NoProgress,
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("`{r}` has no image for `linux/s390x`; it has: linux/amd64, linux/arm64/v8")
    );
    // The index pinned by its digest is found in the cache without the network.
    let pinned = r.with_digest(div_image::Digest::sha256_of(&index_bytes));
    store
        .ensure(&pinned, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .expect("pull by index digest");
    let offline = ImageStore::open_with(
        store.root(),
        StoreOptions {
            pull_policy: PullPolicy::Never,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let got = offline
        .ensure(&pinned, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .expect("cached by index digest");
    assert_eq!(got.digest, amd.manifest_digest);
    // A single-platform image for another machine is refused too, not unpacked.
    let arm_only: ImageRef = format!("{}/multi/app:arm64-only", reg.addr)
        .parse()
        .unwrap();
    let err = store
        .ensure(&arm_only, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::NoPlatform { .. }), "{err:?}");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_does_not_exist_is_refused_in_the_registry_s_words() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let r: ImageRef = format!("{}/no/such:thing", reg.addr).parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::NotFound { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("the registry `{}` has no image `{r}`: ", reg.addr)),
        "{err}"
    );

    // Nothing listens here: refused as unreachable, after the retries.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r: ImageRef = format!("127.0.0.1:{port}/x:1").parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::Unreachable { .. }), "{err:?}");

    // With the network forbidden, an image not cached is an error, not a pull.
    let offline = ImageStore::open_with(
        cache.path(),
        StoreOptions {
            pull_policy: PullPolicy::Never,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let err = offline
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("`{r}` is not in the image cache, and the pull policy forbids pulling it")
    );
}

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

/// [`support::tree`], each file's `nlink=` counting the links inside the tree only: a file
/// of the cache's tree is also linked from the layer store (and from other images of the
/// layer), which umoci's tree is not; the links the image itself makes must match.
fn tree_links_inside(root: &Path) -> std::collections::BTreeMap<String, String> {
    use std::os::unix::fs::MetadataExt as _;
    let mut tree = support::tree(root);
    let inode = |path: &str| {
        let m = std::fs::symlink_metadata(root.join(path.trim_start_matches('/'))).expect("lstat");
        (m.dev(), m.ino())
    };
    let mut links: std::collections::HashMap<(u64, u64), usize> = Default::default();
    for (path, what) in &tree {
        if what.starts_with("file ") {
            *links.entry(inode(path)).or_default() += 1;
        }
    }
    for (path, what) in tree.iter_mut() {
        let Some(at) = what.find(" nlink=").filter(|_| what.starts_with("file ")) else {
            continue;
        };
        let end = what[at + 1..].find(' ').map_or(what.len(), |e| at + 1 + e);
        let inside = links[&inode(path)];
        what.replace_range(at..end, &format!(" nlink={inside}"));
    }
    tree
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unpacked_tree_equals_umoci_s() {
    let (Some(reg), Some(umoci)) = (Registry::start(None), support::program("umoci")) else {
        return;
    };
    let layers = vec![
        vec![
            E::Dir("etc", 0o755),
            file("etc/passwd", "root:x:0:0"),
            file("etc/keep", "keep"),
            E::Dir("opq", 0o755),
            file("opq/lower1", "l1"),
            E::Dir("opq/sub", 0o755),
            file("opq/sub/lower2", "l2"),
            E::Dir("wh", 0o755),
            file("wh/gone", "x"),
            E::Dir("wh/gonedir", 0o755),
            file("wh/gonedir/f", "y"),
            file("wh/stay", "z"),
            file("wh/link_gone", "w"),
            E::Dir("redeclare", 0o755),
            file("redeclare/inner", "inner"),
            E::Symlink("lnk", "etc"),
            file("lowerfile", "l"),
            E::Dir("ro", 0o555),
            E::File("ro/f", 0o444, b"ro".to_vec()),
            file("hl_src", "hard"),
            E::File("suid", 0o4755, b"s".to_vec()),
            E::Dir("replaced", 0o755),
            file("replaced/x", "x"),
        ],
        vec![
            file("opq/new", "same layer"),
            file("opq/.wh..wh..opq", ""),
            file("wh/.wh.gone", ""),
            file("wh/.wh.gonedir", ""),
            E::Hardlink("wh/.wh.link_gone", "hl_src"),
            E::Dir("redeclare", 0o750),
            file("redeclare/added", "added"),
            E::Hardlink("hl_dst", "hl_src"),
            file("ro/newfile", "new"),
            E::RawFile("../../escape", b"evil".to_vec()),
            E::RawFile("/abs", b"abs".to_vec()),
            file("lnk/via_link", "through a symlinked parent"),
            file("replaced", "now a file"),
        ],
        vec![
            E::Symlink("to_root", "/"),
            E::Symlink("up", "../../../.."),
            file(".wh.lowerfile", ""),
            E::Dir("wh/gonedir", 0o711),
        ],
        vec![
            file("to_root/etc/through_abs", "abs link"),
            file("up/through_up", "up link"),
        ],
    ];
    let image = build(&layers, "amd64", &[], "");
    push(&reg.addr, "wh/app", "1", &image, &Credentials::none()).await;
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let r: ImageRef = format!("{}/wh/app:1", reg.addr).parse().unwrap();
    let got = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap();

    let work = tempfile::tempdir().unwrap();
    let layout = work.path().join("layout");
    support::oci_layout(&layout, &image, "test");
    let theirs = work.path().join("rootfs");
    let out = Command::new(umoci)
        .args(["raw", "unpack", "--rootless", "--image"])
        .arg(format!("{}:test", layout.display()))
        .arg(&theirs)
        .output()
        .expect("run umoci");
    assert!(
        out.status.success(),
        "umoci: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut ours = tree_links_inside(&got.rootfs);
    for added in ["/proc", "/dev", "/sys", "/tmp"] {
        ours.remove(added);
    }
    let theirs = tree_links_inside(&theirs);
    // The same layers in another image (another config): this time every layer comes
    // from the layer store, its files linked, and the tree must be the same.
    let again = support::build_image(&layers, "amd64", serde_json::json!({"Env": ["X=2"]}), true);
    assert_ne!(again.manifest_digest, image.manifest_digest);
    push(&reg.addr, "wh/app", "2", &again, &Credentials::none()).await;
    let r: ImageRef = format!("{}/wh/app:2", reg.addr).parse().unwrap();
    let composed = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap();
    let mut composed_tree = tree_links_inside(&composed.rootfs);
    for added in ["/proc", "/dev", "/sys", "/tmp"] {
        composed_tree.remove(added);
    }
    assert_eq!(composed_tree, ours, "composed from the layer store");
    let render = |t: &std::collections::BTreeMap<String, String>| {
        t.iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect::<String>()
    };
    assert_eq!(render(&ours), render(&theirs));
    // And the whiteout rules did what they say, so the comparison is not of two wrong trees.
    for (path, present) in [
        ("/opq/new", true),
        ("/opq/lower1", false),
        ("/opq/sub", false),
        ("/wh/gone", false),
        ("/wh/gonedir/f", false),
        ("/wh/gonedir", true),
        ("/wh/link_gone", false),
        ("/wh/stay", true),
        ("/redeclare/inner", true),
        ("/redeclare/added", true),
        ("/lowerfile", false),
        ("/escape", true),
        ("/abs", true),
        ("/etc/via_link", true),
        ("/etc/through_abs", true),
        ("/through_up", true),
        ("/ro/newfile", true),
    ] {
        assert_eq!(
            ours.contains_key(path),
            present,
            "{path} in\n{}",
            render(&ours)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pulls_of_one_image_at_once_share_one_tree() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let image = build(
        &[vec![file("a", &"a".repeat(100_000))], vec![file("b", "b")]],
        "amd64",
        &[],
        "",
    );
    push(&reg.addr, "race/app", "1", &image, &Credentials::none()).await;
    let cache = tempfile::tempdir().unwrap();
    let (s1, s2) = (store(cache.path()), store(cache.path()));
    let r: ImageRef = format!("{}/race/app:1", reg.addr).parse().unwrap();
    let (none, platform) = (Credentials::none(), amd64());
    let (a, b) = tokio::join!(
        s1.ensure(&r, &platform, &none, &NoProgress),
        s2.ensure(&r, &platform, &none, &NoProgress)
    );
    let (a, b) = (a.expect("first pull"), b.expect("second pull"));
    assert_eq!(a.rootfs, b.rootfs);
    assert_eq!(std::fs::read_to_string(a.rootfs.join("b")).unwrap(), "b");
    assert_eq!(s1.list().unwrap().len(), 1);
    assert_eq!(
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count(),
        0,
        "the loser's copy is gone"
    );
}

/// A name for this machine that resolves to a loopback address but is not one of the
/// loopback names the library knows (`localhost`, `127.x`, `[::1]`).
#[allow(clippy::print_stderr)] // the loud skip
fn loopback_alias(port: u16) -> Option<String> {
    use std::net::ToSocketAddrs as _;
    let name = std::fs::read_to_string("/etc/hostname")
        .ok()?
        .trim()
        .to_owned();
    let all_loopback = (name.as_str(), port)
        .to_socket_addrs()
        .ok()?
        .all(|a| a.ip().is_loopback());
    if name.is_empty() || name == "localhost" || !all_loopback {
        eprintln!("\n!!!!! SKIPPED: this machine's name does not resolve to loopback only !!!!!\n");
        return None;
    }
    Some(format!("{name}:{port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_not_on_a_loopback_name_is_https_unless_named_insecure() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let port: u16 = reg.addr.rsplit(':').next().unwrap().parse().unwrap();
    let Some(alias) = loopback_alias(port) else {
        return;
    };
    let image = build(&[vec![file("a", "1")]], "amd64", &[], "");
    push(&reg.addr, "tls/app", "1", &image, &Credentials::none()).await;
    let r: ImageRef = format!("{alias}/tls/app:1").parse().unwrap();
    assert!(!r.is_loopback_registry());

    // Spoken to over HTTPS, the plain-HTTP registry cannot answer.
    let cache = tempfile::tempdir().unwrap();
    let err = store(cache.path())
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::Unreachable { .. }), "{err:?}");

    // Named insecure, it is reached over HTTP.
    let mut options = StoreOptions {
        registry: fast_options(),
        ..StoreOptions::default()
    };
    options.registry.insecure_registries.push(alias.clone());
    let got = ImageStore::open_with(cache.path(), options)
        .unwrap()
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .expect("pull over plain HTTP when named insecure");
    assert_eq!(got.digest, image.manifest_digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_docker_schema_2_manifests_and_lists() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
    let image = build(&[vec![file("flavour", "docker")]], "amd64", &["A=1"], "/");
    // The same image described with docker's media types, as most of Docker Hub still is.
    let mut m: serde_json::Value = serde_json::from_slice(&image.manifest).unwrap();
    m["mediaType"] = DOCKER_MANIFEST.into();
    m["config"]["mediaType"] = "application/vnd.docker.container.image.v1+json".into();
    m["layers"][0]["mediaType"] = "application/vnd.docker.image.rootfs.diff.tar.gzip".into();
    let manifest = serde_json::to_vec(&m).unwrap();
    let digest = div_image::Digest::sha256_of(&manifest);
    let r: ImageRef = format!("{}/docker/app:list", reg.addr).parse().unwrap();
    let p = div_image::Pusher::connect(&r, &Credentials::none(), &fast_options())
        .await
        .unwrap();
    for (_, b) in &image.blobs {
        p.blob(b.clone()).await.unwrap();
    }
    p.blob(image.config.1.clone()).await.unwrap();
    p.manifest("plain", manifest.clone(), DOCKER_MANIFEST)
        .await
        .unwrap();
    let list = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": DOCKER_LIST,
        "manifests": [{"mediaType": DOCKER_MANIFEST, "digest": digest.to_string(), "size": manifest.len(), "platform": {"os": "linux", "architecture": "amd64"}}],
    }))
    .unwrap();
    p.manifest("list", list, DOCKER_LIST).await.unwrap();

    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    for tag in ["plain", "list"] {
        let r: ImageRef = format!("{}/docker/app:{tag}", reg.addr).parse().unwrap();
        let got = store
            .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
            .await
            .expect("pull a docker image");
        assert_eq!(got.digest, digest);
        assert_eq!(
            std::fs::read_to_string(got.rootfs.join("flavour")).unwrap(),
            "docker"
        );
        assert_eq!(got.config.env, ["A=1"]);
    }
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
