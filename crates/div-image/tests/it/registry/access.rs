//! Reaching a registry: the login it needs, HTTPS unless it is on loopback or named
//! insecure, and its refusal of an image it lacks, in its own words.

use div_image::{
    CredentialSources, Credentials, EnsureError, ImageRef, ImageStore, NoProgress, PullPolicy,
    StoreOptions,
};

use super::{amd64, store};
use crate::support::{Registry, build, fast_options, file, login, push};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_with_basic_auth_needs_the_login_from_the_auth_file() {
    let Some(reg) = Registry::start(Some(("alice", "wonder"))) else {
        return;
    };
    let image = build(&[vec![file("hello", "secret image")]], "amd64", &[], "");
    push(
        &reg.addr,
        "private/app",
        "v1",
        &image,
        &login(&reg.addr, "alice", "wonder"),
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let r: ImageRef = format!("{}/private/app:v1", reg.addr).parse().unwrap();

    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::Unauthorized { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "the registry `{0}` refused access to `{0}/private/app:v1` (HTTP 401); log in first (`docker login {0}`), or check the image's name",
            reg.addr
        )
    );

    // The login as `podman login` writes it, found through REGISTRY_AUTH_FILE's value.
    let auth_file = cache.path().join("auth.json");
    std::fs::write(
        &auth_file,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "YWxpY2U6d29uZGVy"}}}}}}"#,
            reg.addr
        ),
    )
    .unwrap();
    let creds = Credentials::load(&CredentialSources {
        registry_auth_file: Some(auth_file),
        ..CredentialSources::default()
    })
    .unwrap();
    let got = store
        .ensure(&r, &amd64(), &creds, &NoProgress)
        .await
        .expect("pull with login");
    assert_eq!(
        std::fs::read_to_string(got.rootfs.join("hello")).unwrap(),
        "secret image"
    );

    let wrong = login(&reg.addr, "alice", "guess");
    let other: ImageRef = format!("{}/private/app:v1", reg.addr).parse().unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let err = crate::registry::store(fresh.path())
        .ensure(&other, &amd64(), &wrong, &NoProgress)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("check the login stored for it"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_does_not_exist_is_refused_in_the_registry_s_words() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path());
    let r: ImageRef = format!("{}/no/such:thing", reg.addr).parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::NotFound { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("the registry `{}` has no image `{r}`: ", reg.addr)),
        "{err}"
    );

    // Nothing listens here: refused as unreachable, after the retries.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r: ImageRef = format!("127.0.0.1:{port}/x:1").parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::Unreachable { .. }), "{err:?}");

    // With the network forbidden, an image not cached is an error, not a pull.
    let offline = ImageStore::open_with(
        cache.path(),
        StoreOptions {
            pull_policy: PullPolicy::Never,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let err = offline
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("`{r}` is not in the image cache, and the pull policy forbids pulling it")
    );
}

/// A name for this machine that resolves to a loopback address but is not one of the
/// loopback names the library knows (`localhost`, `127.x`, `[::1]`).
#[allow(clippy::print_stderr)] // the loud skip
fn loopback_alias(port: u16) -> Option<String> {
    use std::net::ToSocketAddrs as _;
    let name = std::fs::read_to_string("/etc/hostname")
        .ok()?
        .trim()
        .to_owned();
    let all_loopback = (name.as_str(), port)
        .to_socket_addrs()
        .ok()?
        .all(|a| a.ip().is_loopback());
    if name.is_empty() || name == "localhost" || !all_loopback {
        eprintln!("\n!!!!! SKIPPED: this machine's name does not resolve to loopback only !!!!!\n");
        return None;
    }
    Some(format!("{name}:{port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_not_on_a_loopback_name_is_https_unless_named_insecure() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let port: u16 = reg.addr.rsplit(':').next().unwrap().parse().unwrap();
    let Some(alias) = loopback_alias(port) else {
        return;
    };
    let image = build(&[vec![file("a", "1")]], "amd64", &[], "");
    push(&reg.addr, "tls/app", "1", &image, &Credentials::none()).await;
    let r: ImageRef = format!("{alias}/tls/app:1").parse().unwrap();
    assert!(!r.is_loopback_registry());

    // Spoken to over HTTPS, the plain-HTTP registry cannot answer.
    let cache = tempfile::tempdir().unwrap();
    let err = store(cache.path())
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::Unreachable { .. }), "{err:?}");

    // Named insecure, it is reached over HTTP.
    let mut options = StoreOptions {
        registry: fast_options(),
        ..StoreOptions::default()
    };
    options.registry.insecure_registries.push(alias.clone());
    let got = ImageStore::open_with(cache.path(), options)
        .unwrap()
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .expect("pull over plain HTTP when named insecure");
    assert_eq!(got.digest, image.manifest_digest);
}
