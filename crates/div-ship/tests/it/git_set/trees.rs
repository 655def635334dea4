//! Wide and deep trees, walked as git walks them (and by gix's walk where the file system
//! folds case): the same set as git's.

use std::path::Path;

use super::check;
use crate::support::{assert_matches_git, git, git_init, ship_set, write};

/// Several top-level folders with ignored ones, a submodule and a nested repository among them
/// (gix's walk, the fallback, shares them between threads: neither walk may change what is
/// ignored, tracked, a submodule or a nested repository).
fn wide_tree(r: &Path) {
    write(r, ".gitignore", "build/\n*.log\nn/\n");
    write(r, "README.md", "");
    write(r, "run.log", "");
    write(r, "src/top.py", "");
    write(r, "src/b.log", "");
    write(r, "src/m/a.py", "");
    write(r, "src/n/ignored.py", "");
    write(r, "docs/x.md", "");
    write(r, "build/out.bin", "");
    write(r, "build/keep.txt", "");
    let lib = r.join("lib");
    git_init(&lib);
    write(&lib, "lib.py", "");
    git(&lib, &["add", "."]);
    git(&lib, &["commit", "-qm", "lib"]);
    write(&lib, "new.py", "");
    let other = r.join("other");
    git_init(&other);
    write(&other, "x.py", "");
    git(r, &["add", "lib", "src"]);
    git(r, &["add", "-f", "build/keep.txt"]);
}

#[test]
fn a_wide_tree_matches_git() {
    check(
        wide_tree,
        "",
        &[
            ".gitignore",
            "README.md",
            "build/keep.txt",
            "docs/x.md",
            "lib/lib.py",
            "lib/new.py",
            "other/x.py",
            "src/m/a.py",
            "src/top.py",
        ],
    );
    check(wide_tree, "src", &["m/a.py", "top.py"]);
}

/// The same tree where git folds case: gix's walk, on several threads where there are cores.
#[test]
fn a_wide_tree_walked_by_gix_matches_git() {
    let setup = |r: &Path| {
        git(r, &["config", "core.ignorecase", "true"]);
        wide_tree(r);
    };
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    setup(&repo);
    assert_matches_git(&repo);
    assert_matches_git(&repo.join("src"));
}

/// Where git folds case (`core.ignorecase`), div-ship leaves the walk to gix.
#[test]
fn a_case_folding_repository_is_walked_by_gix_and_matches_git() {
    check(
        |r| {
            git(r, &["config", "core.ignorecase", "true"]);
            write(r, ".gitignore", "*.log\nbuild/\n");
            write(r, "a.py", "");
            write(r, "b.log", "");
            write(r, "build/x.py", "");
            write(r, "src/c.py", "");
            write(r, "src/d.py", "");
            git(r, &["add", "src/c.py"]);
        },
        "",
        &[".gitignore", "a.py", "src/c.py", "src/d.py"],
    );
}

/// Everything below one folder, several levels deep, as in test262 (`test/…`): the walk goes
/// breadth first until it has enough folders to share between threads, then each thread takes
/// folders as it is free. Ignore rules, a negation, a tracked file in an ignored folder, a
/// nested repository and a submodule all sit at the depth where the walk is shared out.
fn deep_tree(r: &Path) {
    write(r, ".gitignore", "*.log\n");
    write(r, "top.py", "");
    for a in 0..6 {
        write(r, &format!("t/a{a}/x.py"), "");
        write(r, &format!("t/a{a}/x.log"), "");
        for b in 0..8 {
            write(r, &format!("t/a{a}/b{b}/c/d.py"), "");
            write(r, &format!("t/a{a}/b{b}/e.py"), "");
        }
    }
    write(r, "t/a1/.gitignore", "b2/\n*.tmp\n!keep.tmp\n");
    write(r, "t/a1/b2/gone.py", "");
    write(r, "t/a1/b3/c/drop.tmp", "");
    write(r, "t/a1/b3/c/keep.tmp", "");
    write(r, "t/a3/b5/c/.gitignore", "*\n");
    let nested = r.join("t/a2/b3/nested");
    git_init(&nested);
    write(&nested, "n.py", "");
    let sub = r.join("t/a4/b1/sub");
    git_init(&sub);
    write(&sub, "s.py", "");
    git(&sub, &["add", "."]);
    git(&sub, &["commit", "-qm", "sub"]);
    git(r, &["add", "t/a4", "top.py"]);
    git(r, &["add", "-f", "t/a1/b2/gone.py"]);
}

#[test]
fn a_deep_tree_below_one_folder_matches_git() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    deep_tree(&repo);
    assert_matches_git(&repo);
    assert_matches_git(&repo.join("t"));
    assert_matches_git(&repo.join("t/a1"));
    let set = ship_set(&repo);
    for path in [
        "t/a1/b2/gone.py",
        "t/a1/b3/c/keep.tmp",
        "t/a2/b3/nested/n.py",
        "t/a4/b1/sub/s.py",
        "t/a5/b7/c/d.py",
    ] {
        assert!(set.contains(path), "{path} should be shipped: {set:?}");
    }
    for path in ["t/a0/x.log", "t/a1/b3/c/drop.tmp", "t/a3/b5/c/d.py"] {
        assert!(!set.contains(path), "{path} should not be shipped");
    }
    // `.gitignore`, `top.py` and 6 × (1 + 8 × 2); less `t/a3/b5/c/d.py` and the two files of
    // the ignored `t/a1/b2/`; plus `t/a1/.gitignore` and the five files named above.
    assert_eq!(set.len(), 106, "{set:?}");
}

/// A narrow, deep tree: 31 folders side by side, each a chain 60 folders deep with a file at
/// every level, so the walk's breadth-first start never gathers enough folders to share out
/// and stops at its bound on folders held open (it would otherwise hold all 1,860, past a
/// usual limit of 1,024 descriptors; this machine's limit is higher, so this test checks
/// what is listed, not the count). Every file is listed, as git lists it.
#[test]
fn a_narrow_deep_tree_is_walked_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    for column in 0..31 {
        let mut path = format!("c{column}");
        for depth in 0..60 {
            path.push_str(&format!("/d{depth}"));
            write(&repo, &format!("{path}/f.py"), "");
        }
    }
    assert_matches_git(&repo);
    assert_eq!(ship_set(&repo).len(), 31 * 60);
}
