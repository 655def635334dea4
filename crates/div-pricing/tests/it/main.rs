//! div-pricing's integration tests: the spec's prices, containers, ceilings and header lines,
//! every sizing refusal, and property tests.

mod proptests;
mod rate;
mod sizing;
