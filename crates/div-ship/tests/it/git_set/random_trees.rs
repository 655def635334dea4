//! Random trees, ignore files and index states: div-ship ships exactly git's set.

use std::fs;

use proptest::prelude::*;

use crate::support::{git, git_init, ship_set, write};

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
