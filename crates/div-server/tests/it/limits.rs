//! A run held to its sizing: its cores by a cgroup CPU quota as well as affinity; and what the
//! log says of an image the machine does not use.

use serde_json::{Value, json};

use crate::harness::{HOST_LINE, Server};

/// Sets its affinity to every core, then keeps two processes busy for 3 s each, and prints
/// the CPU time they got and the wall time it took.
const GREEDY: &str = r#"python3 -c '
import os, subprocess, time
os.sched_setaffinity(0, range(os.cpu_count()))
print("cores", len(os.sched_getaffinity(0)), flush=True)
start = time.time()
busy = [subprocess.Popen(["python3", "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"]) for _ in range(2)]
for p in busy: p.wait()
wall = time.time() - start
t = os.times()
print("cpu", t.children_user + t.children_system, "wall", wall, flush=True)
'"#;

/// The pid of a process of run `id`, found by its environment.
fn a_pid_of(id: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .find(|e| {
            std::fs::read(e.path().join("environ")).is_ok_and(|env| {
                String::from_utf8_lossy(&env).contains(&format!("DIVERGENT_RUN_ID={id}"))
            })
        })
        .and_then(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_given_one_core_gets_about_one_even_when_it_widens_its_affinity() {
    let server = Server::start().await;
    let (status, run) = server.create_run(GREEDY, json!({"cpu": 1})).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["cores"], 1, "{run}");
    let id = run["id"].as_str().expect("an id");
    server.wait_log(id, "cores ").await;
    // Where the server found a CPU cgroup, the run is in its own, with a quota of one core.
    let spec: Value = serde_json::from_slice(
        &std::fs::read(server.home.join("runs").join(id).join("spec.json")).expect("spec.json"),
    )
    .expect("spec.json is JSON");
    if !spec["cgroups"]["cpu"].is_null() {
        let pid = a_pid_of(id).expect("a process of the run");
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let mine = format!("/div-{id}");
        assert!(
            cgroups.lines().any(|l| l
                .split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "cpu"))
                && l.ends_with(&mine)
                || l.starts_with("0::") && l.ends_with(&mine)),
            "the run is not in its CPU cgroup: {cgroups}"
        );
        let parent =
            std::path::PathBuf::from(spec["cgroups"]["cpu"]["dir"].as_str().expect("a dir"));
        let dir = parent.join(format!("div-{id}"));
        // The supervisor entered the cgroup only to start the run, and left it.
        let members = std::fs::read_to_string(dir.join("cgroup.procs")).expect("cgroup.procs");
        assert!(!members.trim().is_empty(), "the run's cgroup is empty");
        for pid in members.lines() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&cmdline).contains("supervise"),
                "the supervisor is still in the run's cgroup: {pid}"
            );
        }
        let quota = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
            .or_else(|_| std::fs::read_to_string(dir.join("cpu.max")))
            .expect("a quota file");
        assert!(
            quota.trim() == "100000" || quota.trim() == "100000 100000",
            "{quota}"
        );
    } else {
        println!("no CPU cgroup here: the run is held by affinity alone");
    }
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let log = server.log_text(id).await;
    let line = log
        .lines()
        .find(|l| l.starts_with("cpu "))
        .unwrap_or_else(|| panic!("no cpu line: {log}"));
    let fields: Vec<&str> = line.split(' ').collect();
    let cpu: f64 = fields[1].parse().expect("cpu seconds");
    let wall: f64 = fields[3].parse().expect("wall seconds");
    println!("the run said: {line}");
    // Two busy processes on one core's worth: about 1 core (generously, at most 1.5).
    assert!(cpu / wall <= 1.5, "{cpu} s of CPU in {wall} s: {log}");
    assert!(cpu > 0.0, "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_naming_an_image_that_cannot_be_reached_is_refused_and_nothing_is_created() {
    let server = Server::start().await;
    // Port 1 on loopback: nothing listens there.
    let (status, body) = server
        .create_run("echo hi", json!({"image": "127.0.0.1:1/nothing:1"}))
        .await;
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the image cannot be used: cannot reach the registry `127.0.0.1:1` for `127.0.0.1:1/nothing:1`"),
        "{body}"
    );
    let (_, list) = server.request("GET", "/v1/runs", None).await;
    assert_eq!(list["runs"], json!([]), "{list}");
    let runs = server.home.join("runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "a run directory was left"
    );
    // A reference that is not one is refused in plain words.
    let (status, body) = server
        .create_run("echo hi", json!({"image": "Not A Ref"}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("`Not A Ref` is not an image reference"),
        "{body}"
    );
    // A run that names no image runs on this machine's system, standing in for the default
    // image, and its first line says so; its record names the default image. (One naming the
    // default image is pulled like any other:
    // `image::pull::an_explicitly_named_default_image_is_pulled_never_replaced`.)
    let (_, run) = server.create_run("echo hi", json!({})).await;
    assert_eq!(
        run["image"], "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime",
        "{run}"
    );
    let id = run["id"].as_str().expect("an id");
    server.wait_end(id).await;
    assert_eq!(server.log_text(id).await, format!("{HOST_LINE}hi\n"));
}

/// The pid of the process whose arguments include `arg` exactly.
fn pid_with_arg(arg: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .find(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
        })
        .and_then(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_supervisors_run_goes_with_its_cgroups() {
    // Unsandboxed, so the run does not die with its supervisor on its own.
    let server = Server::start_with(None, div_server::SandboxMode::None).await;
    let (_, run) = server.create_run("sleep 1000", json!({})).await;
    let id = run["id"].as_str().expect("an id");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while a_pid_of(id).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let run_dir = server.home.join("runs").join(id);
    let spec: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("spec.json")).expect("spec.json"))
            .expect("spec.json is JSON");
    let supervisor = pid_with_arg(&run_dir.display().to_string()).expect("the supervisor");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &supervisor.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["reason"], "the supervisor was lost", "{ended}");
    if spec["cgroups"] == json!({"memory": null, "cpu": null}) {
        println!("no cgroups here: a lost supervisor's unsandboxed run is not found again");
        return;
    }
    assert_eq!(a_pid_of(id), None, "the run outlived its lost supervisor");
}
