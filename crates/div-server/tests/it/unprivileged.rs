//! The whole control plane as an unprivileged user: the server (`div-serve`) and so its
//! supervisors run as a user made with `useradd -m`. bubblewrap works unprivileged (user
//! namespaces); no cgroup can be made, so memory is held by polling, a soft limit. Skipped,
//! with the reason printed, when the tests do not run as root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::Server;

const USER: &str = "div-runner";

fn own_uid() -> Option<u32> {
    uid_of(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The real uid on the `Uid:` line of a `/proc/<pid>/status`.
fn uid_of(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

fn id(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, USER])
        .output()
        .expect("id runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no user `{USER}`: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Gives `path` and everything under it to the user `uid`:`gid` (`chown -R`), as what that
/// user's own server or `div run` would have made.
fn chown_all(path: &Path, uid: u32, gid: u32) {
    let chowned = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(path)
        .status()
        .expect("chown runs");
    assert!(chowned.success(), "chown -R {}", path.display());
}

/// Copies a built binary where the user can run it (the target directory may not be).
fn install(bin: &Path, from: &str) -> PathBuf {
    let from = Path::new(from);
    let to = bin.join(from.file_name().expect("a file name"));
    std::fs::copy(from, &to).expect("the binary copies");
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    to
}

/// The server process and its home: killed when the test ends however it ends, and every run
/// it placed stopped then ([`crate::harness::stop_runs_left`]).
pub(crate) struct Serving(Child, PathBuf);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        crate::harness::stop_runs_left(&self.1);
    }
}

/// Whether the tests run as root (else nothing here can be set up: each test says so and
/// returns).
pub(crate) fn as_root() -> bool {
    own_uid() == Some(0)
}

/// Whether a user can be made to run the server as (the tests run as root); if not, the
/// test is skipped, and says so (as a test's own lines would).
#[allow(clippy::print_stdout)]
pub(crate) fn user_can_be_made() -> bool {
    let root = as_root();
    if !root {
        println!(
            "skipped: the tests do not run as root, so no user can be made to run the server as"
        );
    }
    root
}

/// `div-serve` started as the user `div-runner` (made with `useradd -m` if missing) on the
/// home `dir/state/home`, with its binaries copied to `dir/bin`; `dir` is made readable to
/// all. The server, a client of it, and the user's uid and gid. Called again on the same
/// `dir` once the first server is gone, it starts another on the same home.
pub(crate) async fn serve_as_user(dir: &Path) -> (Serving, Server, u32, u32) {
    // Made once; later runs find it there.
    let _ = Command::new("useradd").args(["-m", USER]).output();
    let (uid, gid) = (id("-u"), id("-g"));
    assert_ne!(uid, 0);

    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let serve = install(&bin, env!("CARGO_BIN_EXE_div-serve"));
    let supervise = install(&bin, env!("CARGO_BIN_EXE_div-supervise"));
    let state = dir.join("state");
    std::fs::create_dir_all(&state).expect("state");
    std::os::unix::fs::chown(&state, Some(uid), Some(gid)).expect("chown");
    let home = state.join("home");
    let out_path = dir.join("serve.out");
    let out = std::fs::File::create(&out_path).expect("serve.out");

    // setpriv execs the server itself, so this child is the server.
    let child = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "--",
        ])
        .arg(&serve)
        .arg(&home)
        .arg(&supervise)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .current_dir(&state)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("a second handle"))
        .stderr(out)
        .spawn()
        .expect("setpriv starts");
    let serving = Serving(child, home.clone());
    let server = Server::external(&home);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(
        server.try_request("GET", "/v1/health", None, &[]).await,
        Ok((200, _))
    ) {
        assert!(
            Instant::now() < deadline,
            "the server never came up as `{USER}`: {}",
            std::fs::read_to_string(&out_path).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (serving, server, uid, gid)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_control_plane_runs_as_an_unprivileged_user() {
    if !user_can_be_made() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let (serving, server, uid, _) = serve_as_user(dir.path()).await;
    let home = server.home.clone();
    let status = std::fs::read_to_string(format!("/proc/{}/status", serving.0.id()))
        .expect("the server's status");
    assert_eq!(uid_of(&status), Some(uid), "the server is not `{USER}`");
    assert_eq!(std::fs::metadata(&home).expect("home").uid(), uid);

    // A run really runs, as the user, in the sandbox.
    let (status, run) = server
        .create_run(
            "echo uid $(id -u); echo in $(pwd); echo kept > /workspace/out; cat /workspace/out",
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id_ = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id_).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let log = server.log_text(&id_).await;
    assert!(log.contains(&format!("uid {uid}\n")), "{log}");
    assert!(log.contains("kept\n"), "{log}");
    if log.contains("div: no sandbox") {
        println!("bubblewrap does not work for `{USER}` here: the run was not sandboxed");
    } else {
        // It shipped nothing, so it starts in the image's working directory, `/`.
        assert!(log.contains("in /\n"), "{log}");
    }
    let run_dir = home.join("runs").join(&id_);
    let end = std::fs::metadata(run_dir.join("end.json")).expect("end.json");
    assert_eq!(end.uid(), uid, "the supervisor did not run as `{USER}`");
    let spec: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("spec.json")).expect("spec.json"))
            .expect("spec.json is JSON");
    assert_eq!(
        spec["cgroups"],
        json!({"memory": null, "cpu": null, "pids": null}),
        "an unprivileged server in root's cgroup may make none"
    );

    // A memory-hungry one is killed by the polling limit.
    let (_, run) = server
        .create_run(
            "python3 -c 'x = bytearray(3 << 30); print(len(x))'",
            json!({}),
        )
        .await;
    let ended = server.wait_end(run["id"].as_str().expect("an id")).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 137, "{ended}");
    assert_eq!(ended["reason"], "killed (out of memory, or stopped)");
    drop(serving);
}

/// Issue 15: an unprivileged server's runs get an overlay `/workspace` too, not a copy of
/// the committed code: the supervisor mounts it in a user namespace of its own in which it
/// stays its user. The run is still its user, sees the code, writes to it, deletes from it,
/// and none of it reaches the committed code or the host's `run-dir/workspace` (nothing is
/// copied, nothing is mounted on the host); its writes are in its upper layer, and gone
/// when it ends.
#[tokio::test(flavor = "multi_thread")]
async fn an_unprivileged_servers_runs_get_an_overlay_workspace_never_the_committed_code() {
    if !user_can_be_made() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let (serving, server, uid, gid) = serve_as_user(dir.path()).await;
    let code = server
        .code(&[
            ("train.py", "print('original')\n"),
            ("data/keep.txt", "keep\n"),
        ])
        .await;
    // As `div run` would have committed it: the server's user's files.
    let volume = server.home.join("volumes/tests-code");
    chown_all(&volume, uid, gid);
    let committed = volume.join(code["path"].as_str().expect("a path"));
    let (status, run) = server
        .create_run(
            "if grep -q ' /workspace .* - overlay ' /proc/self/mountinfo; then echo overlay; else echo copied; fi; \
             id -u; echo changed >> train.py; rm data/keep.txt; mkdir new && echo x > new/f; \
             cat train.py; ls data | wc -l; echo ready; while [ ! -e /tmp/go ]; do sleep 0.05; done",
            json!({"code": code}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "ready\n").await;
    let log = server.log_text(&id).await;
    if log.contains("div: no sandbox") {
        println!("bubblewrap does not work for `{USER}` here: nothing to check");
        return;
    }
    assert!(
        log.contains(&format!(
            "overlay\n{uid}\nprint('original')\nchanged\n0\nready\n"
        )),
        "{log}"
    );
    let run_dir = server.home.join("runs").join(&id);
    crate::harness::assert_overlay_not_copied(&run_dir);
    let unchanged = || {
        assert_eq!(
            std::fs::read_to_string(committed.join("train.py")).expect("train.py"),
            "print('original')\n"
        );
        assert_eq!(
            std::fs::read_to_string(committed.join("data/keep.txt")).expect("keep.txt"),
            "keep\n"
        );
        assert!(!committed.join("new").exists());
    };
    unchanged();
    std::fs::write(crate::harness::in_run(&run_dir, "tmp/go"), b"").expect("the run's /tmp");
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    unchanged();
    // Its upper layer goes with it: its places are let go just after its end is recorded
    // (asserted at once, this failed from a fresh clone: the supervisor had not yet let it go).
    crate::retention::until("the run's overlay let go", || {
        !run_dir.join("overlay").exists()
    })
    .await;

    // The capabilities the supervisor's user namespace gives it are not the run's: it has
    // none, can make no user namespace, and can mount nothing.
    let log = server
        .run_to_success(
            "grep CapEff /proc/self/status; unshare -Ur true 2>/dev/null && echo made-a-user-namespace; \
             mount -t tmpfs t /workspace 2>/dev/null && echo mounted; \
             unshare -m true 2>/dev/null && echo made-a-mount-namespace; echo done",
            json!({"code": code}),
        )
        .await;
    assert!(log.ends_with("CapEff:\t0000000000000000\ndone\n"), "{log}");

    // From inside its user namespace, the supervisor still holds a run to its memory (by
    // polling the run's processes, which are in a user namespace inside it).
    let (_, hungry) = server
        .create_run(
            "python3 -c 'x = bytearray(3 << 30); print(len(x))'",
            json!({"code": code}),
        )
        .await;
    let ended = server.wait_end(hungry["id"].as_str().expect("an id")).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 137, "{ended}");
    drop(serving);
}

/// A pack sent to an unprivileged server is stored whole under each blob's name and committed
/// into a tree, with nothing left beside the blobs: each is written into a file with no name and
/// then named, which before Linux 6.10 a server without `CAP_DAC_READ_SEARCH` does through
/// `/proc/self/fd` rather than by the descriptor itself.
#[tokio::test(flavor = "multi_thread")]
async fn an_unprivileged_server_stores_a_pack_whole() {
    if !user_can_be_made() {
        return;
    }
    use crate::hostile::{commit_two_and_read_back, pack, packed, volume_with_empty_blob};
    let dir = tempfile::tempdir().expect("a temp dir");
    let (_serving, server, uid, _gid) = serve_as_user(dir.path()).await;
    volume_with_empty_blob(&server).await;
    let (a, b) = (packed(b"alpha\n"), packed(&vec![9u8; 300_000]));
    let (status, answer) = pack(&server, "vol", div_api::pack_frame(&[a.clone(), b.clone()])).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stored"], 2, "{answer}");
    let blobs = server.home.join("blobs/vol");
    for blob in [&a, &b] {
        let meta = std::fs::symlink_metadata(blobs.join(&blob.hash)).expect("the blob");
        assert!(meta.is_file());
        assert_eq!(meta.uid(), uid, "written by the server's user");
        assert_eq!(
            std::fs::read(blobs.join(&blob.hash)).expect("read"),
            blob.data
        );
    }
    let left: Vec<_> = std::fs::read_dir(blobs.join("partial"))
        .expect("the partial folder")
        .collect();
    assert!(left.is_empty(), "nothing left beside the blobs: {left:?}");
    commit_two_and_read_back(&server, "code/1", &a, &b).await;
}

/// The folders in `home` a start-up probe of overlays is made in.
fn probes_in(home: &Path) -> Vec<String> {
    std::fs::read_dir(home)
        .expect("the home")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("overlay-probe-"))
        .collect()
}

/// An unprivileged server's start-up probe of overlays leaves nothing in its home. overlayfs
/// makes folders in its work folder with mode 0 (`work/work`, and `work/work/incompat` of a
/// `volatile` mount); root and a supervisor in its own user namespace remove them anyway,
/// the server's user did not, and each start of `div server run` as a user left an
/// `overlay-probe-PID` behind. What a server killed in its probe left is removed at the next
/// start.
#[tokio::test(flavor = "multi_thread")]
async fn an_unprivileged_server_leaves_no_probe_in_its_home() {
    use std::os::unix::fs::PermissionsExt;
    if !user_can_be_made() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let (serving, server, uid, gid) = serve_as_user(dir.path()).await;
    let home = server.home.clone();
    // The probe is over before the server answers.
    assert_eq!(
        probes_in(&home),
        Vec::<String>::new(),
        "the probe's folder is left"
    );
    // A run still gets an overlay: the probe mounted one (and so overlayfs made its folders
    // of mode 0), and found that it works.
    let code = server.code(&[("train.py", "print('hi')\n")]).await;
    chown_all(&home.join("volumes/tests-code"), uid, gid);
    let log = server
        .run_to_success(
            "if grep -q ' /workspace .* - overlay ' /proc/self/mountinfo; then echo overlay; fi; echo done",
            json!({"code": code}),
        )
        .await;
    if log.contains("div: no sandbox") {
        println!("bubblewrap does not work for `{USER}` here: no overlay is probed");
        return;
    }
    assert!(log.ends_with("overlay\ndone\n"), "{log}");
    drop(serving);

    // What a server killed in its probe leaves, made as the kernel leaves it: the user's,
    // folders of mode 0 inside.
    let stale = home.join("overlay-probe-4194304");
    let volatile = stale.join("overlay/work/work/incompat/volatile");
    std::fs::create_dir_all(&volatile).expect("the stale probe");
    std::fs::create_dir_all(stale.join("lower")).expect("lower");
    chown_all(&stale, uid, gid);
    for closed in [
        &volatile,
        &stale.join("overlay/work/work/incompat"),
        &stale.join("overlay/work/work"),
    ] {
        std::fs::set_permissions(closed, std::fs::Permissions::from_mode(0o000)).expect("chmod 0");
    }
    let (serving, _server, _, _) = serve_as_user(dir.path()).await;
    assert_eq!(
        probes_in(&home),
        Vec::<String>::new(),
        "a stale probe's folder is left"
    );
    drop(serving);
}
