//! The unpacked tree equals what umoci makes of the same image.

use std::path::Path;
use std::process::Command;

use div_image::{Credentials, ImageRef, NoProgress};

use super::{amd64, store};
use crate::support::{self, E, Registry, build, file, push};

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
