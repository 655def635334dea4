//! Ignore files, `info/exclude` and `core.excludesFile`, read as git reads them.

use std::fs;
use std::path::Path;

use super::check;
use crate::support::{git, git_init, write};

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
