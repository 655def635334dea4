//! Test support for div: wiremock helpers, output filters and the [`ControlPlane`]
//! conformance suite.
//!
//! - [`mock`]: a wiremock server per test on `127.0.0.1:0`, a client for it, and mounts for
//!   the contract's answers (a catalogue, runs, a log stream built from frames, errors in
//!   the stable shape);
//! - [`filter_snapshot`]: ports, temp dirs and durations out of a snapshot;
//! - [`conformance`]: named checks any [`ControlPlane`] must pass, with a
//!   [`ConformanceContext`] saying what runs quickly and whether runs really execute;
//! - [`FakeControlPlane`]: an in-memory control plane that passes the suite;
//! - [`leftovers`]: what a harness that made a control plane stops when it ends, and the
//!   processes left under a folder;
//! - [`wait_until`] (and [`wait_until_async`]): a poll with a deadline and a message, what
//!   every test waits with (never a fixed sleep);
//! - `image` (feature `image`): a real registry on loopback, images built in memory, and a
//!   tree's contents to compare;
//! - `dashboard` (feature `dashboard`): headless Chromium under chromedriver, the project the
//!   dashboard's tests place runs from, and HTTP written by hand.
//!
//! ```
//! use div_test_support::{ConformanceContext, FakeControlPlane, conformance};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let fake = FakeControlPlane::new();
//! conformance(&fake, &ConformanceContext::default()).await.assert_passed();
//! # });
//! ```
//!
//! [`ControlPlane`]: div_api::ControlPlane

mod conformance;
#[cfg(feature = "dashboard")]
pub mod dashboard;
mod fake;
mod filters;
#[cfg(feature = "image")]
pub mod image;
pub mod leftovers;
pub mod mock;
pub mod proxy;
pub mod tls;
mod wait;

pub use conformance::conformance;
pub use conformance::context::{ConformanceContext, ConformanceReport, quick_run};
pub use fake::state::{FAKE_IMAGES, FAKE_TIME, FakeControlPlane, FakeStages, sample_catalogue};
pub use filters::filter_snapshot;
pub use wait::{poll_until, poll_until_async, wait_until, wait_until_async};
