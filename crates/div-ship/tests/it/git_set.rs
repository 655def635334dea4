//! The shipped set inside a repository is what `git ls-files -co --exclude-standard` prints.

use std::fs;
use std::path::Path;

use proptest::prelude::*;

use crate::support::{
    assert_matches_git, git, git_env, git_init, git_set_env, ship_set, ship_set_with, symlink,
    write,
};

/// Builds a repository with `setup`, checks div-ship against git from `run_in` (relative to the
/// repository), and that the set is `expect`.
fn check(setup: impl FnOnce(&Path), run_in: &str, expect: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    setup(&repo);
    let dir = repo.join(run_in);
    assert_matches_git(&dir);
    let got: Vec<String> = ship_set(&dir).into_iter().collect();
    assert_eq!(got, expect, "from `{run_in}`");
}

#[test]
fn nested_gitignore_with_negation() {
    check(
        |r| {
            write(r, ".gitignore", "*.log\nbuild/\n");
            write(r, "a.log", "");
            write(r, "train.py", "");
            write(r, "build/out.bin", "");
            write(r, "logs/.gitignore", "!keep.log\n");
            write(r, "logs/keep.log", "");
            write(r, "logs/drop.log", "");
        },
        "",
        &[".gitignore", "logs/.gitignore", "logs/keep.log", "train.py"],
    );
}

#[test]
fn info_exclude_is_honoured() {
    check(
        |r| {
            write(r, ".git/info/exclude", "secret.txt\n");
            write(r, "secret.txt", "");
            write(r, "a.py", "");
        },
        "",
        &["a.py"],
    );
}

#[test]
fn core_excludes_file_is_honoured() {
    check(
        |r| {
            let excludes = r.parent().unwrap().join("global-ignore");
            fs::write(&excludes, "*.ckpt\n").unwrap();
            git(
                r,
                &["config", "core.excludesFile", excludes.to_str().unwrap()],
            );
            write(r, "model.ckpt", "");
            write(r, "a.py", "");
        },
        "",
        &["a.py"],
    );
}

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
fn tracked_wins_over_ignored() {
    check(
        |r| {
            write(r, ".gitignore", "*.csv\n");
            write(r, "small.csv", "");
            write(r, "big.csv", "");
            git(r, &["add", "-f", "small.csv"]);
        },
        "",
        &[".gitignore", "small.csv"],
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
fn an_ignored_folder_ships_only_what_is_tracked_in_it() {
    let setup = |r: &Path| {
        write(r, ".gitignore", "build/\n");
        write(r, "build/keep.txt", "");
        write(r, "build/new.txt", "");
        write(r, "build/sub/deep.txt", "");
        write(r, "build/sub/.gitignore", "!deep.txt\n");
        git(r, &["add", "-f", "build/keep.txt"]);
    };
    check(setup, "", &[".gitignore", "build/keep.txt"]);
    check(setup, "build", &["keep.txt"]);
    check(setup, "build/sub", &[]);
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

/// Names the random trees are made of: a few, so that ignore rules and paths collide often.
const NAMES: &[&str] = &["a", "b.log", "c.py", "d d", "é", "keep.log"];
const DIRS: &[&str] = &["", "x/", "x/y/", "z/", "x/z/"];
const RULES: &[&str] = &[
    "*.log",
    "!keep.log",
    "b.log",
    "/a",
    "x/",
    "y",
    "!c.py",
    "**/z",
    "z/*",
    "d*",
    "!x/y/",
];

prop_compose! {
    fn tree()(
        files in prop::collection::btree_set((0..DIRS.len(), 0..NAMES.len()), 1..14),
        ignores in prop::collection::vec((0..DIRS.len(), prop::collection::vec(0..RULES.len(), 1..4)), 0..4),
        exclude in prop::collection::vec(0..RULES.len(), 0..2),
        added in prop::collection::vec(any::<bool>(), 14),
        deleted in prop::collection::vec(any::<bool>(), 14),
        run_in in 0..DIRS.len(),
    ) -> (Vec<String>, Vec<(String, String)>, String, Vec<bool>, Vec<bool>, String) {
        let files = files.into_iter().map(|(d, n)| format!("{}{}", DIRS[d], NAMES[n])).collect();
        let rules = |ids: &[usize]| ids.iter().map(|&i| format!("{}\n", RULES[i])).collect::<String>();
        let ignores = ignores.iter().map(|(d, ids)| (format!("{}.gitignore", DIRS[*d]), rules(ids))).collect();
        (files, ignores, rules(&exclude), added, deleted, DIRS[run_in].trim_end_matches('/').to_owned())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// For random trees, ignore files, `info/exclude` and index states (force-added files,
    /// some then deleted), run from the top or a subdirectory, div-ship ships exactly git's set.
    #[test]
    fn proptest_matches_git((files, ignores, exclude, added, deleted, run_in) in tree()) {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path().join("repo");
        git_init(&r);
        for file in &files {
            // A file and a folder of the same name cannot both exist: keep the first.
            if r.join(file).exists() || fs::create_dir_all(r.join(file).parent().unwrap()).is_err() {
                continue;
            }
            let _ = fs::write(r.join(file), file);
        }
        for (path, rules) in &ignores {
            if fs::create_dir_all(r.join(path).parent().unwrap()).is_ok() {
                let _ = fs::write(r.join(path), rules);
            }
        }
        write(&r, ".git/info/exclude", &exclude);
        for (i, file) in files.iter().enumerate() {
            if added[i] && r.join(file).is_file() {
                git(&r, &["add", "-f", "--", file]);
            }
        }
        for (i, file) in files.iter().enumerate() {
            if added[i] && deleted[i] {
                let _ = fs::remove_file(r.join(file));
            }
        }
        let dir = r.join(&run_in);
        if dir.is_dir() {
            prop_assert_eq!(ship_set(&dir), crate::support::git_set(&dir));
        }
        prop_assert_eq!(ship_set(&r), crate::support::git_set(&r));
    }
}

// Exactly what git lists: the cases issue 15 found where div and git differed.

/// git reads a relative `core.excludesFile` from the top of the work tree (it has moved there
/// by the time it reads it), wherever it was started; so does div, not from its own directory.
#[test]
fn a_relative_core_excludes_file_is_read_from_the_top_of_the_work_tree() {
    let setup = |r: &Path| {
        git(r, &["config", "core.excludesFile", "my-ignore"]);
        write(r, "my-ignore", "*.ckpt\n");
        // The same name in the subfolder: git does not read this one.
        write(r, "sub/my-ignore", "*.py\n");
        write(r, "top.ckpt", "");
        write(r, "sub/a.py", "");
        write(r, "sub/m.ckpt", "");
    };
    check(setup, "sub", &["a.py", "my-ignore"]);
    check(setup, "", &["my-ignore", "sub/a.py", "sub/my-ignore"]);
}

/// The same from a submodule: its own relative `core.excludesFile`, from its own top.
#[test]
fn a_submodules_relative_core_excludes_file_is_read_from_its_top() {
    check(
        |r| {
            let sub = r.join("lib");
            git_init(&sub);
            write(&sub, "lib.py", "");
            git(&sub, &["add", "."]);
            git(&sub, &["commit", "-qm", "lib"]);
            git(&sub, &["config", "core.excludesFile", "ignores"]);
            write(&sub, "ignores", "*.tmp\n");
            write(&sub, "scratch.tmp", "");
            git(r, &["add", "lib"]);
        },
        "",
        &["lib/ignores", "lib/lib.py"],
    );
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

/// git appends a newline to every ignore file it reads, then drops one CR before each
/// newline: a last line ending in a lone CR, no LF, is the pattern without its CR. (A CR
/// before a CRLF stays, as in git.)
#[test]
fn an_ignore_file_whose_last_line_ends_in_a_lone_cr_reads_as_git_reads_it() {
    check(
        |r| {
            fs::write(r.join(".gitignore"), "b.txt\r\nc.txt\r\r\na.txt\r").unwrap();
            write(r, ".git/info/exclude", "*.tmp \r");
            write(r, "sub/.gitignore", "d.txt\r");
            for name in [
                "a.txt",
                "b.txt",
                "c.txt",
                "keep.py",
                "x.tmp",
                "sub/d.txt",
                "sub/e.txt",
            ] {
                write(r, name, "");
            }
            write(r, "c.txt\r", "");
        },
        "",
        &[
            ".gitignore",
            "c.txt",
            "keep.py",
            "sub/.gitignore",
            "sub/e.txt",
        ],
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
