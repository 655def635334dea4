//! The pure crates stay pure: `div-spec` and `div-pricing` never depend, even indirectly, on
//! an async runtime, an HTTP stack, git or a database. `cargo deny` checks the same with each
//! crate's own `deny.toml` (`cargo xtask ci`); this test needs nothing but cargo.

#![allow(clippy::disallowed_methods)]

use std::process::Command;

const BANNED: &[&str] = &[
    "tokio",
    "hyper",
    "gix",
    "rusqlite",
    "reqwest",
    "async-trait",
];

fn normal_dependencies(krate: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            krate,
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn pure_crates_stay_pure() {
    for krate in ["div-spec", "div-pricing"] {
        let deps = normal_dependencies(krate);
        assert!(
            deps.iter().any(|d| d == krate),
            "{krate} missing from its own tree: {deps:?}"
        );
        for banned in BANNED {
            assert!(
                !deps.iter().any(|d| d == banned),
                "{krate} depends on {banned}: the pure crates do no I/O"
            );
        }
    }
}

#[test]
fn the_check_sees_a_banned_crate() {
    // The same query on an I/O crate finds what the pure ones must not have, so the test
    // above cannot pass by reading nothing.
    let deps = normal_dependencies("div-server");
    assert!(deps.iter().any(|d| d == "tokio"), "{deps:?}");
    assert!(deps.iter().any(|d| d == "rusqlite"), "{deps:?}");
}
