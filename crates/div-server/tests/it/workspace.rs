//! A run's `/workspace`: its own and writable, never the committed code it starts from, and
//! (under a root server, where this kernel lets it) an overlay rather than a copy.

use serde_json::json;

use crate::harness::{HOST_LINE, Server};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_run_does_to_its_workspace_never_reaches_the_committed_code() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let code = server
        .code(&[
            ("train.py", "print('original')\n"),
            ("data/keep.txt", "keep\n"),
            ("data/big.bin", &"z".repeat(100_000)),
        ])
        .await;
    let committed = server
        .home
        .join("volumes/tests-code")
        .join(code["path"].as_str().expect("a path"));
    // The attack: append to a file, truncate another, delete one, change a mode, add a
    // folder, and try to reach the committed code by its host path.
    let (status, run) = server
        .create_run(
            &format!(
                "echo changed >> train.py; : > data/big.bin; rm data/keep.txt; chmod 777 train.py; \
                 mkdir -p new && echo x > new/f; {{ echo evil > '{}/train.py'; }} 2>/dev/null; \
                 cat train.py; ls data; echo ready; while [ ! -e /tmp/go ]; do sleep 0.05; done",
                committed.display()
            ),
            json!({"code": code}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "ready\n").await;
    let run_dir = server.home.join("runs").join(&id);
    if is_root() {
        // An overlay, mounted in the run's own mount namespace.
        crate::harness::assert_overlay_not_copied(&run_dir);
    }
    let log = server.log_text(&id).await;
    assert!(
        log.contains("print('original')\nchanged\nbig.bin\nready\n"),
        "{log}"
    );
    // The committed code is as it was, while the run goes.
    let unchanged = || {
        assert_eq!(
            std::fs::read_to_string(committed.join("train.py")).expect("train.py"),
            "print('original')\n"
        );
        assert_eq!(
            std::fs::read_to_string(committed.join("data/keep.txt")).expect("keep.txt"),
            "keep\n"
        );
        assert_eq!(
            std::fs::metadata(committed.join("data/big.bin"))
                .expect("big.bin")
                .len(),
            100_000
        );
        assert!(!committed.join("new").exists());
    };
    unchanged();
    std::fs::write(crate::harness::in_run(&run_dir, "tmp/go"), b"").expect("the run's /tmp");
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    unchanged();
    // What the run wrote goes with it: its places are let go just after its end is recorded.
    crate::retention::until("the run's overlay and workspace let go", || {
        !run_dir.join("overlay").exists() && !run_dir.join("workspace").exists()
    })
    .await;

    // The next run of the same code starts from it as committed.
    let (_, again) = server
        .create_run(
            "cat train.py; cat data/keep.txt; wc -c < data/big.bin; ls new 2>&1 || echo no-new",
            json!({"code": code}),
        )
        .await;
    let again = again["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&again).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let log = server.log_text(&again).await;
    assert!(
        log.starts_with(&format!("{HOST_LINE}print('original')\nkeep\n100000\n"))
            && log.ends_with("no-new\n"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_runs_of_one_snapshot_at_once_each_see_only_their_own_writes() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let code = server.code(&[("f", "base\n")]).await;
    let script = |me: &str| {
        format!(
            "echo {me} >> f; echo {me}-only > mine; while [ ! -e /tmp/go ]; do sleep 0.05; done; cat f; ls"
        )
    };
    let (_, a) = server.create_run(&script("a"), json!({"code": code})).await;
    let (_, b) = server.create_run(&script("b"), json!({"code": code})).await;
    let ids = [a, b].map(|r| r["id"].as_str().expect("an id").to_owned());
    for id in &ids {
        server.wait_running(id).await;
    }
    // Both have written before either ends.
    for id in &ids {
        let mine = server.home.join("runs").join(id);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !(crate::harness::in_run(&mine, "overlay/upper/mine").exists()
            || mine.join("workspace/mine").exists())
        {
            assert!(std::time::Instant::now() < deadline, "{id} never wrote");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        std::fs::write(crate::harness::in_run(&mine, "tmp/go"), b"").expect("go");
    }
    for (id, me) in ids.iter().zip(["a", "b"]) {
        let ended = server.wait_end(id).await;
        assert_eq!(ended["status"], "succeeded", "{ended}");
        assert_eq!(
            server.log_text(id).await,
            format!("{HOST_LINE}base\n{me}\nf\nmine\n")
        );
    }
}

/// Under a root server, a host with `python3` but no `python` gets its `python` link laid
/// over `/usr/local/bin` by the supervisor, in its own mount namespace: the run finds it and
/// every host program of that folder, cannot write there, and the host sees no mount and no
/// new file, while the run goes or after.
#[tokio::test(flavor = "multi_thread")]
async fn python_is_laid_over_usr_local_bin_for_the_run_alone() {
    let host_has_python = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| std::path::Path::new(d).join("python").exists());
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let host_entries = std::fs::read_dir("/usr/local/bin").map_or(0, |d| d.count());
    let (status, run) = server
        .create_run(
            "python -c 'print(6 * 7)'; ls /usr/local/bin | wc -l; \
             touch /usr/local/bin/planted 2>/dev/null || echo read-only; \
             echo ready; while [ ! -e /tmp/go ]; do sleep 0.05; done",
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "ready\n").await;
    let mounted_here = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .lines()
            .any(|l| l.split(' ').nth(4) == Some("/usr/local/bin"))
    };
    assert!(!mounted_here(), "the shim is mounted on the host");
    let run_dir = server.home.join("runs").join(&id);
    std::fs::write(crate::harness::in_run(&run_dir, "tmp/go"), b"").expect("the run's /tmp");
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let log = server.log_text(&id).await;
    let seen = if host_has_python || !is_root() {
        host_entries
    } else {
        host_entries + 1
    };
    if std::path::Path::new("/usr/local/bin").is_dir() {
        assert!(
            log.contains(&format!("42\n{seen}\nread-only\nready\n")),
            "{log}"
        );
    }
    assert!(!mounted_here());
    assert!(!std::path::Path::new("/usr/local/bin/planted").exists());
    if !host_has_python {
        assert!(!std::path::Path::new("/usr/local/bin/python").exists());
    }
}

/// The folder laid over `/usr/local/bin` (`home/shim`) is the server's, not the run's: a run
/// that reads its host path from the mount table and tries to plant a program there, swap its
/// `python` for a link to a shell, or put a fifo beside it, reaches nothing; the folder is as
/// it was, and the next run's `python` is still the host's `python3`.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_cannot_reach_the_folder_laid_over_usr_local_bin() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let shim = server.home.join("shim");
    let attack = format!(
        "grep -o 'lowerdir=[^:,]*' /proc/self/mountinfo | head -1; \
         for d in {shim} $(grep -o 'lowerdir=[^:,]*' /proc/self/mountinfo | cut -d= -f2); do \
           ls \"$d\" >/dev/null 2>&1 && echo \"listed $d\"; \
           echo 'echo owned' > \"$d/planted\" 2>/dev/null && echo \"planted in $d\"; \
           ln -sf /bin/sh \"$d/python\" 2>/dev/null && echo \"swapped in $d\"; \
           mkfifo \"$d/trap\" 2>/dev/null && echo \"fifo in $d\"; \
         done; \
         ln -sf /bin/sh /usr/local/bin/python 2>/dev/null && echo swapped-usr-local; \
         echo done",
        shim = shim.display()
    );
    let log = server.run_to_success(&attack, json!({})).await;
    for reached in [
        "listed ",
        "planted ",
        "swapped ",
        "fifo ",
        "swapped-usr-local",
    ] {
        assert!(!log.contains(reached), "the run reached the shim: {log}");
    }
    assert!(log.ends_with("done\n"), "{log}");
    if shim.exists() {
        let names: Vec<_> = std::fs::read_dir(&shim)
            .expect("the shim folder")
            .map(|e| e.expect("an entry").file_name())
            .collect();
        assert_eq!(names, ["python"], "the shim folder changed");
        let target = std::fs::read_link(shim.join("python")).expect("the python link");
        assert!(
            target.ends_with("python3"),
            "python points at {}",
            target.display()
        );
        let log = server
            .run_to_success("python -c 'print(6 * 7)'", json!({}))
            .await;
        assert!(log.ends_with("42\n"), "{log}");
    }
}

/// Under a root server, a run's `/workspace` overlay is mounted `volatile`, so its unmount
/// when the supervisor exits does not sync the whole file system beneath it (a run that
/// printed one line took 0.68 s to end after a first ship left 263 MB unwritten): the run
/// itself reads the option in its mount table (`volatile`, which Linux 6 shows as
/// `fsync=volatile`). Its writes still behave (they are never kept in any case).
#[tokio::test(flavor = "multi_thread")]
async fn the_workspace_overlay_is_mounted_volatile() {
    if !is_root() {
        return; // an unprivileged server copies `/workspace`: no overlay to look at
    }
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let code = server.code(&[("train.py", "print('x')\n")]).await;
    let log = server
        .run_to_success(
            "grep -q ' /workspace .* - overlay ' /proc/self/mountinfo || echo copied; \
             grep ' /workspace ' /proc/self/mountinfo | grep -o ' - overlay .*' | tr ',' '\\n' \
             | grep -qxE '(fsync=)?volatile' && echo volatile; \
             echo more >> train.py; sync; tail -1 train.py",
            json!({"code": code}),
        )
        .await;
    if log.ends_with("copied\nmore\n") {
        // This server's start found no working overlay (its probe failed): it copies.
        eprintln!("no overlay /workspace on this server: nothing to check");
        return;
    }
    assert!(log.ends_with("volatile\nmore\n"), "{log}");
}
