//! `div` over https: a real TLS server (rustls) in front of the wiremock control plane, with
//! a certificate from a test CA made by `openssl`. `div` trusts it through `SSL_CERT_FILE`
//! (the system's roots plus that file, as rustls-native-certs reads them), and refuses it
//! without.

use std::path::Path;
use std::sync::Arc;

use div_api::RunStatus;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use wiremock::Mock;
use wiremock::matchers::{method, path};

use crate::support::{World, run};

pub(crate) use div_test_support::tls::certificates;

/// Accepts TLS on a loopback port and passes what it decrypts to `upstream`; the port.
async fn tls_in_front_of(upstream: std::net::SocketAddr, dir: &Path) -> u16 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .expect("the certificate")
        .collect::<Result<Vec<_>, _>>()
        .expect("the certificate parses");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("the key");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return; // a client that refused the certificate
                };
                if let Ok(mut plain) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread")]
async fn div_talks_to_an_https_control_plane_whose_certificate_it_trusts() {
    let world = World::new().await;
    let certs = tempfile::tempdir().expect("a temp dir");
    certificates(certs.path());
    let port = tls_in_front_of(*world.server.address(), certs.path()).await;
    let mut listed = run(RunStatus::Succeeded);
    listed.name = "run-tls1".into();
    Mock::given(method("GET"))
        .and(path("/v1/runs"))
        .respond_with(div_test_support::mock::json_response(
            200,
            &json!({"runs": [listed]}),
        ))
        .mount(&world.server)
        .await;

    let url = format!("https://localhost:{port}");
    let trusted = world
        .command(&["runs"])
        .env("DIVERGENT_API_URL", &url)
        .env("SSL_CERT_FILE", certs.path().join("ca.pem"))
        .output()
        .await
        .expect("div runs");
    let stderr = String::from_utf8_lossy(&trusted.stderr);
    assert_eq!(trusted.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&trusted.stdout);
    assert!(stdout.contains("run-tls1"), "{stdout}");
    assert!(
        world.requests().await.iter().any(|r| r == "GET /v1/runs"),
        "the request crossed TLS to the control plane"
    );

    // Without the CA, the same server is refused, and no request reaches it.
    let before = world.requests().await.len();
    let untrusted = world
        .command(&["runs"])
        .env("DIVERGENT_API_URL", &url)
        .output()
        .await
        .expect("div runs");
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert_ne!(untrusted.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the control plane at `{url}` presented a certificate this machine does not trust (UnknownIssuer); \
             if it is signed by a private CA, point SSL_CERT_FILE at that CA's certificate (PEM)"
        )),
        "the error names the certificate and what to do: {stderr}"
    );
    assert!(
        !stderr.contains("tries"),
        "a certificate is not retried: {stderr}"
    );
    assert_eq!(world.requests().await.len(), before);
}
