//! Test support for div: wiremock helpers, output filters and the ControlPlane conformance suite.
