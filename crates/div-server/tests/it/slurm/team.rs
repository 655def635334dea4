//! A team's runs on Slurm (docs/team.md): a member mapped to a Slurm account has their jobs
//! charged to it (`--account`), and every job's comment names the member who placed it, so the
//! cluster's own accounting (`sacct`, `squeue`) sees who ran what.

use std::process::Command;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use super::{Cluster, Scancel, cluster, text};

/// `POST /v1/runs` of `body` on the team's listener at `addr`, as the member holding `token`.
async fn place_as(addr: std::net::SocketAddr, token: &str, body: &Value) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the team's listener answers");
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("a handshake");
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method("POST")
        .uri("/v1/runs")
        .header("host", "localhost")
        .header("authorization", format!("Bearer {token}"))
        .header("idempotency-key", "alices-run")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a request");
    let resp = sender.send_request(req).await.expect("an answer");
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("the answer's body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(text(&bytes))),
    )
}

fn scontrol_show(job: &str) -> String {
    let shown = Command::new("scontrol")
        .args(["show", "job", job])
        .output()
        .expect("scontrol");
    text(&shown.stdout)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_members_job_is_charged_to_their_account_and_its_comment_names_them() {
    if !cluster() {
        return;
    }
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    // Plain HTTP is let be on loopback: the test's members are on this machine.
    let c = Cluster::start_changed("", |o| {
        o.team = Some(div_server::TeamListen { addr, tls: None });
    })
    .await;
    let (status, created) = c
        .server()
        .request(
            "POST",
            "/v1/members",
            Some(json!({"name": "alice", "role": "member", "slurm_account": "vision"})),
        )
        .await;
    assert!(matches!(status, 200 | 201), "{created}");
    let token = created["token"].as_str().expect("a token").to_owned();
    let command = "python3 -c \"import time; print('training', flush=True); time.sleep(600)\"";
    let (status, run) = place_as(
        addr,
        &token,
        &json!({
            "project": "tests", "name": "alices", "entrypoint": command, "command": command,
            "sku": "h100", "gpus": 1,
        }),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    assert_eq!(c.run(&id).await["placed_by"], "alice");
    let job = c.job(&id).await;
    let _cancel = Scancel(job.clone());
    let shown = scontrol_show(&job);
    assert!(shown.contains("Account=vision"), "{shown}");
    assert!(
        shown.contains("Comment=div run alices placed by alice"),
        "{shown}"
    );
    // The owner's own runs name the owner, and go to the cluster's default account.
    let owners = c.place(command, json!({"name": "owners"})).await;
    assert_eq!(c.run(&owners).await["name"], "owners");
    let job = c.job(&owners).await;
    let _cancel_too = Scancel(job.clone());
    let shown = scontrol_show(&job);
    assert!(
        shown.contains("Comment=div run owners placed by owner"),
        "{shown}"
    );
    assert!(!shown.contains("Account=vision"), "{shown}");
}
