//! A server on a temp home, and a small raw HTTP client over its Unix socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use div_server::{GpuSource, SandboxMode, ServerOptions, SupervisorCommand};
use http_body_util::{BodyExt, Full};
use serde_json::Value;

pub(crate) struct Server {
    pub(crate) home: PathBuf,
    _dir: Option<tempfile::TempDir>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), div_server::ServerError>>>,
}

/// The first log line of a run that names no image: this machine's own system stands in for
/// the default image (the server's `DIVERGENT_DEFAULT_IMAGE=host`, out of the box).
pub(crate) const HOST_LINE: &str = "div: no image pulled: this machine's own system stands in for pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime (DIVERGENT_DEFAULT_IMAGE=host; set it to pull to run in the image itself)\n";

pub(crate) fn options(home: &Path, gpus: Option<&str>, sandbox: SandboxMode) -> ServerOptions {
    ServerOptions {
        home: home.to_path_buf(),
        tcp: None,
        team: None,
        gpus: gpus.map_or(GpuSource::Detect, |g| GpuSource::Emulate(g.to_owned())),
        supervisor: SupervisorCommand {
            program: PathBuf::from(env!("CARGO_BIN_EXE_div-supervise")),
            args: Vec::new(),
        },
        sandbox,
        tick: div_server::DEFAULT_TICK,
        images: Default::default(),
    }
}

impl Server {
    pub(crate) async fn start() -> Server {
        Server::start_with(Some("h100:2"), SandboxMode::Auto).await
    }

    pub(crate) async fn start_with(gpus: Option<&str>, sandbox: SandboxMode) -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        let home = dir.path().join("home");
        let mut server = Server::at(options(&home, gpus, sandbox)).await;
        server._dir = Some(dir);
        server
    }

    /// As [`Server::start_with`], with `change` made to its options first (its image
    /// settings, …).
    pub(crate) async fn start_changed(
        gpus: Option<&str>,
        sandbox: SandboxMode,
        change: impl FnOnce(&mut ServerOptions),
    ) -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        let home = dir.path().join("home");
        let mut options = options(&home, gpus, sandbox);
        change(&mut options);
        let mut server = Server::at(options).await;
        server._dir = Some(dir);
        server
    }

    /// Starts a server on an existing home (a restart).
    pub(crate) async fn at(options: ServerOptions) -> Server {
        let home = options.home.clone();
        let started = std::time::Instant::now();
        let serve = |options: ServerOptions| {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(div_server::serve(options, async {
                let _ = rx.await;
            }));
            (tx, task)
        };
        let (tx, task) = serve(options.clone());
        let mut server = Server {
            home,
            _dir: None,
            shutdown: Some(tx),
            task: Some(task),
        };
        loop {
            if let Ok((200, _)) = server.try_request("GET", "/v1/health", None, &[]).await {
                break;
            }
            if server.task.as_ref().is_some_and(|t| t.is_finished()) {
                let ended = server.task.take().expect("the task").await;
                match ended {
                    // A server this process killed a moment ago (`kill`, which aborts its
                    // task) can hold its home's lock a little longer: a thread of this test
                    // process that forks meanwhile keeps a copy of the lock's descriptor until
                    // its child execs. Started again until it is free.
                    Ok(Err(div_server::ServerError::AlreadyRunning(_)))
                        if started.elapsed() < Duration::from_secs(20) =>
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let (tx, task) = serve(options.clone());
                        server.shutdown = Some(tx);
                        server.task = Some(task);
                        continue;
                    }
                    // A server that stopped (it could not start) says why.
                    other => panic!("the server stopped before it answered: {other:?}"),
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the server did not come up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }

    /// A client of a server someone else started on `home` (another process); nothing is
    /// stopped when it is dropped.
    pub(crate) fn external(home: &Path) -> Server {
        Server {
            home: home.to_path_buf(),
            _dir: None,
            shutdown: None,
            task: None,
        }
    }

    /// Stops the server as a crash would: its task is aborted, nothing is cleaned up.
    pub(crate) async fn kill(mut self) -> (PathBuf, Option<tempfile::TempDir>) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        // Its runs go on, for the test to find (and for the server it starts next to stop).
        self.shutdown = None;
        (self.home.clone(), self._dir.take())
    }

    pub(crate) fn socket(&self) -> PathBuf {
        div_server::socket_path(&self.home)
    }

    pub(crate) async fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Bytes), String> {
        self.try_request_with_headers(method, path, body, headers)
            .await
            .map(|(status, _, bytes)| (status, bytes))
    }

    /// As [`Server::try_request`], with the answer's headers too.
    pub(crate) async fn try_request_with_headers(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<(u16, hyper::HeaderMap, Bytes), String> {
        let stream = tokio::net::UnixStream::connect(self.socket())
            .await
            .map_err(|e| e.to_string())?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let answer_headers = resp.headers().clone();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, answer_headers, bytes))
    }

    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.request_with(method, path, body, &[]).await
    }

    pub(crate) async fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let (status, bytes) = self
            .try_request(
                method,
                path,
                body.map(|b| b.to_string().into_bytes()),
                headers,
            )
            .await
            .expect("the request went through");
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, value)
    }

    /// Places a run; `extra` fields override the defaults.
    pub(crate) async fn create_run(&self, command: &str, extra: Value) -> (u16, Value) {
        let mut body = serde_json::json!({
            "project": "tests",
            "entrypoint": command,
            "command": command,
            "sku": "cpu",
            "gpus": 1,
        });
        if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
            b.extend(e);
        }
        let key = format!(
            "key-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after the epoch")
                .as_nanos()
        );
        self.request_with("POST", "/v1/runs", Some(body), &[("idempotency-key", &key)])
            .await
    }

    /// Places a run of `command` (with `extra` fields), waits for its end, checks that it
    /// succeeded, and gives its log.
    pub(crate) async fn run_to_success(&self, command: &str, extra: Value) -> String {
        let (status, run) = self.create_run(command, extra).await;
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().expect("an id").to_owned();
        let ended = self.wait_end(&id).await;
        assert_eq!(ended["status"], "succeeded", "{ended}");
        self.log_text(&id).await
    }

    /// A tree of code in the volume `tests-code` (made if missing), written straight into the
    /// volume's folder: the `code` field of a run that shipped these files.
    pub(crate) async fn code(&self, files: &[(&str, &str)]) -> Value {
        let (status, volume) = self
            .request(
                "POST",
                "/v1/volumes",
                Some(serde_json::json!({"name": "tests-code"})),
            )
            .await;
        assert!(matches!(status, 200 | 201 | 409), "{status} {volume}");
        let path = format!("code/{}", files.len());
        let dir = self.home.join("volumes/tests-code").join(&path);
        for (name, text) in files {
            let file = dir.join(name);
            std::fs::create_dir_all(file.parent().expect("a folder")).expect("mkdir");
            std::fs::write(file, text).expect("the file");
        }
        std::fs::create_dir_all(&dir).expect("mkdir");
        serde_json::json!({"volume": "tests-code", "path": path})
    }

    /// Polls the run until it is running.
    pub(crate) async fn wait_running(&self, id: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, r) = self.request("GET", &format!("/v1/runs/{id}"), None).await;
            if r["status"] == "running" {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "never running: {r}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Polls the run until it has ended; returns it.
    pub(crate) async fn wait_end(&self, id: &str) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, run) = self.request("GET", &format!("/v1/runs/{id}"), None).await;
            assert_eq!(status, 200, "{run}");
            let s = run["status"].as_str().unwrap_or("");
            if s != "queued" && s != "running" {
                return run;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the run did not end: {run}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Polls until the run's log contains `needle`.
    pub(crate) async fn wait_log(&self, id: &str, needle: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if self.log_text(id).await.contains(needle) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the log never said {needle:?}: {}",
                self.log_text(id).await
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The whole log now, decoded from the frames of a non-following read.
    pub(crate) async fn log_text(&self, id: &str) -> String {
        let (_, bytes) = self
            .try_request(
                "GET",
                &format!("/v1/runs/{id}/log?offset=0&follow=false"),
                None,
                &[],
            )
            .await
            .expect("the log request went through");
        decode_chunks(&bytes)
    }
}

/// A server this harness started is stopped when the test ends, pass or panic, and so is
/// every run it placed: a run left going would go on with its home deleted under it. The
/// server is told to stop first (so it starts no queued run meanwhile; on a multi-threaded
/// runtime it is waited for), then [`stop_runs_left`]. A drop cannot let a server on the
/// test's own current-thread runtime answer, so the runs are told the way its executor tells
/// them, in their directories. A killed or external server is left as it is.
impl Drop for Server {
    fn drop(&mut self) {
        let Some(tx) = self.shutdown.take() else {
            return;
        };
        let _ = tx.send(());
        let on_workers = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if on_workers && let Some(task) = &self.task {
            let deadline = std::time::Instant::now() + Duration::from_secs(40);
            while !task.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        stop_runs_left(&self.home);
    }
}

/// Stops every run in `home` that is still going, as the local executor's `stop` does (an
/// empty `stop` in its run directory, which its supervisor looks for every 20 ms), and waits,
/// at most [`div_test_support::leftovers::STOP_WITHIN`], until no process names `home` (its
/// supervisors and their bwrap) or works in it (an unsandboxed run). What is left then is said
/// on stderr (and `.ci/leftovers` fails on it).
pub(crate) fn stop_runs_left(home: &Path) {
    use div_test_support::leftovers::{STOP_WITHIN, processes_under, say};
    let deadline = std::time::Instant::now() + STOP_WITHIN;
    loop {
        // Looked at again each time: a supervisor starting meanwhile finds its stop too.
        for dir in std::fs::read_dir(home.join("runs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = dir.path();
            if dir.is_dir() && !dir.join("end.json").exists() && !dir.join("stop").exists() {
                let _ = std::fs::write(dir.join("stop"), b"");
            }
        }
        let left = processes_under(home);
        if left.is_empty() {
            return;
        }
        if std::time::Instant::now() > deadline {
            for p in left {
                say(&format!(
                    "still going {}s after its stop: {p}",
                    STOP_WITHIN.as_secs()
                ));
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The bytes of every `chunk` frame, in order.
pub(crate) fn decode_chunks(stream: &[u8]) -> String {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        rest = &rest[nl + 1..];
        let parts: Vec<&str> = header.split(' ').collect();
        match parts.as_slice() {
            ["chunk", _, len] => {
                let len: usize = len.parse().expect("a length");
                out.extend_from_slice(&rest[..len]);
                rest = &rest[len..];
            }
            ["end", len] => {
                let len: usize = len.parse().expect("a length");
                rest = &rest[len..];
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Commits one blob as `DIR/data.bin` in `volume` (asserting the commit counts it) and reads
/// the file back: the bytes read and how many the read reported.
pub(crate) async fn commit_and_read_back(
    cp: &dyn div_api::ControlPlane,
    volume: &str,
    dir: &str,
    hash: &str,
    total: u64,
) -> (Vec<u8>, u64) {
    let tree = div_api::CommitTree {
        path: dir.into(),
        entries: vec![div_api::TreeEntry {
            path: "data.bin".into(),
            kind: div_api::EntryKind::File,
            executable: false,
            size: total,
            hash: Some(hash.to_owned()),
            target: None,
        }],
    };
    let committed = cp
        .commit_tree(volume, &tree)
        .await
        .expect("the tree commits");
    assert_eq!((committed.files, committed.bytes), (1, total));
    let mut back = Vec::new();
    let n = cp
        .read_file(volume, &format!("{dir}/data.bin"), &mut back)
        .await
        .expect("the file reads back");
    (back, n)
}

/// `rel` in the run directory `run_dir` as the run's supervisor sees it: through its own
/// mount namespace (`/proc/PID/root`), where the run's own disk is laid under its `tmp`,
/// `mnt` and `overlay` (div-server's `scratch`); on the host those folders are empty.
/// Without a live supervisor, the host's path.
pub(crate) fn in_run(run_dir: &std::path::Path, rel: &str) -> std::path::PathBuf {
    let needle = run_dir.as_os_str().as_encoded_bytes().to_vec();
    let supervisor = std::fs::read_dir("/proc").ok().and_then(|dir| {
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                    args.iter().any(|a| a.ends_with(b"supervise"))
                        && args.contains(&needle.as_slice())
                })
            })
    });
    match supervisor {
        Some(pid) => std::path::Path::new(&format!("/proc/{pid}/root"))
            .join(run_dir.strip_prefix("/").unwrap_or(run_dir))
            .join(rel),
        None => run_dir.join(rel),
    }
}

/// That the run in `run_dir`, which wrote `x` into `new/f` under its `/workspace`, has an
/// overlay there: on the host the folder under it is empty (nothing was copied, nothing is
/// mounted here), and the run's writes are in its upper layer.
pub(crate) fn assert_overlay_not_copied(run_dir: &std::path::Path) {
    let host_view: Vec<_> = std::fs::read_dir(run_dir.join("workspace"))
        .expect("the workspace folder")
        .collect();
    assert!(
        host_view.is_empty(),
        "a copy, or a mount on the host: {host_view:?}"
    );
    assert_eq!(
        std::fs::read_to_string(in_run(run_dir, "overlay/upper/new/f"))
            .expect("the run's new file"),
        "x\n"
    );
}
