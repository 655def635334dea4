//! TLS for `https://` endpoints: the connector (rustls with `ring`, this machine's roots), and
//! what to say when a handshake fails.
//!
//! The roots come from rustls-native-certs, which honours `SSL_CERT_FILE` and `SSL_CERT_DIR`;
//! that is the one place this crate's behaviour depends on the environment, and it is not
//! this crate's reading.

use std::io;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::endpoint::Endpoint;
use crate::error::{ApiError, ErrorKind};

/// An HTTPS-only connector trusting this machine's root certificates.
pub(crate) fn connector() -> Result<HttpsConnector<HttpConnector>, ApiError> {
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| {
            ApiError::new(
                ErrorKind::Io,
                format!("could not load this machine's TLS root certificates: {e}"),
            )
        })?
        .https_only()
        .enable_http1()
        .build())
}

/// The TLS error behind a failed request, if that is what failed. An `io::Error` wrapping
/// another error is looked into with `get_ref` (its `source` skips what it wraps).
pub(crate) fn failure<'e>(
    error: &'e (dyn std::error::Error + 'static),
) -> Option<&'e rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        cause = match e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// What to say when the TLS handshake with the control plane at `endpoint` failed.
pub(crate) fn message(endpoint: &Endpoint, tls: &rustls::Error) -> String {
    match tls {
        rustls::Error::InvalidCertificate(why) => format!(
            "the control plane at `{endpoint}` presented a certificate this machine does not trust ({why:?}); \
             if it is signed by a private CA, point SSL_CERT_FILE at that CA's certificate (PEM)"
        ),
        other => {
            format!("the TLS handshake with the control plane at `{endpoint}` failed: {other}")
        }
    }
}
