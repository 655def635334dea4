//! div-test-support's image helpers (a real registry on loopback, images built here, tree
//! comparison), under the name these tests use.

pub(crate) use div_test_support::image::*;
