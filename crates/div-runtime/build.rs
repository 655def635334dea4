//! Builds `div-init` (crates/div-init/src/main.rs: the first process of every run's sandbox)
//! as one statically linked program, which div-server carries in its own binary and lays
//! into the state directory (`init.rs`). Static, because the same file runs inside any image,
//! whatever C library it has or lacks. It is compiled here, with the same rustc, rather than
//! as a cargo binary, because cargo cannot link one binary of a workspace statically and the
//! others not.

// A build script learns where to build from cargo's variables, which only it may read.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = PathBuf::from("../div-init/src/main.rs");
    println!("cargo::rerun-if-changed={}", source.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let binary = out.join("div-init");
    let output = Command::new(&rustc)
        .args([
            "--edition",
            "2024",
            "--crate-name",
            "div_init",
            "--crate-type",
            "bin",
        ])
        .args(["--target", &target])
        .args([
            "-C",
            "opt-level=s",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "target-feature=+crt-static", "-C", "debuginfo=0"])
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("rustc runs");
    if !output.status.success() {
        panic!(
            "div-init could not be built statically (it needs the C library's static archive, libc.a: `apt-get install libc6-dev`):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
