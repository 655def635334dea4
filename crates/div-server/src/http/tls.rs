//! TLS for the team's listener: the certificate chain and key (PEM) read into a rustls server
//! config with `ring`, speaking HTTP/1.1 only, TLS 1.2 and 1.3.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsFiles;

/// The error returned by [`server_config`] (and `div_server::check_tls`).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("could not read the TLS certificate `{}`", path.display())]
    Cert {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the TLS certificate file `{}` holds no certificate (PEM, `-----BEGIN CERTIFICATE-----`)", .0.display())]
    NoCert(PathBuf),
    #[error("could not read the TLS key `{}` (PEM: PKCS#8, PKCS#1 or SEC1)", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the TLS certificate `{}` and key `{}` cannot serve together", cert.display(), key.display())]
    Config {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let cert_error = |source| TlsError::Cert {
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(cert_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(cert_error)?;
    if certs.is_empty() {
        return Err(TlsError::NoCert(path.to_owned()));
    }
    Ok(certs)
}

/// The server config for `files`: what the listener accepts connections with.
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Key {
        path: files.key.clone(),
        source,
    })?;
    let config_error = |source| TlsError::Config {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(config_error)?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(config_error)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
