//! How runs on the cluster end: a ceiling hit and never overspent, the job's time limit, a
//! stop (with the run's grace), `scancel` outside div, a server killed mid-job.

use std::process::Command;

use serde_json::json;

use super::{Cluster, cluster, text};

#[tokio::test(flavor = "multi_thread")]
async fn a_small_ceiling_is_hit_and_never_overspent() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let id = c
        .place("sleep 600", json!({"max_spend_cents": 1, "name": "cap"}))
        .await;
    let run = c.wait_end(&id).await;
    assert_eq!(run["status"], "hit_ceiling", "{run}");
    assert!(run["spent_cents"].as_i64().is_some_and(|s| s <= 1), "{run}");
}

/// The ceiling is also the job's own `--time` (what it buys, plus a minute so div's stop comes
/// first): Slurm holds the limit itself, and enforces it even while div-server is down.
#[tokio::test(flavor = "multi_thread")]
async fn the_jobs_time_limit_is_what_the_ceiling_buys_so_slurm_holds_it_too() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let id = c.place("sleep 600", json!({"max_spend_cents": 100})).await;
    let job = c.job(&id).await;
    let run = c.run(&id).await;
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
    c.stop(&id).await;
    c.wait_for(&id, "ended canceled", |r| r["status"] == "canceled")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_cancels_a_run_on_slurm() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let id = c.place("sleep 600", json!({})).await;
    c.job(&id).await;
    c.stop(&id).await;
    c.wait_for(&id, "ended canceled", |r| r["status"] == "canceled")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_on_slurm_gives_the_run_its_sigterm_and_grace_to_write_its_result() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let id = c
        .place(
            "trap 'echo \"{\\\"epoch\\\": 18}\" > \"$DIVERGENT_RESULT_PATH\"; echo saved; exit 0' TERM; echo started; while :; do sleep 0.05; done",
            json!({
                "checks": ["epoch>=18"],
                "env": [{"key": "DIVERGENT_STOP_GRACE", "value": "5"}],
            }),
        )
        .await;
    c.job(&id).await;
    c.wait_file(&id, "nodes/0/log", "started\n").await;
    c.stop(&id).await;
    let run = c
        .wait_for(&id, "ended canceled", |r| r["status"] == "canceled")
        .await;
    let node_log =
        std::fs::read_to_string(c.run_dir(&id).join("nodes/0/log")).expect("node 0's log");
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

#[tokio::test(flavor = "multi_thread")]
async fn scancel_outside_div_ends_the_run_canceled_with_its_spend() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let id = c.place("sleep 600", json!({})).await;
    let job = c.job(&id).await;
    let out = Command::new("scancel")
        .arg(&job)
        .output()
        .expect("scancel runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for(&id, "ended canceled", |r| {
        r["status"] == "canceled" && r["spent_cents"].is_i64()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_mid_job_reconciles_when_it_starts_again() {
    if !cluster() {
        return;
    }
    let mut c = Cluster::start().await;
    let id = c
        .place("sh -c 'sleep 3; echo survived; exit 4'", json!({}))
        .await;
    c.job(&id).await;
    // Killed as a crash would; the one started next reads the job's end from the run
    // directory.
    c.kill_and_restart().await;
    c.wait_for(&id, "reconciled as failed with exit 4", |r| {
        r["status"] == "failed" && r["exit_code"] == 4
    })
    .await;
    let log = c.server().log_text(&id).await;
    assert!(log.contains("survived"), "{log}");
}
