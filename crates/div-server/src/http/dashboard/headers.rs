//! What both dashboards' answers share: the security headers every answer carries, a refusal
//! of the dashboard's own, and a cookie read from a request.

use hyper::Request;
use hyper::StatusCode;
use hyper::body::Incoming;
use serde_json::json;

use crate::http::wire::{self, Resp};

/// The headers every answer carries: only this origin's scripts and styles, no framing, no
/// sniffing, no referrer (the first URL holds the token), nothing cached.
pub(crate) fn secure(mut resp: Resp) -> Resp {
    let h = resp.headers_mut();
    for (name, value) in [
        (
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        h.insert(name, http::HeaderValue::from_static(value));
    }
    resp
}

pub(crate) fn refuse(status: StatusCode, message: &str) -> Resp {
    wire::full(
        status.as_u16(),
        "application/json",
        serde_json::to_vec(&json!({"error": {"code": "forbidden", "message": message}}))
            .unwrap_or_default(),
    )
}

/// The token the request's cookie `name` holds.
pub(crate) fn cookie_token(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}
