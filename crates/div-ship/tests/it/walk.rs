//! Outside a repository: everything but the fixed list of names.

use std::path::Path;

use crate::support::{ship_set, symlink, write};

/// Creates `path` (a file, or a folder holding `f` when it ends with `/`) beside `keep.py`
/// in a fresh folder, and checks whether it is shipped.
fn check(path: &str, shipped: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "keep.py", "");
    let file = match path.strip_suffix('/') {
        Some(folder) => format!("{folder}/f"),
        None => path.to_owned(),
    };
    write(dir, &file, "x");
    let set = ship_set(dir);
    assert!(set.contains("keep.py"));
    assert_eq!(set.contains(&file), shipped, "`{path}` shipped: {set:?}");
}

#[test]
fn skipped_names() {
    check(".git/", false);
    check("node_modules/", false);
    check("__pycache__/", false);
    check(".venv/", false);
    check("venv/", false);
    check(".mypy_cache/", false);
    check(".pytest_cache/", false);
    check(".ruff_cache/", false);
    check(".tox/", false);
    check(".nox/", false);
    check(".ipynb_checkpoints/", false);
    check(".hypothesis/", false);
    check(".pytype/", false);
    check("dist/", false);
    check(".next/", false);
    check(".DS_Store", false);
    check("m.pyc", false);
    check("pkg/m.pyc", false);
    check(".env", false);
    check(".env.local", false);
    check(".envrc", false);
    check("deep/er/node_modules/", false);
    check("src/__pycache__/", false);
}

#[test]
fn everything_else_is_shipped() {
    check("data/big.bin", true);
    check(".gitignore", true);
    check(".config/x.toml", true);
    check("env/", true);
    check("my.env", true);
    check("distribution/", true);
    check("m.py", true);
    check("m.pyx", true);
    check("build/", true);
}

#[test]
fn gitignore_is_not_honoured_outside_a_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, ".gitignore", "*.bin\n");
    write(dir, "data.bin", "");
    write(dir, ".ignore", "*.py\n");
    write(dir, "a.py", "");
    let set: Vec<String> = ship_set(dir).into_iter().collect();
    assert_eq!(set, [".gitignore", ".ignore", "a.py", "data.bin"]);
}

#[test]
fn links_are_not_followed_out() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    write(&outside, "secret.txt", "");
    let dir = tmp.path().join("code");
    write(&dir, "a.py", "");
    symlink(&dir, "data", outside.to_str().unwrap());
    symlink(&dir, "rel", "../outside");
    symlink(&dir, "ok", "a.py");
    let shipment = div_ship::collect(&dir, &div_ship::ShipOptions::default()).unwrap();
    let paths: Vec<&str> = shipment
        .manifest
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(paths, ["a.py", "ok"]);
    assert_eq!(shipment.warnings.len(), 2, "{:?}", shipment.warnings);
    assert_eq!(shipment.source, div_ship::Source::Walk);
}

#[test]
fn an_empty_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "node_modules/x.js", "");
    let err = div_ship::collect(tmp.path(), &div_ship::ShipOptions::default()).unwrap_err();
    assert!(
        matches!(err, div_ship::ShipError::NothingToShip { .. }),
        "{err}"
    );
}

#[test]
fn not_a_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "f", "");
    let err =
        div_ship::collect(&tmp.path().join("f"), &div_ship::ShipOptions::default()).unwrap_err();
    assert!(
        matches!(err, div_ship::ShipError::NotADirectory { .. }),
        "{err}"
    );
    let err = div_ship::collect(
        Path::new("/nonexistent/div"),
        &div_ship::ShipOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, div_ship::ShipError::Io { .. }), "{err}");
}

/// Outside a repository too, a name that is not UTF-8 is shipped, escaped in the manifest.
#[test]
fn a_name_that_is_not_utf8_is_shipped() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "keep.py", "");
    std::fs::write(dir.join(OsStr::from_bytes(b"caf\xe9.txt")), "x").unwrap();
    let set: Vec<String> = ship_set(dir).into_iter().collect();
    assert_eq!(set, ["caf\0e9.txt", "keep.py"]);
}
