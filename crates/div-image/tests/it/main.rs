//! div-image's integration tests: one binary.

mod registry;
mod support;
mod token;
mod unpack;
