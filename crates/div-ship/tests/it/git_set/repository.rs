//! Which repository, and which part of it: a subdirectory, `GIT_DIR` and `GIT_WORK_TREE`,
//! a bare repository; one that is empty or another user's is refused.

use std::fs;
use std::path::Path;

use super::check;
use crate::support::{git, git_env, git_init, git_set_env, ship_set, ship_set_with, write};

#[test]
fn a_subdirectory_ships_its_subtree_relative_to_it() {
    check(
        |r| {
            write(r, ".gitignore", "*.log\n");
            write(r, "top.py", "");
            write(r, "exp/train.py", "");
            write(r, "exp/run.log", "");
            write(r, "exp/deep/x.py", "");
            write(r, "expanded/no.py", "");
            git(r, &["add", "exp/deep/x.py"]);
        },
        "exp",
        &["deep/x.py", "train.py"],
    );
}

#[test]
fn a_subdirectory_with_glob_characters_is_taken_literally() {
    check(
        |r| {
            write(r, "[a]/x.py", "");
            write(r, "a/y.py", "");
        },
        "[a]",
        &["x.py"],
    );
}

#[test]
fn an_empty_repository_is_refused_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("repo");
    git_init(&r);
    write(&r, ".git/info/exclude", "*\n");
    write(&r, "ignored.bin", "");
    let err = div_ship::collect(&r, &div_ship::ShipOptions::default()).unwrap_err();
    let shown = err.to_string().replace(r.to_str().unwrap(), "DIR");
    insta::assert_snapshot!(shown, @"nothing to ship in `DIR`");
    insta::assert_snapshot!(err.hint().unwrap(), @"run it where the code is, or pass `--no-upload` to run the image as it is");
}

#[test]
fn a_repository_owned_by_another_user_is_refused_like_git_does() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("repo");
    git_init(&r);
    write(&r, "a.py", "");
    let chown = std::process::Command::new("chown")
        .args(["-R", "12345:12345"])
        .arg(&r)
        .status()
        .unwrap();
    if !chown.success() {
        // Not root here: the other user cannot be made; what we can check is that our own
        // repository is not refused.
        assert_eq!(ship_set(&r).len(), 1);
        return;
    }
    let git_says = std::process::Command::new("git")
        .args(["ls-files"])
        .current_dir(&r)
        .output()
        .unwrap();
    assert!(
        !git_says.status.success(),
        "git refuses a repository owned by someone else"
    );
    let err = div_ship::collect(&r, &div_ship::ShipOptions::default()).unwrap_err();
    let shown = format!("{err}\nhint: {}", err.hint().unwrap()).replace(r.to_str().unwrap(), "DIR");
    insta::assert_snapshot!(shown, @r"
    repository `DIR` is owned by another user
    hint: git refuses it too; if you trust it, run `git config --global --add safe.directory DIR`
    ");
}

/// A bare repository and a work tree elsewhere, as `GIT_DIR=… GIT_WORK_TREE=…` name them.
fn bare_and_work_tree(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let bare = tmp.join("code.git");
    let work = tmp.join("work");
    fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare"]);
    write(&bare, "info/exclude", "secret.txt\n");
    write(&work, ".gitignore", "*.log\nbuild/\n");
    write(&work, "train.py", "");
    write(&work, "run.log", "");
    write(&work, "secret.txt", "");
    write(&work, "build/out.bin", "");
    write(&work, "exp/a.py", "");
    write(&work, "exp/b.log", "");
    write(&work, "exp/forced.log", "");
    let env = [
        ("GIT_DIR", bare.as_path()),
        ("GIT_WORK_TREE", work.as_path()),
    ];
    git_env(&work, &env, &["add", ".gitignore", "train.py"]);
    git_env(&work, &env, &["add", "-f", "exp/forced.log"]);
    (bare, work)
}

/// `GIT_DIR` and `GIT_WORK_TREE`: the work tree of a bare repository is walked with its
/// ignore rules (`.gitignore`, the bare repository's `info/exclude`) and its index, from the
/// top or a subfolder, as git lists it with the same variables.
#[test]
fn a_work_tree_of_a_bare_repository_ships_what_git_lists_with_git_dir_and_git_work_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let (bare, work) = bare_and_work_tree(tmp.path());
    let options = div_ship::ShipOptions {
        git_dir: Some(bare.clone()),
        work_tree: Some(work.clone()),
        ..Default::default()
    };
    let env = [
        ("GIT_DIR", bare.as_path()),
        ("GIT_WORK_TREE", work.as_path()),
    ];
    let got = ship_set_with(&work, &options);
    assert_eq!(got, git_set_env(&work, &env));
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        [".gitignore", "exp/a.py", "exp/forced.log", "train.py"]
    );
    let sub = work.join("exp");
    let got = ship_set_with(&sub, &options);
    assert_eq!(got, git_set_env(&sub, &env));
    assert_eq!(got.into_iter().collect::<Vec<_>>(), ["a.py", "forced.log"]);
}

/// `GIT_DIR` alone, with no `core.worktree`: git takes its current directory as the top of
/// the work tree, and so does div with the shipped folder.
#[test]
fn git_dir_alone_makes_the_shipped_folder_the_top_of_the_work_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("repo");
    git_init(&r);
    write(&r, ".gitignore", "*.log\n");
    write(&r, "a.py", "");
    write(&r, "sub/.gitignore", "*.tmp\n");
    write(&r, "sub/b.py", "");
    write(&r, "sub/c.log", "");
    write(&r, "sub/d.tmp", "");
    git(&r, &["add", ".gitignore", "a.py"]);
    let git_dir = r.join(".git");
    let sub = r.join("sub");
    let options = div_ship::ShipOptions {
        git_dir: Some(git_dir.clone()),
        ..Default::default()
    };
    let got = ship_set_with(&sub, &options);
    assert_eq!(got, git_set_env(&sub, &[("GIT_DIR", git_dir.as_path())]));
    // `sub` is the top: its `.gitignore` is the root one, the repository's own is not read.
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        [".gitignore", "b.py", "c.log"]
    );
}

/// A bare repository named without a work tree: git refuses (`must be run in a work tree`),
/// and so does div, saying what would be right.
#[test]
fn a_bare_repository_without_a_work_tree_is_refused_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let (bare, work) = bare_and_work_tree(tmp.path());
    let options = div_ship::ShipOptions {
        git_dir: Some(bare.clone()),
        ..Default::default()
    };
    let err = div_ship::collect(&work, &options).unwrap_err();
    let shown = format!("{err}\nhint: {}", err.hint().unwrap())
        .replace(tmp.path().to_str().unwrap(), "TMP");
    insta::assert_snapshot!(shown, @r"
    repository `TMP/code.git` has no work tree
    hint: set `GIT_WORK_TREE` to the top of the work tree to ship (git needs it too), or run where the code is checked out
    ");
}

/// A folder outside the work tree `GIT_WORK_TREE` names is refused: its files are not in it.
#[test]
fn a_folder_outside_the_named_work_tree_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (bare, work) = bare_and_work_tree(tmp.path());
    let elsewhere = tmp.path().join("elsewhere");
    write(&elsewhere, "x.py", "");
    let options = div_ship::ShipOptions {
        git_dir: Some(bare),
        work_tree: Some(work),
        ..Default::default()
    };
    let err = div_ship::collect(&elsewhere, &options).unwrap_err();
    let tmp_str = tmp.path().canonicalize().unwrap();
    let shown =
        format!("{err}\nhint: {}", err.hint().unwrap()).replace(tmp_str.to_str().unwrap(), "TMP");
    insta::assert_snapshot!(shown, @r"
    `TMP/elsewhere` is outside the work tree `TMP/work`
    hint: run from `TMP/work` or a folder inside it, or unset `GIT_WORK_TREE` and `GIT_DIR`
    ");
}
