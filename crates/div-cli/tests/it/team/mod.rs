//! A team's control plane end to end (docs/team.md): the real `div`, its local control plane
//! served to the org over TLS on loopback (`div server start --listen --tls-cert --tls-key`,
//! with a CA and a certificate `openssl` makes for the test), its owner an admin over the Unix
//! socket, and members each in a home of their own, logged in with `div login`.
//!
//! `roles.rs`: two members and a viewer, who sees what and is refused what, the audit log,
//! revocation; `tokens.rs`: bad tokens slowed down, no token in the clear on disk;
//! `limits.rs`: a member's monthly limit; `serving.rs`: the listener from the settings file, and
//! plain HTTP refused off loopback. The dashboard's sign-in is tested in a browser by
//! div-server's `dashboard` test target (`team.rs`).

mod limits;
mod roles;
mod serving;
mod tokens;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use crate::support::DIV;

/// How long a test waits for a run to reach a state: a bound, not a claim about speed.
pub(crate) const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// A program that runs until stopped, saying so.
pub(crate) const TRAIN: &str =
    "import time\n\ndef main():\n    print('training', flush=True)\n    time.sleep(600)\n";

/// The owner's state directory, served to a team on a loopback port over TLS.
pub(crate) struct Team {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) port: u16,
}

/// One member's machine: a home of its own (its `div login`), and a project.
pub(crate) struct Member<'t> {
    pub(crate) team: &'t Team,
    pub(crate) name: String,
}

impl Team {
    /// A CA, a certificate for `localhost`, and the owner's control plane serving it on a free
    /// loopback port.
    pub(crate) fn start() -> Team {
        let team = Team::new();
        // Each run's own disk is 1 GiB here: a control plane backs the disks of its runs with
        // the free space it sees, and on a machine short of it (other suites' builds beside
        // this one) a second run beside the first would wait for disk, not for its turn.
        std::fs::create_dir_all(team.home()).expect("the state directory");
        std::fs::write(team.home().join("settings.json"), r#"{"run_disk_gib": 1}"#)
            .expect("settings.json");
        let certs = team.tmp.path().join("certs");
        let listen = format!("127.0.0.1:{}", team.port);
        let cert = certs.join("server.pem").display().to_string();
        let key = certs.join("server.key").display().to_string();
        let out = team.admin(&[
            "server",
            "start",
            "--listen",
            &listen,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "div server start: {}",
            crate::support::text(&out.stderr)
        );
        let said = crate::support::text(&out.stderr);
        assert!(
            said.contains(&format!("serving the team on https://{listen} (TLS)")),
            "{said}"
        );
        team
    }

    /// A CA, a certificate for `localhost` and a free loopback port; nothing started.
    pub(crate) fn new() -> Team {
        let tmp = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(tmp.path().join("certs")).expect("certs");
        crate::https::certificates(&tmp.path().join("certs"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        Team { tmp, port }
    }

    /// The owner's state directory.
    pub(crate) fn home(&self) -> PathBuf {
        self.tmp.path().join("owner").join("state")
    }

    /// The test CA's certificate, which members trust (`SSL_CERT_FILE`).
    pub(crate) fn ca(&self) -> PathBuf {
        self.tmp.path().join("certs").join("ca.pem")
    }

    /// Where members reach it.
    pub(crate) fn url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    /// `div args…` as the server's owner, over its Unix socket.
    pub(crate) fn admin_command(&self, args: &[&str]) -> Command {
        let owner = self.tmp.path().join("owner");
        std::fs::create_dir_all(&owner).expect("the owner's home");
        let mut c = Command::new(DIV);
        c.args(args)
            .current_dir(&owner)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &owner)
            .env("DIVERGENT_HOME", self.home())
            .env("DIVERGENT_EMULATE_GPUS", "h100:2")
            .env("NO_COLOR", "1");
        c
    }

    pub(crate) fn admin(&self, args: &[&str]) -> Output {
        self.admin_command(args).output().expect("div runs")
    }

    /// `div args…` as the owner, which must succeed; its stdout.
    pub(crate) fn admin_ok(&self, args: &[&str]) -> String {
        let out = self.admin(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "div {args:?}: {}",
            crate::support::text(&out.stderr)
        );
        crate::support::text(&out.stdout)
    }

    /// Adds `name` with `role` (`div server users add`): its token, as printed once.
    pub(crate) fn add(&self, name: &str, role: &str) -> String {
        let token = self.admin_ok(&["server", "users", "add", name, "--role", role]);
        let token = token.trim().to_owned();
        assert!(token.starts_with("div_"), "{token}");
        token
    }

    /// `name`'s machine, logged in with `token`.
    pub(crate) fn member(&self, name: &str, token: &str) -> Member<'_> {
        let member = Member {
            team: self,
            name: name.to_owned(),
        };
        std::fs::create_dir_all(member.project()).expect("a project");
        std::fs::write(member.project().join("train.py"), TRAIN).expect("train.py");
        let mut login = member.command(&["login", "--api-url", &self.url()]);
        login.stdin(std::process::Stdio::piped());
        let mut child = login
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("div login");
        std::io::Write::write_all(
            &mut child.stdin.take().expect("stdin"),
            format!("{token}\n").as_bytes(),
        )
        .expect("the token");
        let out = child.wait_with_output().expect("div login");
        let said = crate::support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "div login: {said}");
        assert!(
            said.contains(&format!("the token for {} is in", self.url())),
            "{said}"
        );
        member
    }

    /// Every file under the state directory, each with the first of `needles` it holds.
    pub(crate) fn scan_state(&self, needles: &[String]) -> Vec<(PathBuf, Option<String>)> {
        let mut files = Vec::new();
        let mut dirs = vec![self.home()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match entry.file_type() {
                    Ok(t) if t.is_dir() => dirs.push(path),
                    Ok(t) if t.is_file() => {
                        let found = file_holds(&path, needles);
                        files.push((path, found));
                    }
                    _ => {}
                }
            }
        }
        files
    }
}

/// The first of `needles` that `path` holds, read by its data alone: the disks of the state
/// directory's pool are sparse images of gigabytes, mostly holes (`SEEK_DATA`, `SEEK_HOLE`).
fn file_holds(path: &Path, needles: &[String]) -> Option<String> {
    use rustix::fs::SeekFrom;
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let overlap = needles.iter().map(String::len).max().unwrap_or(0);
    let mut pos = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    while pos < len {
        let Ok(data) = rustix::fs::seek(&file, SeekFrom::Data(pos)) else {
            break; // no data past `pos`
        };
        let hole = rustix::fs::seek(&file, SeekFrom::Hole(data)).unwrap_or(len);
        let mut at = data;
        let mut tail: Vec<u8> = Vec::new();
        while at < hole {
            let want = usize::try_from(hole - at)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = file.read_at(&mut buf[..want], at).ok()?;
            if n == 0 {
                break;
            }
            let mut window = std::mem::take(&mut tail);
            window.extend_from_slice(&buf[..n]);
            if let Some(found) = needles.iter().find(|needle| holds(&window, needle)) {
                return Some(found.clone());
            }
            tail = window[window.len().saturating_sub(overlap)..].to_vec();
            at += n as u64;
        }
        pos = hole;
    }
    None
}

impl Drop for Team {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.admin_command(args),
            &self.home(),
            self.tmp.path(),
        );
        let _ = self.admin(&["server", "stop"]);
    }
}

impl Member<'_> {
    fn machine(&self) -> PathBuf {
        self.team.tmp.path().join("members").join(&self.name)
    }

    pub(crate) fn project(&self) -> PathBuf {
        self.machine().join("vision")
    }

    /// `div args…` on this member's machine, in its project.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(DIV);
        c.args(args)
            .current_dir(self.project())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.machine())
            .env("DIVERGENT_HOME", self.machine().join("state"))
            .env("SSL_CERT_FILE", self.team.ca())
            .env("DIVERGENT_API_TIMEOUT", crate::support::API_TIMEOUT)
            .env("NO_COLOR", "1");
        c
    }

    pub(crate) fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }

    /// `div args…`, which must succeed; its stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.div(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: div {args:?}: {}",
            self.name,
            crate::support::text(&out.stderr)
        );
        crate::support::text(&out.stdout)
    }
}

/// One HTTP/1.1 exchange over TLS with the team's listener, trusting the test CA: the whole
/// answer, head and body, as text.
pub(crate) fn https(team: &Team, request: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(team.ca())
        .expect("the CA")
        .flatten()
    {
        roots.add(cert).expect("the CA is a certificate");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a connection");
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", team.port)).expect("connect");
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// A request of `method path` with these headers and body, closing the connection after.
pub(crate) fn request(
    team: &Team,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\nContent-Length: {}\r\n",
        team.port,
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    https(team, &text)
}

/// `GET /v1/runs` with `token` as its bearer: the answer, whole.
pub(crate) fn runs_as(team: &Team, token: &str) -> String {
    request(
        team,
        "GET",
        "/v1/runs",
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    )
}

/// The status code of an answer.
pub(crate) fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The audit log, as the owner reads it (`div server audit --json`), oldest first: each
/// entry's member, action and target.
pub(crate) fn audit(team: &Team) -> Vec<(String, String, String)> {
    let out = team.admin_ok(&["server", "audit", "--limit", "1000", "--json"]);
    let entries: Vec<serde_json::Value> = serde_json::from_str(&out).expect("the audit log");
    let mut entries: Vec<(String, String, String)> = entries
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("member"), s("action"), s("target"))
        })
        .collect();
    entries.reverse();
    entries
}

/// Whether `haystack` holds `needle`.
pub(crate) fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The path's file name, for messages.
pub(crate) fn shown(path: &Path) -> String {
    path.display().to_string()
}
