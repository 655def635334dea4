//! `div image`: the control plane's image cache listed and pruned.

use div_test_support::mock::json_response;
use insta::assert_snapshot;
use serde_json::json;

use crate::support::World;

/// `div image` reads and prunes the control plane's image cache through its API; one that
/// keeps none (it answers the routes 404, as a hosted or older one does) says so.
#[tokio::test]
async fn image_ls_and_prune_go_through_the_control_plane() {
    let world = World::new().await;
    let digest = format!("sha256:{}", "ab".repeat(32));
    world
        .mount(
            "GET",
            "/v1/images",
            json_response(
                200,
                &json!({
                    "path": "/srv/div/images",
                    "images": [{
                        "digest": digest,
                        "references": ["127.0.0.1:5000/tools/busybox:1"],
                        "resolved": [{
                            "reference": "127.0.0.1:5000/tools/busybox:1",
                            "resolved_at": "2026-12-02T00:31:07Z",
                        }],
                        "compressed_bytes": 1_200_000,
                        "downloaded_bytes": 300_000,
                        "unpacked_bytes": 2_400_000,
                    }, {
                        // An older control plane's, or one no tag names any more.
                        "digest": format!("sha256:{}", "cd".repeat(32)),
                        "references": [],
                        "compressed_bytes": 900_000,
                        "unpacked_bytes": 1_000,
                    }],
                    "disk": {"blobs": 1_200_000, "images": 2_400_000, "tmp": 0},
                }),
            ),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/images/prune",
            json_response(
                200,
                &json!({"images": [digest], "blobs": 3, "bytes": 3_600_000, "kept": 0}),
            ),
        )
        .await;
    let ls = world.div(&["image", "ls"]).await;
    assert_eq!(ls.code, 0, "{}", ls.stderr);
    assert_eq!(
        ls.stdout,
        "IMAGE\tDIGEST\tRESOLVED\tDOWNLOADED\tUNPACKED\n\
         127.0.0.1:5000/tools/busybox:1\tsha256:abababababab\t2026-12-02T00:31:07Z\t300.0 KB\t2.4 MB\n\
         <none>\tsha256:cdcdcdcdcdcd\t-\t-\t1.0 KB\n"
    );
    assert_snapshot!(ls.stderr, @"2 images cached in /srv/div/images: 3.6 MB on disk (1.2 MB of blobs, 2.4 MB unpacked, 0 B in progress)");
    let prune = world.div(&["image", "prune"]).await;
    assert_eq!(prune.code, 0, "{}", prune.stderr);
    assert_snapshot!(prune.stderr, @"removed 1 image and 3 blobs, 3.6 MB freed; kept 0 that queued or running runs use");
    assert_eq!(world.bodies("POST", "/v1/images/prune").await, [json!({})]);

    let without = World::new().await;
    for args in [["image", "ls"], ["image", "prune"]] {
        let out = without.div(&args).await;
        assert_eq!(out.code, 200, "{}", out.stderr);
        let what = if args[1] == "ls" { "list" } else { "prune" };
        assert_eq!(
            out.stderr,
            format!(
                "error: this control plane has no image cache to {what}\nhint: `div image` is for the local control plane's own cache; a hosted control plane keeps its images itself\n"
            )
        );
    }
}
