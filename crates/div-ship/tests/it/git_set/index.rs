//! What the index tracks, against the work tree: deleted, untracked, conflicted, sparse, a
//! file become a folder or below a link.

use std::fs;
use std::path::Path;

use super::check;
use crate::support::{assert_matches_git, git, git_init, ship_set, symlink, write};

#[test]
fn tracked_files_deleted_from_the_work_tree_are_not_shipped() {
    check(
        |r| {
            write(r, "a.py", "");
            write(r, "gone.py", "");
            git(r, &["add", "."]);
            fs::remove_file(r.join("gone.py")).unwrap();
        },
        "",
        &["a.py"],
    );
}

#[test]
fn untracked_and_tracked_together() {
    check(
        |r| {
            write(r, "tracked.py", "");
            git(r, &["add", "tracked.py"]);
            write(r, "new.py", "");
            write(r, "deep/er/new.py", "");
        },
        "",
        &["deep/er/new.py", "new.py", "tracked.py"],
    );
}

#[test]
fn empty_folders_are_not_shipped() {
    check(
        |r| {
            fs::create_dir_all(r.join("empty/deeper")).unwrap();
            write(r, "a.py", "");
        },
        "",
        &["a.py"],
    );
}

#[test]
fn conflicted_paths_are_listed_once() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    git_init(r);
    write(r, "f.txt", "base\n");
    git(r, &["add", "."]);
    git(r, &["commit", "-qm", "base"]);
    git(r, &["checkout", "-qb", "other"]);
    write(r, "f.txt", "other\n");
    git(r, &["commit", "-qam", "other"]);
    git(r, &["checkout", "-q", "main"]);
    write(r, "f.txt", "main\n");
    git(r, &["commit", "-qam", "main"]);
    let merge = std::process::Command::new("git")
        .args(["merge", "-q", "other"])
        .current_dir(r)
        .output()
        .unwrap();
    assert!(!merge.status.success(), "the merge conflicts");
    assert_eq!(ship_set(r).into_iter().collect::<Vec<_>>(), ["f.txt"]);
    assert_matches_git(r);
}

#[test]
fn a_tracked_file_that_became_a_folder_ships_the_folder() {
    check(
        |r| {
            write(r, "data", "");
            git(r, &["add", "data"]);
            fs::remove_file(r.join("data")).unwrap();
            write(r, "data/part.csv", "");
        },
        "",
        &["data/part.csv"],
    );
}

/// A sparse index (`index.sparse`, cone mode): folders outside the cone are one entry in the
/// index. git expands them before listing; div does too, and ships what is on disk of git's
/// list, from the top, from a folder in the cone, and with untracked files in and out of it.
#[test]
fn a_sparse_index_is_expanded_and_ships_what_git_lists() {
    let setup = |r: &Path| {
        write(r, ".gitignore", "*.log\n");
        write(r, "top.py", "");
        write(r, "in/a.py", "");
        write(r, "in/deep/b.py", "");
        write(r, "out/c.py", "");
        write(r, "out/deep/d.py", "");
        write(r, "other/e.py", "");
        git(r, &["add", "."]);
        git(r, &["commit", "-qm", "all"]);
        git(r, &["sparse-checkout", "init", "--cone", "--sparse-index"]);
        git(r, &["sparse-checkout", "set", "in"]);
        write(r, "in/new.py", "");
        write(r, "in/run.log", "");
        write(r, "loose.py", "");
        // Written by hand into a folder outside the cone.
        write(r, "out/by-hand.py", "");
    };
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("repo");
    git_init(&r);
    setup(&r);
    let index = fs::read(r.join(".git/index")).unwrap();
    assert!(
        index.windows(4).any(|w| w == b"sdir"),
        "git wrote a sparse index"
    );
    assert!(!r.join("out/c.py").exists(), "`out` is outside the cone");
    check(
        setup,
        "",
        &[
            ".gitignore",
            "in/a.py",
            "in/deep/b.py",
            "in/new.py",
            "loose.py",
            "out/by-hand.py",
            "top.py",
        ],
    );
    check(setup, "in", &["a.py", "deep/b.py", "new.py"]);
}

/// A tracked file whose folder was replaced by a link to another folder holding a file of the
/// same name: git does not look through the link (`git status` says the file was deleted and
/// the link is new), and neither does div, which ships the link and not the file through it.
#[test]
fn a_tracked_file_below_a_folder_now_a_link_is_not_looked_at_through_the_link() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    write(&repo, "a/f.py", "old");
    write(&repo, "keep/f.py", "other");
    git(&repo, &["add", "."]);
    fs::remove_dir_all(repo.join("a")).unwrap();
    symlink(&repo, "a", "keep");
    let status = String::from_utf8(git(&repo, &["status", "--porcelain", "-uall"])).unwrap();
    assert!(status.contains("AD a/f.py"), "git: {status}");
    assert!(status.contains("?? a\n"), "git: {status}");
    let got: Vec<String> = ship_set(&repo).into_iter().collect();
    assert_eq!(got, ["a", "keep/f.py"]);
}
