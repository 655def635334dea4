//! Submodules and repositories inside the repository: each ships its own set, and is
//! named; a `.git` that is no repository is walked past.

use super::check;
use crate::support::{assert_matches_git, git, git_init, write};

#[test]
fn submodules_ship_their_own_set() {
    check(
        |r| {
            let sub = r.join("vendor/lib");
            git_init(&sub);
            write(&sub, ".gitignore", "*.o\n");
            write(&sub, "lib.py", "");
            write(&sub, "lib.o", "");
            git(&sub, &["add", "."]);
            git(&sub, &["commit", "-qm", "lib"]);
            write(&sub, "untracked.py", "");
            git(r, &["add", "vendor/lib"]);
            write(r, "a.py", "");
        },
        "",
        &[
            "a.py",
            "vendor/lib/.gitignore",
            "vendor/lib/lib.py",
            "vendor/lib/untracked.py",
        ],
    );
}

#[test]
fn nested_repositories_ship_their_own_set() {
    check(
        |r| {
            let nested = r.join("other");
            git_init(&nested);
            write(&nested, "x.py", "");
            write(&nested, ".gitignore", "y.py\n");
            write(&nested, "y.py", "");
            write(r, "a.py", "");
        },
        "",
        &["a.py", "other/.gitignore", "other/x.py"],
    );
}

#[test]
fn a_subdirectory_inside_a_submodule_ships_the_submodule_part() {
    check(
        |r| {
            let sub = r.join("lib");
            git_init(&sub);
            write(&sub, "pkg/m.py", "");
            write(&sub, "other.py", "");
            git(&sub, &["add", "."]);
            git(&sub, &["commit", "-qm", "lib"]);
            git(r, &["add", "lib"]);
        },
        "lib/pkg",
        &["m.py"],
    );
}

#[test]
fn a_folder_with_tracked_files_and_a_dot_git_inside_is_walked_not_nested() {
    check(
        |r| {
            write(r, "pkg/a.py", "");
            git(r, &["add", "pkg/a.py"]);
            git_init(&r.join("pkg"));
            write(r, "pkg/b.py", "");
        },
        "",
        &["pkg/a.py", "pkg/b.py"],
    );
}

#[test]
fn a_dot_git_that_is_no_repository_is_skipped_and_its_folder_walked() {
    check(
        |r| {
            write(r, "x/.git/junk", "");
            write(r, "x/a.py", "");
            write(r, "y/.git", "not a gitfile\n");
            write(r, "y/b.py", "");
        },
        "",
        &["x/a.py", "y/b.py"],
    );
}

/// A registered submodule and a nested repository are shipped alike, each with its own set
/// (its untracked files included, its own ignore rules applied), and each named in a warning.
#[test]
fn submodules_and_nested_repositories_are_shipped_alike_and_both_named() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("repo");
    git_init(&r);
    for (name, register) in [("vendor/sub", true), ("vendor/nested", false)] {
        let inner = r.join(name);
        git_init(&inner);
        write(&inner, ".gitignore", "*.o\n");
        write(&inner, "lib.py", "");
        write(&inner, "lib.o", "");
        git(&inner, &["add", "."]);
        git(&inner, &["commit", "-qm", "lib"]);
        write(&inner, "untracked.py", "");
        if register {
            git(&r, &["add", name]);
        }
    }
    write(&r, "a.py", "");
    assert_matches_git(&r);
    let shipment = div_ship::collect(&r, &div_ship::ShipOptions::default()).unwrap();
    let paths: Vec<&str> = shipment
        .manifest
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "a.py",
            "vendor/nested/.gitignore",
            "vendor/nested/lib.py",
            "vendor/nested/untracked.py",
            "vendor/sub/.gitignore",
            "vendor/sub/lib.py",
            "vendor/sub/untracked.py",
        ]
    );
    let mut warnings = shipment.warnings.clone();
    warnings.sort();
    insta::assert_snapshot!(warnings.join("\n"), @r"
    `vendor/nested` is a git repository inside this one (not a submodule): shipping what it lists itself, its untracked files included
    `vendor/sub` is a submodule: shipping what it lists itself, its untracked files included
    ");
}
