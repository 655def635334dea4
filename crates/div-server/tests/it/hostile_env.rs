//! A run's environment stays the run's: `PATH`, a secret named `LD_PRELOAD` and the loader's
//! `LD_DEBUG` reach the run, never the sandbox's launch, and the secret is in no file others
//! can read; values no process could be given
//! (a NUL byte, over 128 KiB less 256: div_spec::MAX_ENV_VALUE_BYTES, the client's limit too) are refused when they are set.

use serde_json::json;

use crate::harness::{HOST_LINE, Server};

#[tokio::test(flavor = "multi_thread")]
async fn the_runs_environment_never_changes_how_the_sandbox_is_started() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let (status, body) = server
        .request(
            "PUT",
            "/v1/secrets/LD_PRELOAD",
            Some(json!({"value": "/nonexistent/div-preload.so"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // LD_DEBUG makes the loader of every program that gets it name that program: the
    // sandbox's own programs (`bwrap`, the shell that puts it in its cgroups) must not.
    let (status, run) = server
        .create_run(
            "echo \"preload=$LD_PRELOAD\"; echo \"debug=$LD_DEBUG\"; echo ran",
            json!({"env": [
                {"key": "PATH", "value": "/opt/conda/bin"},
                {"key": "LD_DEBUG", "value": "files"},
            ]}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    let log = server.log_text(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
    assert!(
        log.contains("preload=/nonexistent/div-preload.so\n"),
        "{log}"
    );
    assert!(log.contains("debug=files\n"), "{log}");
    assert!(log.contains("ran\n"), "{log}");
    assert!(
        !log.contains("bwrap"),
        "the launch saw the run's variables:\n{log}"
    );
    // The secret is in no file another user could read: spec.json is the owner's alone, and
    // the file bwrap read the variables from is gone.
    use std::os::unix::fs::PermissionsExt;
    let run_dir = server.home.join("runs").join(&id);
    let mode = std::fs::metadata(run_dir.join("spec.json"))
        .expect("spec.json")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "spec.json is {:o}", mode & 0o777);
    assert!(
        !run_dir.join("launch.args").exists(),
        "launch.args was left"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn values_no_process_could_hold_are_refused_when_set() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let big = "x".repeat(200 << 10);
    let (status, body) = server
        .request("PUT", "/v1/secrets/BIG", Some(json!({"value": big})))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        "the secret `BIG` is 204800 bytes; a value may be at most 130816 bytes (128 KiB less 256)"
    );
    let (status, body) = server
        .request("PUT", "/v1/secrets/NUL", Some(json!({"value": "a\u{0}b"})))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        "the secret `NUL` holds a NUL byte, which no program's environment can hold; remove it"
    );
    let (_, list) = server.request("GET", "/v1/secrets", None).await;
    assert_eq!(list["secrets"], json!([]), "a refused secret was kept");

    let (status, body) = server
        .create_run("true", json!({"env": [{"key": "BIG", "value": big}]}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        "the environment variable `BIG` is 204800 bytes; a value may be at most 130816 bytes (128 KiB less 256)"
    );
    let (status, body) = server
        .create_run("true", json!({"env": [{"key": "NUL", "value": "a\u{0}b"}]}))
        .await;
    assert_eq!(status, 422, "{body}");
    let (_, runs) = server.request("GET", "/v1/runs", None).await;
    assert_eq!(runs["runs"], json!([]), "a refused run was placed: {runs}");

    // At the limit it is a run's like any other.
    let edge = "y".repeat(div_spec::MAX_ENV_VALUE_BYTES);
    let (status, run) = server
        .create_run(
            "printf %s \"$EDGE\" | wc -c",
            json!({"env": [{"key": "EDGE", "value": edge}]}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(
        server.log_text(&id).await.trim(),
        format!("{HOST_LINE}130816")
    );
}

/// Every file under `dir` (links not followed) whose bytes hold `needle`, but the secret
/// store itself (`state.db` and its log, the owner's alone).
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("state.db") {
            continue;
        }
        if kind.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if kind.is_file() && holds(&path, needle) {
            found.push(path);
        }
    }
    found
}

/// Whether the file at `path` holds `needle`, read a piece at a time and only where it has
/// data: the home holds sparse disk images of 16 GiB each (`disks/`, each run's `disk.img`),
/// whose holes are zeros and cannot hold a secret, and which read whole would take as much
/// memory.
fn holds(path: &std::path::Path, needle: &[u8]) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut piece = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        // The next stretch of data; none past the last (ENXIO).
        let Ok(start) = rustix::fs::seek(&file, rustix::fs::SeekFrom::Data(at)) else {
            break;
        };
        let end = rustix::fs::seek(&file, rustix::fs::SeekFrom::Hole(start)).unwrap_or(len);
        // What the last piece ended with, so a needle across two pieces is found.
        let mut carry: Vec<u8> = Vec::new();
        let mut pos = start;
        while pos < end {
            let want = piece.len().min((end - pos) as usize);
            let Ok(n) = file.read_at(&mut piece[..want], pos) else {
                return false;
            };
            if n == 0 {
                break;
            }
            carry.extend_from_slice(&piece[..n]);
            if carry.windows(needle.len()).any(|w| w == needle) {
                return true;
            }
            let keep = needle.len().saturating_sub(1).min(carry.len());
            carry.drain(..carry.len() - keep);
            pos += n as u64;
        }
        at = end;
    }
    false
}

/// The scan finds a needle in data past a hole and across two of its pieces, and none in a
/// file of holes alone.
#[test]
fn the_scan_finds_a_needle_past_a_hole_and_across_pieces() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("a temp dir");
    let needle = b"s3cr3t-needle";
    let sparse = dir.path().join("disk.img");
    let file = std::fs::File::create(&sparse).expect("create");
    file.set_len(1 << 30).expect("a 1 GiB hole");
    assert!(!holds(&sparse, needle));
    // Across the boundary of two 1 MiB pieces, 512 MiB in.
    let at = (512u64 << 20) + (1 << 20) - 5;
    file.write_all_at(needle, at).expect("write");
    assert!(holds(&sparse, needle));
    assert_eq!(files_holding(dir.path(), needle), vec![sparse]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secrets_value_is_in_no_file_and_on_no_command_line_while_the_run_goes_or_after() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let secret = "s3cr3t-value-for-the-files-scan-7f9c";
    let (status, body) = server
        .request(
            "PUT",
            "/v1/secrets/API_TOKEN",
            Some(json!({"value": secret})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The run has the secret (it prints its bytes in hex, never the secret itself), and
    // waits to be told.
    let (status, run) = server
        .create_run(
            "printf %s \"$API_TOKEN\" | od -An -tx1 | tr -d ' \\n'; echo; echo has-it; while [ ! -e /tmp/go ]; do sleep 0.05; done",
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "has-it\n").await;
    let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(
        server
            .log_text(&id)
            .await
            .starts_with(&format!("{HOST_LINE}{hex}\n")),
        "the run did not get the secret: {}",
        server.log_text(&id).await
    );
    // While it goes: no file under the state directory, and no process's command line.
    assert_eq!(
        files_holding(&server.home, secret.as_bytes()),
        Vec::<std::path::PathBuf>::new()
    );
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            assert!(
                !cmdline
                    .windows(secret.len())
                    .any(|w| w == secret.as_bytes()),
                "on the command line of {}: {}",
                entry.path().display(),
                String::from_utf8_lossy(&cmdline)
            );
        }
    }
    let run_dir = server.home.join("runs").join(&id);
    std::fs::write(crate::harness::in_run(&run_dir, "tmp/go"), b"").expect("the run's /tmp");
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(
        files_holding(&server.home, secret.as_bytes()),
        Vec::<std::path::PathBuf>::new()
    );
}
