//! Materialising a manifest: every unsafe entry refused, the tree written whole or not at all.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use div_ship::{EntryKind, TreeEntry, materialise, validate_entries};

fn file(path: &str, content: &str) -> TreeEntry {
    TreeEntry {
        path: path.to_owned(),
        kind: EntryKind::File,
        executable: false,
        size: content.len() as u64,
        hash: Some(blake3::hash(content.as_bytes()).to_hex().to_string()),
        target: None,
    }
}

fn link(path: &str, target: &str) -> TreeEntry {
    TreeEntry {
        path: path.to_owned(),
        kind: EntryKind::Symlink,
        executable: false,
        size: 0,
        hash: None,
        target: Some(target.to_owned()),
    }
}

/// `entries` are refused with `expect`.
fn check(entries: &[TreeEntry], expect: &str) {
    let err = validate_entries(entries).unwrap_err();
    assert_eq!(err.to_string(), expect);
}

#[test]
fn unsafe_entries_are_refused() {
    check(
        &[file("/etc/passwd", "")],
        "path `/etc/passwd` is not relative",
    );
    check(
        &[file("../x", "")],
        "path `../x` has an empty, `.` or `..` component",
    );
    check(
        &[file("a/../../x", "")],
        "path `a/../../x` has an empty, `.` or `..` component",
    );
    check(
        &[file("a//b", "")],
        "path `a//b` has an empty, `.` or `..` component",
    );
    check(
        &[file("./a", "")],
        "path `./a` has an empty, `.` or `..` component",
    );
    check(
        &[file("a/", "")],
        "path `a/` has an empty, `.` or `..` component",
    );
    check(
        &[file("", "")],
        "path `` has an empty, `.` or `..` component",
    );
    check(
        &[file("a\0b", "")],
        "path `a\0b` is not a valid name on Linux",
    );
    check(
        &[file(&"n".repeat(256), "")],
        &format!("path `{}` is not a valid name on Linux", "n".repeat(256)),
    );
    check(&[file("a", ""), file("a", "x")], "path `a` is listed twice");
    check(
        &[link("l", "d"), file("l/x", "")],
        "path `l/x` goes through the symlink `l`",
    );
    check(
        &[file("f", ""), file("f/x", "")],
        "path `f/x` is under `f`, which is a file",
    );
    check(
        &[link("l", "/etc")],
        "symlink `l` points outside the tree (`/etc`)",
    );
    check(
        &[link("d/l", "../..")],
        "symlink `d/l` points outside the tree (`../..`)",
    );
    check(
        &[link("d", "."), link("e", "d/..")],
        "symlink `e` points outside the tree (`d/..`)",
    );
    check(&[link("l", "")], "symlink `l` points outside the tree (``)");
    check(
        &[link("a", "b"), link("b", "a")],
        "symlink `a` points outside the tree (`b`)",
    );
    let mut bad_hash = file("f", "");
    bad_hash.hash = Some("../../etc/passwd".to_owned());
    check(
        &[bad_hash],
        "entry `f` is a file but its hash is not 64 lowercase hex digits",
    );
    let mut no_hash = file("f", "");
    no_hash.hash = None;
    check(&[no_hash], "entry `f` is a file but has no hash");
    let mut no_target = link("l", "x");
    no_target.target = None;
    check(&[no_target], "entry `l` is a symlink but has no target");
}

#[test]
fn safe_entries_pass() {
    let entries = [
        file("a/b.py", ""),
        link("a/l", "../c"),
        link("top", "a"),
        file("c", "x"),
    ];
    validate_entries(&entries).unwrap();
}

/// A blob store holding `contents`, named by hash.
fn blobs(dir: &Path, contents: &[&str]) -> impl Fn(&str) -> PathBuf + use<> {
    let store = dir.join("blobs");
    fs::create_dir_all(&store).unwrap();
    for content in contents {
        fs::write(
            store.join(blake3::hash(content.as_bytes()).to_hex().as_str()),
            content,
        )
        .unwrap();
    }
    move |hash| store.join(hash)
}

#[test]
fn a_tree_is_written_with_modes_and_links() {
    let tmp = tempfile::tempdir().unwrap();
    let blob_path = blobs(tmp.path(), &["print(1)\n", "#!/bin/sh\n"]);
    let mut run = file("bin/run.sh", "#!/bin/sh\n");
    run.executable = true;
    let entries = [
        file("a/train.py", "print(1)\n"),
        run,
        link("latest", "a/train.py"),
    ];
    let dest = tmp.path().join("code/9f31c2ab");
    fs::create_dir_all(dest.parent().unwrap()).unwrap();
    materialise(&entries, blob_path, &dest).unwrap();
    assert_eq!(
        fs::read_to_string(dest.join("a/train.py")).unwrap(),
        "print(1)\n"
    );
    assert_eq!(
        fs::metadata(dest.join("bin/run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert_eq!(
        fs::metadata(dest.join("a/train.py"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o644
    );
    assert_eq!(
        fs::read_link(dest.join("latest")).unwrap(),
        Path::new("a/train.py")
    );
    assert_eq!(
        fs::read_dir(dest.parent().unwrap()).unwrap().count(),
        1,
        "no temporary left"
    );
}

#[test]
fn a_failed_materialise_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let blob_path = blobs(tmp.path(), &["here"]);
    let entries = [file("a", "here"), file("b", "missing blob")];
    let parent = tmp.path().join("code");
    fs::create_dir_all(&parent).unwrap();
    let dest = parent.join("id");
    let err = materialise(&entries, blob_path, &dest).unwrap_err();
    assert!(err.to_string().starts_with("cannot write `"), "{err}");
    assert!(!dest.exists());
    assert_eq!(
        fs::read_dir(&parent).unwrap().count(),
        0,
        "no temporary left"
    );
}

#[test]
fn a_blob_of_the_wrong_size_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let blob_path = blobs(tmp.path(), &["short"]);
    let mut entry = file("a", "short");
    entry.size = 99;
    let dest = tmp.path().join("out");
    let err = materialise(&[entry], blob_path, &dest).unwrap_err();
    assert!(
        err.to_string().contains("has 5 bytes, expected 99"),
        "{err}"
    );
    assert!(!dest.exists());
}

#[test]
fn an_existing_destination_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let blob_path = blobs(tmp.path(), &[""]);
    let dest = tmp.path().join("out");
    fs::create_dir(&dest).unwrap();
    let err = materialise(&[file("a", "")], blob_path, &dest).unwrap_err();
    assert!(
        matches!(err, div_ship::MaterialiseError::DestinationExists { .. }),
        "{err}"
    );
}

#[test]
fn a_shipment_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    crate::support::write(&src, "a.py", "a");
    crate::support::write(&src, "pkg/b.py", "b");
    crate::support::symlink(&src, "pkg/link", "b.py");
    let shipment = div_ship::collect(&src, &div_ship::ShipOptions::default()).unwrap();
    let by_hash: std::collections::HashMap<String, PathBuf> = shipment
        .manifest
        .entries
        .iter()
        .filter_map(|e| Some((e.hash.clone()?, shipment.local_path(&e.path))))
        .collect();
    let dest = tmp.path().join("dest");
    materialise(&shipment.manifest.entries, |h| by_hash[h].clone(), &dest).unwrap();
    let again = div_ship::collect(&dest, &div_ship::ShipOptions::default()).unwrap();
    assert_eq!(again.manifest, shipment.manifest);
}

/// Names that are not UTF-8 come escaped (`div_ship::encode_path`): exactly one string per
/// name is taken, so two strings can never write one file twice, and a name's length is
/// counted in the bytes it stands for.
#[test]
fn escaped_names_are_taken_only_in_their_one_spelling() {
    validate_entries(&[file("caf\0e9.txt", ""), link("l", "caf\0e9.txt")]).unwrap();
    // `é` is valid UTF-8: it is written as itself, never as its escaped bytes.
    check(
        &[file("\0c3\0a9", "")],
        "path `\0c3\0a9` is not a valid name on Linux",
    );
    check(
        &[file("a\0E9", "")],
        "path `a\0E9` is not a valid name on Linux",
    );
    check(
        &[link("l", "x\0zz")],
        "entry `l` is a symlink but its target is not a valid path",
    );
    // 200 escaped bytes are 200 bytes of name, though 600 characters of string.
    validate_entries(&[file(&"\0ff".repeat(200), "")]).unwrap();
    check(
        &[file(&"\0ff".repeat(256), "")],
        &format!(
            "path `{}` is not a valid name on Linux",
            "\\xff".repeat(256)
        ),
    );
}

/// Two linked trees of the same files are the blobs themselves: a plain file is a link to
/// its blob, an executable one a link to the blob's executable twin, made once beside it;
/// the same bytes plain in one place and executable in another are two files, each with its
/// own mode.
#[test]
fn a_linked_tree_shares_its_files_with_their_blobs_executables_with_their_twins() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let blob_path = blobs(tmp.path(), &["print(1)\n", "#!/bin/sh\n"]);
    let blob_of = |text: &str| {
        tmp.path()
            .join("blobs")
            .join(blake3::hash(text.as_bytes()).to_hex().as_str())
    };
    let mut run = file("bin/run.sh", "#!/bin/sh\n");
    run.executable = true;
    let entries = [
        file("a/train.py", "print(1)\n"),
        file("b/same.py", "print(1)\n"),
        file("bin/plain.sh", "#!/bin/sh\n"),
        run,
    ];
    let (one, two) = (tmp.path().join("code/1"), tmp.path().join("code/2"));
    fs::create_dir_all(tmp.path().join("code")).unwrap();
    div_ship::materialise_linked(&entries, &blob_path, &one).unwrap();
    div_ship::materialise_linked(&entries, &blob_path, &two).unwrap();
    let inode = |p: &Path| fs::metadata(p).unwrap().ino();
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o777;
    // One file on disk for the blob and its four places in two trees.
    let blob = inode(&blob_of("print(1)\n"));
    for tree in [&one, &two] {
        assert_eq!(inode(&tree.join("a/train.py")), blob);
        assert_eq!(inode(&tree.join("b/same.py")), blob);
        assert_eq!(
            fs::read_to_string(tree.join("a/train.py")).unwrap(),
            "print(1)\n"
        );
    }
    assert_eq!(fs::metadata(blob_of("print(1)\n")).unwrap().nlink(), 5);
    // The executable: one twin for both trees, mode 0755, the blob itself left plain and
    // linked by the plain copies.
    let script = blob_of("#!/bin/sh\n");
    let twin = div_ship::executable_blob(&script);
    assert_eq!(twin.file_name().unwrap().to_str().unwrap().len(), 64 + 2);
    assert_eq!(inode(&one.join("bin/run.sh")), inode(&twin));
    assert_eq!(inode(&two.join("bin/run.sh")), inode(&twin));
    assert_eq!(fs::metadata(&twin).unwrap().nlink(), 3);
    assert_eq!(mode(&twin), 0o755);
    assert_eq!(fs::read_to_string(&twin).unwrap(), "#!/bin/sh\n");
    assert_eq!(inode(&one.join("bin/plain.sh")), inode(&script));
    assert_eq!(mode(&script) & 0o111, 0);
    assert_eq!(fs::metadata(&script).unwrap().nlink(), 3);
}

/// A twin is made from its blob whatever is at the twin's name is not: something already
/// there (one made meanwhile) is used, never written over.
#[test]
fn an_executable_twin_already_there_is_linked_never_written_over() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let blob_path = blobs(tmp.path(), &["#!/bin/sh\n"]);
    let script = tmp
        .path()
        .join("blobs")
        .join(blake3::hash(b"#!/bin/sh\n").to_hex().as_str());
    let twin = div_ship::executable_blob(&script);
    fs::copy(&script, &twin).unwrap();
    fs::set_permissions(&twin, fs::Permissions::from_mode(0o755)).unwrap();
    let before = fs::metadata(&twin).unwrap().ino();
    let mut run = file("run.sh", "#!/bin/sh\n");
    run.executable = true;
    fs::create_dir_all(tmp.path().join("code")).unwrap();
    let dest = tmp.path().join("code/1");
    div_ship::materialise_linked(&[run], &blob_path, &dest).unwrap();
    assert_eq!(fs::metadata(dest.join("run.sh")).unwrap().ino(), before);
    assert_eq!(fs::metadata(&twin).unwrap().ino(), before);
}

/// A tree big enough to be written by several threads (10,000 files in 200 folders, some
/// folders split between two threads' runs, executables and links among them) is written
/// whole, linked and copied alike: every file with its bytes and mode, every link.
#[test]
fn a_big_tree_written_by_several_threads_is_whole() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let contents: Vec<String> = (0..10_000).map(|i| format!("file {i}\n")).collect();
    let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
    let blob_path = blobs(tmp.path(), &refs);
    let mut entries: Vec<TreeEntry> = Vec::new();
    for (i, content) in contents.iter().enumerate() {
        let mut entry = file(&format!("d{:03}/sub/f{i:05}.py", i / 50), content);
        entry.executable = i % 997 == 0;
        entries.push(entry);
    }
    entries.push(link("d000/to-f00001", "sub/f00001.py"));
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    fs::create_dir_all(tmp.path().join("code")).unwrap();
    for (tree, linked) in [("code/linked", true), ("code/copied", false)] {
        let dest = tmp.path().join(tree);
        if linked {
            div_ship::materialise_linked(&entries, &blob_path, &dest).unwrap();
        } else {
            div_ship::materialise(&entries, &blob_path, &dest).unwrap();
        }
        for (i, content) in contents.iter().enumerate() {
            let path = dest.join(format!("d{:03}/sub/f{i:05}.py", i / 50));
            assert_eq!(&fs::read_to_string(&path).unwrap(), content, "{path:?}");
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, if i % 997 == 0 { 0o755 } else { 0o644 }, "{path:?}");
        }
        assert_eq!(
            fs::read_to_string(dest.join("d000/to-f00001")).unwrap(),
            "file 1\n"
        );
        let folders = fs::read_dir(&dest).unwrap().count();
        assert_eq!(folders, 200, "{tree}");
    }
}
