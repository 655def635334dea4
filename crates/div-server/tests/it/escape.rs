//! Runs that really try to escape: capabilities, mounts, the host's files, the state
//! directory and the server's socket, their own limits, and committed code. Each attempt is
//! a line of the run's command; one that works prints `ESCAPED: <what>`.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{HOST_LINE, Server, options};
use crate::unprivileged::{as_root, serve_as_user, user_can_be_made};

/// The run's command: each attempt, then whether it worked. `home` is the server's state
/// directory and `socket` its socket (host paths, hidden from the run); `etc` is a file the
/// run tries to make in the host's `/etc`.
fn attacks(home: &Path, socket: &Path, etc: &str) -> String {
    let home = home.display();
    let socket = socket.display();
    format!(
        r#"try() {{ what=$1; shift; if "$@" >/dev/null 2>&1; then echo "ESCAPED: $what"; else echo "refused: $what"; fi; }}
grep CapEff /proc/self/status
try remount-etc mount -o remount,rw,bind /etc
try write-etc sh -c 'echo x > {etc}'
try mount-tmpfs sh -c 'mkdir -p /tmp/m && mount -t tmpfs none /tmp/m'
try unmount-state-cover umount {home}
try lazy-unmount-state-cover umount -l {home}
try see-state test -e {home}/state.db
try read-state cat {home}/state.db
try list-runs ls {home}/runs
try socket python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' {socket}
try mount-cgroup2 sh -c 'mkdir -p /tmp/cg2 && mount -t cgroup2 none /tmp/cg2'
try mount-cgroup1 sh -c 'mkdir -p /tmp/cg1 && mount -t cgroup -o memory none /tmp/cg1'
try write-sys-fs-cgroup sh -c 'echo max > /sys/fs/cgroup/memory.max'
try own-limits sh -c 'p=$(sed -n "s/^0:://p" /proc/self/cgroup); echo max > /sys/fs/cgroup$p/memory.max'
try proc-sys sh -c 'echo 1 > /proc/sys/vm/drop_caches'
try nested-user-namespace unshare -Urm true
try chroot chroot / true
echo done
"#
    )
}

/// Asserts that the run ended normally with no capability and no attempt working.
fn assert_no_escape(ended: &Value, log: &str, etc: &str) {
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
    assert!(!log.contains("div: no sandbox"), "not sandboxed:\n{log}");
    assert!(log.contains("CapEff:\t0000000000000000\n"), "{log}");
    let escaped: Vec<&str> = log.lines().filter(|l| l.starts_with("ESCAPED")).collect();
    assert!(escaped.is_empty(), "{escaped:?}\n{log}");
    assert_eq!(log.matches("refused: ").count(), 16, "{log}");
    assert!(log.ends_with("done\n"), "{log}");
    assert!(!Path::new(etc).exists(), "the run wrote the host's {etc}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_under_a_root_server_holds_no_capability_and_escapes_nowhere() {
    if !as_root() {
        println!("skipped: the tests do not run as root, so the server cannot");
        return;
    }
    // Under the target directory, which runs see (read-only): the state directory is then
    // covered, and the run tries to uncover it.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temp dir");
    let home = dir.path().join("home");
    let server = Server::at(options(&home, None, div_server::SandboxMode::Bwrap)).await;
    let etc = format!("/etc/div-escape-root-{}", std::process::id());
    let (status, run) = server
        .create_run(&attacks(&home, &server.socket(), &etc), json!({}))
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    let log = server.log_text(&id).await;
    let _ = std::fs::remove_file(&etc);
    assert_no_escape(&ended, &log, &etc);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_under_an_unprivileged_server_holds_no_capability_and_escapes_nowhere() {
    if !user_can_be_made() {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temp dir");
    let (serving, server, _, _) = serve_as_user(dir.path()).await;
    let etc = format!("/etc/div-escape-user-{}", std::process::id());
    let (status, run) = server
        .create_run(&attacks(&server.home, &server.socket(), &etc), json!({}))
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    let log = server.log_text(&id).await;
    let _ = std::fs::remove_file(&etc);
    drop(serving);
    assert_no_escape(&ended, &log, &etc);
}

/// A folder of code committed in `volume` at `code/<id>`, written as the server writes one.
fn committed(home: &Path, volume: &str, id: &str, text: &str) -> std::path::PathBuf {
    let dir = home.join("volumes").join(volume).join("code").join(id);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("train.py"), text).expect("train.py");
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_code_is_read_only_to_every_run_and_data_stays_writable() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    for name in ["tests-code", "other-code", "data"] {
        let (s, v) = server
            .request("POST", "/v1/volumes", Some(json!({"name": name})))
            .await;
        assert!(matches!(s, 200 | 201), "{s} {v}");
    }
    let own = committed(
        &server.home,
        "tests-code",
        "c0ffee01",
        "print('original')\n",
    );
    let other = committed(&server.home, "other-code", "beef0002", "print('theirs')\n");
    std::fs::write(server.home.join("volumes/data/kept.txt"), "one\n").expect("data");
    let code = json!({"volume": "tests-code", "path": "code/c0ffee01"});
    let command = r#"try() { what=$1; shift; if "$@" >/dev/null 2>&1; then echo "ESCAPED: $what"; else echo "refused: $what"; fi; }
try rewrite-own sh -c 'echo "print(666)" > /mnt/tests-code/code/c0ffee01/train.py'
try append-own sh -c 'echo evil >> /mnt/tests-code/code/c0ffee01/train.py'
try delete-own rm /mnt/tests-code/code/c0ffee01/train.py
try add-to-own sh -c 'echo x > /mnt/tests-code/code/c0ffee01/new.py'
try rename-own mv /mnt/tests-code/code/c0ffee01 /mnt/tests-code/code/moved
try rename-code mv /mnt/tests-code/code /mnt/tests-code/gone
try plant-snapshot mkdir /mnt/tests-code/code/c0ffee02
try chmod-own chmod 777 /mnt/tests-code/code/c0ffee01/train.py
try rewrite-other sh -c 'echo "print(666)" > /mnt/other-code/code/beef0002/train.py'
try delete-other rm -r /mnt/other-code/code
try hardlink-own ln /mnt/tests-code/code/c0ffee01/train.py /mnt/tests-code/linked.py
echo mine > /workspace/train.py && cat /workspace/train.py
echo two >> /mnt/data/kept.txt && echo new > /mnt/data/new.txt && echo wrote data
echo beside > /mnt/tests-code/notes.txt && echo wrote beside the code
echo done"#;
    let (status, run) = server
        .create_run(command, json!({"code": code.clone()}))
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    let log = server.log_text(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
    let escaped: Vec<&str> = log.lines().filter(|l| l.starts_with("ESCAPED")).collect();
    assert!(escaped.is_empty(), "{escaped:?}\n{log}");
    assert_eq!(log.matches("refused: ").count(), 11, "{log}");
    // Its own copy and the data volumes are its to write.
    assert!(
        log.contains("mine\nwrote data\nwrote beside the code\ndone\n"),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(own.join("train.py")).expect("own code"),
        "print('original')\n"
    );
    assert_eq!(
        std::fs::read_dir(&own).expect("own snapshot").count(),
        1,
        "the snapshot gained or lost a file"
    );
    assert_eq!(
        std::fs::read_to_string(other.join("train.py")).expect("other code"),
        "print('theirs')\n"
    );
    let data = server.home.join("volumes/data");
    assert_eq!(
        std::fs::read_to_string(data.join("kept.txt")).expect("kept"),
        "one\ntwo\n"
    );
    assert_eq!(
        std::fs::read_to_string(data.join("new.txt")).expect("new"),
        "new\n"
    );
    // The next run of the same code gets the code as committed.
    let (_, again) = server
        .create_run("cat train.py", json!({"code": code}))
        .await;
    let again = again["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&again).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(
        server.log_text(&again).await,
        format!("{HOST_LINE}print('original')\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_a_run_leaves_in_a_volume_never_carries_a_commit_out_of_it() {
    const EMPTY: &str = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    // A host folder outside every volume: where the link points.
    let victim = server.home.parent().expect("a parent").join("victim");
    std::fs::create_dir_all(&victim).expect("victim");
    let (s, v) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "fresh-code"})))
        .await;
    assert!(matches!(s, 200 | 201), "{s} {v}");
    let (s, v) = server
        .request(
            "PUT",
            &format!("/v1/volumes/fresh-code/blobs/{EMPTY}?offset=0&total=0"),
            None,
        )
        .await;
    assert!(matches!(s, 201 | 204), "{s} {v}");
    // The volume has no code yet: the run tries to leave `code` as a link to the host folder.
    // The server made `code/` before the run started, read-only to it: the link cannot be
    // made there (it made it, before).
    let (_, run) = server
        .create_run(
            &format!(
                "ln -sfn {} /mnt/fresh-code/code && echo planted",
                victim.display()
            ),
            json!({}),
        )
        .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    let log = server.log_text(&id).await;
    assert!(log.contains("Read-only file system"), "{log}");
    let code = server.home.join("volumes/fresh-code/code");
    assert!(
        std::fs::symlink_metadata(&code).is_ok_and(|m| m.is_dir()),
        "code/ is still the server's folder"
    );
    // A link left there another way (by a div from before, or by hand) is never followed.
    std::fs::remove_dir(&code).expect("the empty folder");
    std::os::unix::fs::symlink(&victim, &code).expect("plant the link");
    // The next `div run` commits its code at code/<id>.
    let (status, body) = server
        .request(
            "POST",
            "/v1/volumes/fresh-code/trees",
            Some(json!({"path": "code/c0ffee03", "entries": [
                {"path": "train.py", "kind": "file", "size": 0, "hash": EMPTY}
            ]})),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        "`code` in volume `fresh-code` is not a folder (a link or a file left there, perhaps by a run); remove it to commit `code/c0ffee03`"
    );
    assert_eq!(
        std::fs::read_dir(&victim).expect("victim").count(),
        0,
        "the commit was written outside the volume"
    );
}

/// A volume with no `code/` yet (a project that never shipped), mounted by a run: the run
/// makes `code/` itself, waits for the project's first snapshot to land in it, and rewrites
/// it. It must find `code/` made already and read-only, so the snapshot stays as shipped,
/// and so does every later tree that links its files.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_cannot_make_code_in_a_volume_and_wait_for_a_snapshot_to_land_in_it() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let (s, v) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "victim-code"})))
        .await;
    assert!(matches!(s, 200 | 201), "{s} {v}");
    let command = r#"if mkdir /mnt/victim-code/code 2>/dev/null; then echo "ESCAPED: made code"; else echo "refused: made code"; fi
i=0
while [ $i -lt 80 ]; do
  for f in /mnt/victim-code/code/*/train.py; do
    if [ -f "$f" ]; then
      if echo "print(666)" > "$f" 2>/dev/null; then echo "ESCAPED: rewrote $f"; else echo "refused: rewrite"; fi
      exit 0
    fi
  done
  sleep 0.05; i=$((i+1))
done
echo "never saw the snapshot""#;
    let (status, run) = server.create_run(command, json!({})).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_running(&id).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // The project's first ship lands while the run waits.
    let shipped: &[u8] = b"print('shipped')\n";
    let hash = blake3::hash(shipped).to_hex().to_string();
    let entries =
        json!([{"path": "train.py", "kind": "file", "size": shipped.len(), "hash": hash}]);
    let (status, staged) = server
        .request(
            "POST",
            "/v1/volumes/victim-code/stages",
            Some(json!({"path": "code/v1", "entries": entries})),
        )
        .await;
    assert_eq!(status, 201, "{staged}");
    let stage = staged["id"].as_str().expect("an id").to_owned();
    let blobs = [div_api::PackBlob {
        hash,
        data: shipped.to_vec().into(),
    }];
    let (status, _) = server
        .try_request(
            "POST",
            &format!("/v1/volumes/victim-code/blobs/pack?stage={stage}"),
            Some(div_api::pack_frame(&blobs)),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    assert_eq!(status, 200);
    let (status, committed) = server
        .request(
            "POST",
            &format!("/v1/volumes/victim-code/stages/{stage}/commit"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 201, "{committed}");
    let ended = server.wait_end(&id).await;
    let log = server.log_text(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
    let escaped: Vec<&str> = log.lines().filter(|l| l.starts_with("ESCAPED")).collect();
    assert!(escaped.is_empty(), "{escaped:?}\n{log}");
    assert!(log.contains("refused: made code"), "{log}");
    assert!(
        log.contains("refused: rewrite"),
        "the run saw the snapshot land and could not write it: {log}"
    );
    assert_eq!(
        std::fs::read(server.home.join("volumes/victim-code/code/v1/train.py")).expect("read"),
        shipped
    );
}
