//! Layers applied in order, whiteouts and attacks, straight through `Unpacker`.

use std::path::Path;

use div_image::Unpacker;

use crate::support::{E, file, tar, tree};

fn unpack(root: &Path, layers: &[Vec<E>]) -> Vec<div_image::LayerStats> {
    let mut u = Unpacker::new(root);
    let stats = layers
        .iter()
        .map(|l| u.apply(&tar(l)[..]).expect("layer applies"))
        .collect();
    u.finish().expect("finish");
    stats
}

fn got(root: &Path) -> String {
    tree(root)
        .into_iter()
        .map(|(k, v)| format!("{k}: {v}\n"))
        .collect()
}

#[test]
fn opaque_directory_clears_only_lower_layers() {
    let dir = tempfile::tempdir().unwrap();
    unpack(
        dir.path(),
        &[
            vec![
                E::Dir("d", 0o755),
                file("d/lower", "1"),
                E::Dir("d/sub", 0o755),
                file("d/sub/deep", "2"),
            ],
            // The same layer adds d/new before and d/after after its opaque marker.
            vec![
                file("d/new", "3"),
                file("d/.wh..wh..opq", ""),
                file("d/after", "4"),
            ],
        ],
    );
    assert_eq!(
        got(dir.path()),
        "/d: dir 755\n/d/after: file 644 nlink=1 4\n/d/new: file 644 nlink=1 3\n"
    );
}

#[test]
fn whiteouts_remove_files_and_directories_of_lower_layers_only() {
    let dir = tempfile::tempdir().unwrap();
    let stats = unpack(
        dir.path(),
        &[
            vec![
                file("a", "1"),
                E::Dir("d", 0o755),
                file("d/f", "2"),
                file("b", "3"),
            ],
            vec![
                file("c", "new"),
                file(".wh.c", ""),
                file(".wh.a", ""),
                file(".wh.d", ""),
                file(".wh.missing", ""),
            ],
        ],
    );
    // c came in the same layer as its whiteout: it stays.
    assert_eq!(
        got(dir.path()),
        "/b: file 644 nlink=1 3\n/c: file 644 nlink=1 new\n"
    );
    assert_eq!(stats[1].whiteouts, 4);
}

#[test]
fn a_whiteout_arriving_as_a_hard_link_is_still_a_whiteout() {
    let dir = tempfile::tempdir().unwrap();
    unpack(
        dir.path(),
        &[
            vec![file("victim", "v"), file("src", "s")],
            vec![E::Hardlink(".wh.victim", "src")],
        ],
    );
    assert_eq!(got(dir.path()), "/src: file 644 nlink=1 s\n");
}

#[test]
fn a_whiteout_never_acts_through_a_symlink() {
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::create_dir(outside.path().join("vdir")).unwrap();
    std::fs::write(outside.path().join("vdir/x"), "precious too").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target: &'static str = Box::leak(outside.path().display().to_string().into_boxed_str());
    let stats = unpack(
        dir.path(),
        &[
            vec![
                E::Symlink("out", target),
                E::Dir("inner", 0o755),
                file("inner/keep", "k"),
                E::Symlink("rel", "inner"),
            ],
            vec![
                file("out/.wh.victim", ""),
                file("out/vdir/.wh..wh..opq", ""),
                file("rel/.wh.keep", ""),
                // The symlink itself can be whited out: the link goes, its target stays.
                file(".wh.out", ""),
            ],
        ],
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("vdir/x")).unwrap(),
        "precious too"
    );
    assert_eq!(stats[1].skipped_whiteouts, 3);
    assert_eq!(
        got(dir.path()),
        "/inner: dir 755\n/inner/keep: file 644 nlink=1 k\n/rel: symlink -> inner\n"
    );
}

#[test]
fn a_later_layer_redeclaring_a_directory_keeps_its_contents() {
    let dir = tempfile::tempdir().unwrap();
    unpack(
        dir.path(),
        &[
            vec![E::Dir("d", 0o755), file("d/old", "o")],
            vec![E::Dir("d", 0o700), file("d/new", "n")],
        ],
    );
    assert_eq!(
        got(dir.path()),
        "/d: dir 700\n/d/new: file 644 nlink=1 n\n/d/old: file 644 nlink=1 o\n"
    );
}

#[test]
fn no_entry_lands_outside_the_root() {
    let outside = tempfile::tempdir().unwrap();
    let target: &'static str = Box::leak(outside.path().display().to_string().into_boxed_str());
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("root");
    std::fs::create_dir(&root).unwrap();
    unpack(
        &root,
        &[
            vec![
                E::RawFile("../../dotdot", b"1".to_vec()),
                E::RawFile("/abs", b"2".to_vec()),
                E::RawFile("a/../../../b", b"3".to_vec()),
                E::Symlink("abs_link", target),
                E::Symlink("up", "../../../.."),
                E::Symlink("slash", "/"),
            ],
            vec![
                file("abs_link/through_abs", "4"),
                file("up/through_up", "5"),
                file("slash/through_slash", "6"),
            ],
        ],
    );
    // Nothing outside: not beside the root, not in the absolute link's target.
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
    let t = got(&root);
    for line in [
        "/dotdot: file 644 nlink=1 1\n",
        "/abs: file 644 nlink=1 2\n",
        "/b: file 644 nlink=1 3\n",
        "/through_up: file 644 nlink=1 5\n",
        "/through_slash: file 644 nlink=1 6\n",
    ] {
        assert!(t.contains(line), "{line} missing from\n{t}");
    }
    // The absolute link resolved as if the root were `/`.
    let inside = format!("{}/through_abs: file 644 nlink=1 4\n", target);
    assert!(t.contains(&inside), "{inside} missing from\n{t}");
}

#[test]
fn a_hard_link_to_a_file_outside_the_root_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::new(dir.path());
    let err = u
        .apply(&tar(&[E::Hardlink("h", "../../../../etc/hostname")])[..])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "the layer's entry `/h` is invalid: a hard link to `../../../../etc/hostname`, which no earlier entry created"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn device_nodes_and_fifos_are_skipped_and_hard_links_share_an_inode() {
    let dir = tempfile::tempdir().unwrap();
    let stats = unpack(
        dir.path(),
        &[vec![
            E::CharDev("null"),
            E::Fifo("fifo"),
            file("f", "x"),
            E::Hardlink("g", "f"),
        ]],
    );
    assert_eq!(stats[0].skipped_devices, 2);
    assert_eq!(
        got(dir.path()),
        "/f: file 644 nlink=2 x\n/g: file 644 nlink=2 x\n"
    );
}

#[test]
fn a_read_only_directory_takes_later_layers_and_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    unpack(
        dir.path(),
        &[
            vec![E::Dir("ro", 0o555), E::File("ro/f", 0o444, b"1".to_vec())],
            vec![file("ro/g", "2"), file("ro/.wh.f", "")],
        ],
    );
    assert_eq!(got(dir.path()), "/ro: dir 555\n/ro/g: file 644 nlink=1 2\n");
}

#[test]
fn a_file_replaces_a_directory_and_a_directory_replaces_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    unpack(
        dir.path(),
        &[
            vec![
                E::Dir("x", 0o755),
                file("x/inner", "i"),
                E::Symlink("y", "x"),
            ],
            vec![file("x", "now a file"), E::Dir("y", 0o755)],
        ],
    );
    assert_eq!(
        got(dir.path()),
        "/x: file 644 nlink=1 now a file\n/y: dir 755\n"
    );
}

#[test]
fn a_broken_layer_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::new(dir.path());
    let mut data = tar(&[file("a", &"x".repeat(2000))]);
    data.truncate(700);
    let err = u.apply(&data[..]).unwrap_err();
    assert_eq!(err.to_string(), "the layer is not a readable tar stream");
}

#[test]
fn a_symlink_loop_among_parents_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::new(dir.path());
    u.apply(&tar(&[E::Symlink("a", "b"), E::Symlink("b", "a")])[..])
        .unwrap();
    let err = u
        .apply(&tar(&[file("a/x", "1")])[..])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "the layer's entry `a/x` is invalid: its parent directories go through more than 255 symlinks"
    );
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    const NAMES: &[&str] = &["a", "b", "..", ".", ".wh.a", ".wh.b", ".wh..wh..opq", "c"];

    fn entry(outside: &'static str) -> impl Strategy<Value = E> {
        let path = proptest::collection::vec(proptest::sample::select(NAMES), 1..4)
            .prop_map(|parts| -> &'static str { Box::leak(parts.join("/").into_boxed_str()) });
        let target =
            proptest::sample::select(vec!["/", "..", "../..", "a", "/a/b", "b/../..", outside]);
        prop_oneof![
            path.clone().prop_map(|p| E::Dir(p, 0o755)),
            path.clone().prop_map(|p| file(p, "x")),
            (path.clone(), target.clone()).prop_map(|(p, t)| E::Symlink(p, t)),
            (path.clone(), path.clone()).prop_map(|(p, t)| E::Hardlink(p, t)),
            path.prop_map(|p| E::RawFile(
                Box::leak(format!("../{p}").into_boxed_str()),
                b"r".to_vec()
            )),
        ]
    }

    fn outside_dir() -> &'static tempfile::TempDir {
        static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
        DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Whatever layers hold (`..`, symlinks to `/`, `..` and a real directory outside,
        /// whiteouts, hard links), nothing is written outside the root and nothing panics.
        #[test]
        fn proptest_nothing_lands_outside_the_root(
            layers in proptest::collection::vec(
                proptest::collection::vec(entry(Box::leak(outside_dir().path().display().to_string().into_boxed_str())), 0..8),
                1..4,
            )
        ) {
            let parent = tempfile::tempdir().unwrap();
            let root = parent.path().join("root");
            std::fs::create_dir(&root).unwrap();
            let mut u = Unpacker::new(&root);
            for l in &layers {
                // A malformed layer may be refused; it must not escape or panic.
                let _ = u.apply(&tar(l)[..]);
            }
            let _ = u.finish();
            prop_assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
            prop_assert_eq!(std::fs::read_dir(outside_dir().path()).unwrap().count(), 0);
        }
    }
}

/// The layers of the rootless check: a read-only directory written into by a later layer,
/// files owned by root (a chown an unprivileged user cannot do), a set-uid file, a device.
fn rootless_layers() -> Vec<Vec<E>> {
    vec![
        vec![
            E::Dir("ro", 0o555),
            E::File("ro/f", 0o444, b"1".to_vec()),
            E::Dir("ro/sub", 0o500),
            E::File("ro/sub/g", 0o400, b"2".to_vec()),
            E::File("suid", 0o4755, b"s".to_vec()),
            E::CharDev("null"),
        ],
        vec![
            file("ro/new", "3"),
            file("ro/.wh.f", ""),
            file("ro/sub/.wh..wh..opq", ""),
        ],
    ]
}

const ROOTLESS_TREE: &str =
    "/ro: dir 555\n/ro/new: file 644 nlink=1 3\n/ro/sub: dir 500\n/suid: file 4755 nlink=1 s\n";

/// Runs only as the child of `unpacks_as_an_unprivileged_user`, which sets the variable.
#[test]
#[allow(clippy::disallowed_methods)] // the test's own switch, not a setting
fn rootless_child() {
    if std::env::var_os("DIV_IMAGE_ROOTLESS_CHILD").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory for the unprivileged user");
    unpack(dir.path(), &rootless_layers());
    assert_eq!(got(dir.path()), ROOTLESS_TREE);
    // Let the tree be removed.
    for p in ["ro", "ro/sub"] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.path().join(p), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    println!("rootless unpack ok");
}

fn uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse().ok())
        .expect("a Uid line")
}

#[test]
fn unpacks_as_an_unprivileged_user() {
    if uid() != 0 {
        // Already unprivileged: do it here.
        let dir = tempfile::tempdir().unwrap();
        unpack(dir.path(), &rootless_layers());
        assert_eq!(got(dir.path()), ROOTLESS_TREE);
        return;
    }
    let Some(setpriv) = crate::support::program("setpriv") else {
        return;
    };
    let out = std::process::Command::new(setpriv)
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "unpack::rootless_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("DIV_IMAGE_ROOTLESS_CHILD", "1")
        .env("TMPDIR", "/tmp")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("rootless unpack ok"),
        "as uid 65534: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
