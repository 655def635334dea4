//! The rules on small crates written for each test, and on this workspace.

use super::*;
use std::collections::BTreeSet;

/// A crate written into a temp dir: `(path under src/, text)`.
fn krate(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("crates/demo");
    for (path, text) in files {
        let p = dir.join("src").join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("dirs");
        std::fs::write(p, text).expect("write");
    }
    std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"demo\"\n").expect("write");
    (tmp, dir)
}

fn findings(files: &[(&str, &str)]) -> Vec<String> {
    let (tmp, dir) = krate(files);
    check_crate(tmp.path(), &dir)
        .expect("checked")
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_circle_through_use_and_super_is_found() {
    let found = findings(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\npub(crate) struct A(B);\n"),
        (
            "b.rs",
            "pub(crate) struct B;\nfn f() { let _ = crate::a::A; }\n",
        ),
    ]);
    assert_eq!(
        found,
        vec!["demo: a circle of files: src/a.rs → src/b.rs → src/a.rs"]
    );
}

#[test]
fn a_child_that_names_its_parent_by_super_closes_a_circle() {
    let found = findings(&[
        ("lib.rs", "mod a;\n"),
        (
            "a.rs",
            "mod child;\npub(crate) struct A;\nfn f() { child::g(); }\n",
        ),
        ("a/child.rs", "pub(crate) fn g() { let _ = super::A; }\n"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("src/a.rs → src/a/child.rs"), "{found:?}");
}

#[test]
fn a_facade_s_re_export_is_followed_and_not_a_dependency_of_its_own() {
    // lib.rs re-exports b's type; a names it through the facade; b names a: no circle,
    // for the facade only points at b.
    let found = findings(&[
        ("lib.rs", "mod a;\nmod b;\npub use b::B;\n"),
        (
            "a.rs",
            "pub(crate) struct A;\nfn f() -> crate::B { crate::B }\n",
        ),
        ("b.rs", "pub struct B;\nfn g() { let _ = crate::a::A; }\n"),
    ]);
    // a → b (through the facade) and b → a: a circle, found through the re-export.
    assert_eq!(
        found,
        vec!["demo: a circle of files: src/a.rs → src/b.rs → src/a.rs"]
    );
    let found = findings(&[
        ("lib.rs", "mod a;\nmod b;\npub use b::B;\n"),
        ("a.rs", "pub(crate) struct A;\n"),
        ("b.rs", "pub struct B;\nfn g() { let _ = crate::a::A; }\n"),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn a_visibility_is_no_dependency() {
    let found = findings(&[
        ("lib.rs", "mod a;\n"),
        ("a.rs", "mod child;\npub(crate) fn f() { child::g(); }\n"),
        (
            "a/child.rs",
            "pub(super) fn g() {}\npub(in crate::a) fn h() {}\n",
        ),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn test_code_is_no_dependency() {
    let found = findings(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub(crate) struct A;\n#[cfg(test)]\nmod tests { use crate::b::B; }\n",
        ),
        (
            "b.rs",
            "pub(crate) struct B;\nfn g() { let _ = crate::a::A; }\n",
        ),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn long_functions_files_string_errors_and_http_errors_are_found() {
    let body = "    let _x = 1;\n".repeat(MAX_FN_LINES - 2);
    // `at_the_limit` is MAX_FN_LINES lines, `over` one more.
    let long_fn = format!("fn at_the_limit() {{\n{body}}}\nfn over() {{\n{body}\n}}\n");
    let found = findings(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", &long_fn),
        (
            "b.rs",
            "pub fn f() -> Result<(), String> { Ok(()) }\n#[cfg(test)]\nfn t() -> Result<(), String> { Ok(()) }\n",
        ),
    ]);
    assert_eq!(
        found,
        vec![
            format!(
                "crates/demo/src/a.rs:{}: `over` is {} lines (at most {MAX_FN_LINES})",
                MAX_FN_LINES + 1,
                MAX_FN_LINES + 1
            ),
            "crates/demo/src/b.rs:1: `f` returns `Result<_, String>`".to_owned(),
        ]
    );
    let many = "// a line\n".repeat(MAX_FILE_LINES + 1);
    let found = findings(&[("lib.rs", &many)]);
    assert_eq!(
        found,
        vec![format!(
            "crates/demo/src/lib.rs: {} lines (over {MAX_FILE_LINES}) and no `//! {LONG_REASON}` at its top",
            MAX_FILE_LINES + 1
        )]
    );
    let why = format!("//! The demo.\n//! {LONG_REASON} one subject.\n{many}");
    assert!(findings(&[("lib.rs", &why)]).is_empty());
    for said in [
        "Why over 700 lines: tests.",
        "Why one long file: one model.",
    ] {
        let why = format!("//! The demo.\n//!\n//! {said}\n{many}");
        assert!(findings(&[("lib.rs", &why)]).is_empty(), "{said}");
    }
    let not_why = format!("//! The demo.\n//! Why vendored: no reason of length.\n{many}");
    assert_eq!(findings(&[("lib.rs", &not_why)]).len(), 1);
}

/// The rules hold of this workspace, but for the findings `xtask/arch-known.txt` lists
/// (each one a line, as `cargo xtask arch` prints it): CI fails when a finding is new, and
/// when a listed one is gone (take it off the list), so the list only shrinks.
#[test]
fn the_workspace_keeps_its_shape() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace");
    let found: BTreeSet<String> = check_workspace(root)
        .expect("checked")
        .iter()
        .map(ToString::to_string)
        .collect();
    let known: BTreeSet<String> = std::fs::read_to_string(root.join(KNOWN))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "new findings (mend them):\n{}\n\nlisted in {KNOWN} but gone (take them off):\n{}",
        new.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        gone.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    );
}
