//! The `div` executable is linked at a fixed address, not position-independent, on Linux.
//!
//! Why: a position-independent executable's dynamic loader writes every page that holds a
//! pointer before `main` runs (37,000 relative relocations over the 627 KB of
//! `.data.rel.ro` here), so each start paid about 170 copy-on-write page faults: 290 faults
//! in all against 120 at a fixed address. Every `div` command, the local control plane and
//! each run's supervisor start from this executable, and `div --version` went from 1.28× to
//! 0.94× `git --version` (docs/performance.md, "Start-up"). What is given up: the
//! executable's own code and constant data are not placed at a random address (shared
//! libraries, the heap and the stacks still are); div's code is Rust with `unsafe` denied
//! but for a few system calls, each justified where it is.

// A build script is told its target through the environment: that is its only input.
#![allow(clippy::disallowed_methods, clippy::print_stdout)]

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
