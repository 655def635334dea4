//! Project tasks: `cargo xtask ci`, `cargo xtask bench`, `cargo xtask fuzz`.
fn main() {}
