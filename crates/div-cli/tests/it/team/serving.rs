//! Serving a team: from the state directory's settings file as from the flags, and never plain
//! HTTP on an address that is not loopback.

use super::Team;
use crate::support::text;

/// `listen`, `tls_cert` and `tls_key` in `settings.json` serve the team whenever the server
/// starts, here on demand by a plain `div server start`.
#[test]
fn the_settings_file_serves_the_team_as_the_flags_do() {
    let team = Team::new();
    std::fs::create_dir_all(team.home()).expect("the state directory");
    let certs = team.tmp.path().join("certs");
    std::fs::write(
        team.home().join("settings.json"),
        serde_json::json!({
            "listen": format!("127.0.0.1:{}", team.port),
            "tls_cert": certs.join("server.pem"),
            "tls_key": certs.join("server.key"),
        })
        .to_string(),
    )
    .expect("settings.json");
    team.admin_ok(&["server", "start"]);
    let alice = team.member("alice", &team.add("alice", "member"));
    let me = alice.ok(&["runs", "--all"]);
    assert_eq!(me, "", "no runs yet");
    let log = super::audit(&team);
    assert!(
        log.iter()
            .any(|(m, a, t)| m == "owner" && a == "member.add" && t == "alice"),
        "{log:?}"
    );
}

/// Plain HTTP on an address others can reach is refused before anything starts, from the
/// flags and from the settings file; a certificate that is not one is said as such.
#[test]
fn plain_http_is_refused_off_loopback() {
    let team = Team::new();
    let listen = format!("0.0.0.0:{}", team.port);
    let out = team.admin(&["server", "start", "--listen", &listen]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{said}");
    assert!(
        said.contains(&format!(
            "error: plain HTTP is refused on `{listen}`, which is not a loopback address"
        )),
        "{said}"
    );
    assert!(said.contains("hint: serve it over TLS"), "{said}");
    assert!(!team.home().join("server.sock").exists(), "nothing started");

    let not_a_cert = team.tmp.path().join("not-a-cert.pem");
    std::fs::write(&not_a_cert, "hello\n").expect("a file");
    let key = team.tmp.path().join("certs/server.key");
    let out = team.admin(&[
        "server",
        "start",
        "--listen",
        &listen,
        "--tls-cert",
        &not_a_cert.display().to_string(),
        "--tls-key",
        &key.display().to_string(),
    ]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{said}");
    assert!(said.contains("holds no certificate"), "{said}");

    std::fs::create_dir_all(team.home()).expect("the state directory");
    std::fs::write(
        team.home().join("settings.json"),
        serde_json::json!({ "listen": listen }).to_string(),
    )
    .expect("settings.json");
    let out = team.admin(&["server", "start"]);
    let said = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{said}");
    let log = std::fs::read_to_string(team.home().join("server.log")).unwrap_or_default();
    assert!(log.contains("plain HTTP is refused on"), "{log}");
}
