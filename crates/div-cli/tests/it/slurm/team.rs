//! A team's runs on Slurm (docs/team.md): a member mapped to a Slurm account has their jobs
//! charged to it (`--account`), and every job's comment names the member who placed it, so the
//! cluster's own accounting (`sacct`, `squeue`) sees who ran what.

use std::process::Command;

use super::{Cluster, Scancel, cluster, text};

#[test]
fn a_members_job_is_charged_to_their_account_and_its_comment_names_them() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    // Plain HTTP is let be on loopback: the test's members are on this machine.
    let out = c.div(&["server", "start", "--listen", &listen]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = c.div(&[
        "server",
        "users",
        "add",
        "alice",
        "--role",
        "member",
        "--slurm-account",
        "vision",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_owned();
    c.write(
        "train.py",
        "import time\nprint('training', flush=True)\ntime.sleep(600)\n",
    );
    let out = c
        .command(&[
            "run", "--detach", "--name", "alices", "--gpu", "h100", "--", "python3", "train.py",
        ])
        .env("DIVERGENT_API_URL", format!("http://{listen}"))
        .env("DIVERGENT_TOKEN", &token)
        .output()
        .expect("div run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(c.run_json("alices")["placed_by"], "alice");
    let job = c.job("alices");
    let _cancel = Scancel(job.clone());
    let shown = Command::new("scontrol")
        .args(["show", "job", &job])
        .output()
        .expect("scontrol");
    let shown = text(&shown.stdout);
    assert!(shown.contains("Account=vision"), "{shown}");
    assert!(
        shown.contains("Comment=div run alices placed by alice"),
        "{shown}"
    );
    // The owner's own runs name the owner, and go to the cluster's default account.
    let owners = super::detach(
        &c,
        &[
            "--name", "owners", "--gpu", "h100", "--", "python3", "train.py",
        ],
    );
    assert_eq!(owners, "owners");
    let job = c.job("owners");
    let _cancel_too = Scancel(job.clone());
    let shown = Command::new("scontrol")
        .args(["show", "job", &job])
        .output()
        .expect("scontrol");
    let shown = text(&shown.stdout);
    assert!(
        shown.contains("Comment=div run owners placed by owner"),
        "{shown}"
    );
    assert!(!shown.contains("Account=vision"), "{shown}");
}
