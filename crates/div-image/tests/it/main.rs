//! div-image's integration tests: one binary.

mod bounds;
mod layers;
mod registry;
mod support;
mod token;
mod unpack;
