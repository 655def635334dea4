//! The `div` command.
fn main() {}
