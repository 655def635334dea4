//! Pulls that succeed: an image that runs, the platform picked from an index, docker's
//! schema 2 documents, two pulls of one image at once.

use std::process::Command;
use std::sync::Mutex;

use div_image::{
    Credentials, EnsureError, ImageRef, ImageStore, NoProgress, Progress, PullPolicy, StoreOptions,
};

use super::{amd64, busybox_layer, store};
use crate::support::{self, OCI_INDEX, OCI_MANIFEST, Registry, build, fast_options, file, push};

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
