//! The bearer-token flow Docker Hub uses (anonymous and with a login), and a blob redirected
//! to another host, against wiremock standing in for the registry, its token service and
//! its CDN.

use div_image::{Credentials, ImageRef, ImageStore, NoProgress, Platform, StoreOptions};
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::support::{OCI_MANIFEST, build, fast_options, file, login};

async fn hub(token_for: Option<&str>) -> (MockServer, MockServer, crate::support::Built) {
    let registry = MockServer::start().await;
    let cdn = MockServer::start().await;
    let image = build(&[vec![file("hello", "from the hub")]], "amd64", &[], "");
    let realm = format!("{}/token", registry.uri());
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(ResponseTemplate::new(401).insert_header(
            "WWW-Authenticate",
            format!(r#"Bearer realm="{realm}",service="registry.docker.io""#).as_str(),
        ))
        .mount(&registry)
        .await;
    let token = Mock::given(method("GET"))
        .and(path("/token"))
        .and(query_param("service", "registry.docker.io"))
        .and(query_param("scope", "repository:library/hello:pull"));
    let token = match token_for {
        // "alice:wonder"
        Some(_) => token.and(header("authorization", "Basic YWxpY2U6d29uZGVy")),
        None => token,
    };
    token
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"token": "t0k", "expires_in": 300})),
        )
        .mount(&registry)
        .await;
    let bearer = || header("authorization", "Bearer t0k");
    Mock::given(method("GET"))
        .and(path("/v2/library/hello/manifests/latest"))
        .and(bearer())
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("Content-Type", OCI_MANIFEST)
                .set_body_bytes(image.manifest.clone()),
        )
        .mount(&registry)
        .await;
    for (d, bytes) in image.blobs.iter().chain(std::iter::once(&image.config)) {
        // Blobs are redirected to a CDN on another origin, as Docker Hub does.
        Mock::given(method("GET"))
            .and(path(format!("/v2/library/hello/blobs/{d}")))
            .and(bearer())
            .respond_with(ResponseTemplate::new(307).insert_header(
                "Location",
                format!("{}/cdn/{}", cdn.uri(), d.hex()).as_str(),
            ))
            .mount(&registry)
            .await;
        Mock::given(method("GET"))
            .and(path(format!("/cdn/{}", d.hex())))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(bytes.clone()))
            .mount(&cdn)
            .await;
    }
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401))
        .with_priority(u8::MAX)
        .mount(&registry)
        .await;
    (registry, cdn, image)
}

fn no_token_leaked(requests: &[Request]) {
    for r in requests {
        assert!(
            !r.headers.contains_key("authorization"),
            "the CDN got credentials: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_token_flow_and_a_cdn_redirect_without_credentials() {
    let (registry, cdn, image) = hub(None).await;
    let host = registry.address().to_string();
    let r: ImageRef = format!("{host}/library/hello").parse().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::open_with(
        cache.path(),
        StoreOptions {
            registry: fast_options(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let got = store
        .ensure(
            &r,
            &"linux/amd64".parse::<Platform>().unwrap(),
            &Credentials::none(),
            &NoProgress,
        )
        .await
        .expect("pull through the token flow");
    assert_eq!(got.digest, image.manifest_digest);
    assert_eq!(
        std::fs::read_to_string(got.rootfs.join("hello")).unwrap(),
        "from the hub"
    );
    no_token_leaked(&cdn.received_requests().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_is_sent_to_the_token_service_only() {
    let (registry, cdn, _) = hub(Some("alice")).await;
    let host = registry.address().to_string();
    let r: ImageRef = format!("{host}/library/hello").parse().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::open_with(
        cache.path(),
        StoreOptions {
            registry: fast_options(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    store
        .ensure(
            &r,
            &"linux/amd64".parse::<Platform>().unwrap(),
            &login(&host, "alice", "wonder"),
            &NoProgress,
        )
        .await
        .expect("pull with a login");
    no_token_leaked(&cdn.received_requests().await.unwrap());
}
