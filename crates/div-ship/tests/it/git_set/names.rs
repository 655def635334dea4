//! Links, names and kinds of files: links ship as links (absolute ones into the tree made
//! relative), names with spaces, Unicode or bytes that are not UTF-8 as git lists them, FIFOs
//! and sockets not at all.

use std::fs;

use super::check;
use crate::support::{assert_matches_git, git, git_init, ship_set, symlink, write};

#[test]
fn symlinks_ship_as_links_and_outside_ones_are_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    git_init(r);
    write(r, "a.py", "");
    symlink(r, "inside", "a.py");
    symlink(r, "sub/up", "../a.py");
    symlink(r, "outside", "/etc/passwd");
    symlink(r, "escape", "../..");
    let shipment = div_ship::collect(r, &div_ship::ShipOptions::default()).unwrap();
    let paths: Vec<&str> = shipment
        .manifest
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(paths, ["a.py", "inside", "sub/up"]);
    let link = shipment.manifest.get("inside").unwrap();
    assert_eq!(
        (link.kind, link.target.as_deref()),
        (div_ship::EntryKind::Symlink, Some("a.py"))
    );
    insta::assert_snapshot!(shipment.warnings.join("\n"), @r"
    symlink `escape` points outside the shipped folder (`../..`): not shipped
    symlink `outside` points outside the shipped folder (`/etc/passwd`): not shipped
    ");
}

#[test]
fn symlinks_match_git() {
    check(
        |r| {
            write(r, "a.py", "");
            symlink(r, "link", "a.py");
            symlink(r, "dangling", "nope");
            git(r, &["add", "link"]);
        },
        "",
        &["a.py", "dangling", "link"],
    );
}

#[test]
fn unicode_and_spaces_in_names() {
    check(
        |r| {
            write(r, "données/été.py", "");
            write(r, "with space/a b.py", "");
            write(r, "tab\there.py", "");
            write(r, "[glob]*?.py", "");
            git(r, &["add", "données"]);
        },
        "",
        &[
            "[glob]*?.py",
            "données/été.py",
            "tab\there.py",
            "with space/a b.py",
        ],
    );
}

#[test]
fn fifos_and_sockets_are_not_shipped() {
    check(
        |r| {
            write(r, "a.py", "");
            let made = std::process::Command::new("mkfifo")
                .arg(r.join("pipe"))
                .status()
                .unwrap();
            assert!(made.success());
            let _socket = std::os::unix::net::UnixListener::bind(r.join("sock")).unwrap();
        },
        "",
        &["a.py"],
    );
}

/// git lists a symlink as one path whatever it points to. An absolute link into the shipped
/// folder is shipped as the relative link that reaches the same place, so the run (where
/// the folder is `/workspace`) sees what this machine sees; one pointing outside the shipped
/// folder is left out, and the warning says so truly. What is shipped passes the server's own
/// check (`validate_entries`).
#[test]
fn an_absolute_symlink_into_the_tree_ships_as_the_relative_link_to_the_same_place() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().canonicalize().unwrap().join("repo");
    git_init(&r);
    write(&r, "a.py", "");
    write(&r, "sub/b.py", "");
    let abs = |p: &str| r.join(p).to_str().unwrap().to_owned();
    symlink(&r, "top", &abs("a.py"));
    symlink(&r, "sub/up", &abs("a.py"));
    symlink(&r, "sub/here", &abs("sub"));
    symlink(&r, "sub/deep/root", &abs(""));
    symlink(&r, "dangling", &abs("nope/x"));
    symlink(&r, "outside", "/etc/passwd");
    git(&r, &["add", "top"]);
    let git_says = crate::support::git_set(&r);
    assert!(
        git_says.contains("top") && git_says.contains("sub/up") && git_says.contains("outside")
    );
    let shipment = div_ship::collect(&r, &div_ship::ShipOptions::default()).unwrap();
    let links: Vec<(&str, &str)> = shipment
        .manifest
        .entries
        .iter()
        .filter_map(|e| Some((e.path.as_str(), e.target.as_deref()?)))
        .collect();
    assert_eq!(
        links,
        [
            ("dangling", "nope/x"),
            ("sub/deep/root", "../.."),
            ("sub/here", "../sub"),
            ("sub/up", "../a.py"),
            ("top", "a.py"),
        ]
    );
    let mut expected = git_says;
    expected.remove("outside");
    assert_eq!(ship_set(&r), expected);
    div_ship::validate_entries(&shipment.manifest.entries).unwrap();
    insta::assert_snapshot!(shipment.warnings.join("\n"), @"symlink `outside` points outside the shipped folder (`/etc/passwd`): not shipped");

    // From `sub`, a link to the repository's `a.py` points outside what is shipped.
    let sub = div_ship::collect(&r.join("sub"), &div_ship::ShipOptions::default()).unwrap();
    let warnings = sub.warnings.join("\n").replace(r.to_str().unwrap(), "REPO");
    insta::assert_snapshot!(warnings, @r"
    symlink `deep/root` points outside the shipped folder (`REPO/`): not shipped
    symlink `up` points outside the shipped folder (`REPO/a.py`): not shipped
    ");
    assert_eq!(
        sub.manifest.get("here").unwrap().target.as_deref(),
        Some(".")
    );
}

/// A file name that is not UTF-8 is shipped as git lists it, tracked or not, in a folder or
/// as a link's target: the manifest writes each byte that is not UTF-8 as NUL and two hex
/// digits (`caf\u0000e9.txt`), which reads back to the same bytes, goes through the hash
/// cache, and is materialised under the original name.
#[test]
fn a_name_that_is_not_utf8_ships_as_git_lists_it() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("repo");
    git_init(&r);
    let raw = |b: &[u8]| r.join(OsStr::from_bytes(b));
    fs::write(raw(b"caf\xe9.txt"), "latin-1").unwrap();
    fs::create_dir(raw(b"d\xff")).unwrap();
    fs::write(raw(b"d\xff/x.py"), "x").unwrap();
    write(&r, "a.py", "");
    git(&r, &["add", "."]);
    fs::write(raw(b"new\xfe.py"), "untracked").unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"caf\xe9.txt"), raw(b"link")).unwrap();
    assert_matches_git(&r);
    // Modified well before the cache is written: a file modified in the same clock tick as
    // the cache is racy and hashed again, and a first listing can now end within that tick.
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    for name in [&b"caf\xe9.txt"[..], b"d\xff/x.py", b"a.py", b"new\xfe.py"] {
        fs::File::options()
            .write(true)
            .open(raw(name))
            .unwrap()
            .set_times(fs::FileTimes::new().set_modified(before))
            .unwrap();
    }

    let cache = tmp.path().join("cache");
    let options = div_ship::ShipOptions {
        cache: Some(cache.clone()),
        ..Default::default()
    };
    let shipment = div_ship::collect(&r, &options).unwrap();
    let paths: Vec<&str> = shipment
        .manifest
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(
        paths,
        ["a.py", "caf\0e9.txt", "d\0ff/x.py", "link", "new\0fe.py"]
    );
    let link = shipment.manifest.get("link").unwrap();
    assert_eq!(link.target.as_deref(), Some("caf\0e9.txt"));
    assert_eq!(shipment.read("caf\0e9.txt").unwrap(), b"latin-1");
    let json = serde_json::to_string(shipment.manifest.get("caf\0e9.txt").unwrap()).unwrap();
    assert!(json.contains(r#""path":"caf\u0000e9.txt""#), "{json}");
    assert!(shipment.warnings.is_empty(), "{:?}", shipment.warnings);
    let again = div_ship::collect(&r, &options).unwrap();
    assert_eq!((again.stats.cached_files, again.stats.hashed_files), (4, 0));
    assert_eq!(again.manifest.id(), shipment.manifest.id());

    // Written back out under the same bytes.
    let blobs: std::collections::HashMap<String, std::path::PathBuf> = shipment
        .manifest
        .entries
        .iter()
        .filter_map(|e| Some((e.hash.clone()?, shipment.local_path(&e.path))))
        .collect();
    let out = tmp.path().join("out");
    div_ship::materialise(&shipment.manifest.entries, |h| blobs[h].clone(), &out).unwrap();
    assert_eq!(
        fs::read(out.join(OsStr::from_bytes(b"caf\xe9.txt"))).unwrap(),
        b"latin-1"
    );
    assert_eq!(
        fs::read(out.join(OsStr::from_bytes(b"d\xff/x.py"))).unwrap(),
        b"x"
    );
    assert_eq!(
        fs::read_link(out.join("link"))
            .unwrap()
            .as_os_str()
            .as_bytes(),
        b"caf\xe9.txt"
    );
}
