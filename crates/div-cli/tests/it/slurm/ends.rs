//! How runs on the cluster end: a ceiling hit and never overspent, the job's time limit,
//! `div stop` (with the run's grace), `scancel` outside div, a server killed mid-job.

use std::process::Command;

use div_test_support::wait_until;

use super::{Cluster, PATIENCE, cluster, detach, text};

#[test]
fn a_small_ceiling_is_hit_and_never_overspent() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let out = c.div(&[
        "run",
        "--gpu",
        "h100",
        "--max-spend",
        "0.01",
        "--name",
        "cap",
        "--",
        "sleep",
        "600",
    ]);
    assert_eq!(out.status.code(), Some(205), "{}", text(&out.stderr));
    let run = c.run_json("cap");
    assert_eq!(run["status"], "hit_ceiling");
    assert!(run["spent_cents"].as_i64().is_some_and(|s| s <= 1), "{run}");
}

/// The ceiling is also the job's own `--time` (what it buys, plus a minute so div's stop comes
/// first): Slurm holds the limit itself, and enforces it even while div-server is down.
#[test]
fn the_jobs_time_limit_is_what_the_ceiling_buys_so_slurm_holds_it_too() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(
        &c,
        &["--gpu", "h100", "--max-spend", "1", "--", "sleep", "600"],
    );
    let job = c.job(&name);
    let run = c.run_json(&name);
    let cents_per_hour = run["cents_per_hour"].as_u64().expect("a rate");
    let buys_seconds = (100 * 3600u64).div_ceil(cents_per_hour);
    let minutes = buys_seconds.div_ceil(60) + 1;
    assert!(minutes < 24 * 60, "{run}");
    let shown = Command::new("scontrol")
        .args(["show", "job", "-o", &job])
        .output()
        .expect("scontrol runs");
    let shown = text(&shown.stdout);
    let want = format!("TimeLimit={:02}:{:02}:00", minutes / 60, minutes % 60);
    assert!(shown.contains(&want), "{want} in {shown}");
    let out = c.div(&["stop", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| r["status"] == "canceled");
}

#[test]
fn div_stop_cancels_a_run_on_slurm() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(&c, &["--gpu", "h100", "--", "sleep", "600"]);
    c.job(&name);
    let out = c.div(&["stop", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| r["status"] == "canceled");
}

#[test]
fn div_stop_on_slurm_gives_the_run_its_sigterm_and_grace_to_write_its_result() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(
        &c,
        &[
            "--gpu",
            "h100",
            "--check",
            "epoch>=18",
            "--env",
            "DIVERGENT_STOP_GRACE=5",
            "--",
            "trap 'echo \"{\\\"epoch\\\": 18}\" > \"$DIVERGENT_RESULT_PATH\"; echo saved; exit 0' TERM; echo started; while :; do sleep 0.05; done",
        ],
    );
    c.job(&name);
    let log = c.run_dir(&name).join("nodes/0/log");
    wait_until(format!("{name} started"), PATIENCE, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("started\n") {
            Ok(())
        } else {
            Err(text)
        }
    });
    let out = c.div(&["stop", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| r["status"] == "canceled");
    let run = c.run_json(&name);
    let node_log = std::fs::read_to_string(&log).expect("node 0's log");
    assert!(
        node_log.contains("div: it was asked to stop: SIGTERM sent to the run; SIGKILL in 5 s if it has not exited\n"),
        "{node_log}"
    );
    assert!(node_log.contains("\nsaved\n"), "{node_log}");
    assert_eq!(
        run["verdicts"][0]["line"], "check passed: epoch >= 18 (found 18)",
        "{run}"
    );
}

#[test]
fn scancel_outside_div_ends_the_run_canceled_with_its_spend() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(&c, &["--gpu", "h100", "--", "sleep", "600"]);
    let job = c.job(&name);
    let out = Command::new("scancel")
        .arg(&job)
        .output()
        .expect("scancel runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| {
        r["status"] == "canceled" && r["spent_cents"].is_i64()
    });
}

#[test]
fn a_server_killed_mid_job_reconciles_when_it_starts_again() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(
        &c,
        &[
            "--gpu",
            "h100",
            "--",
            "sh",
            "-c",
            "sleep 3; echo survived; exit 4",
        ],
    );
    c.job(&name);
    let pid: i32 = std::fs::read_to_string(c.home().join("server.pid"))
        .expect("server.pid")
        .trim()
        .parse()
        .expect("a pid");
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    // `div runs` starts it again; it reads the job's end from the run directory.
    c.wait_for(&name, "reconciled as failed with exit 4", |r| {
        r["status"] == "failed" && r["exit_code"] == 4
    });
    let out = c.div(&["logs", &name]);
    assert!(
        text(&out.stdout).contains("survived"),
        "{}",
        text(&out.stdout)
    );
}
