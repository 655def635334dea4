//! One run cannot starve the others: a thread bomb and a fork bomb stop at their run's own
//! task limit, and a run that fills its `/tmp`, `/workspace` or own `/mnt` gets `ENOSPC`
//! itself, with the state directory on a small filesystem the test makes; runs beside them,
//! and the next, go on. Each performed for real (as root; the bombs as a `useradd` user too).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::world::{PATIENCE, Place, World, holds_lines, text};

/// A run that starts threads, and a child that forks, each until it is refused, saying so the
/// first time, and then holding on to what it has.
const BOMB_PY: &str = r#"import os, threading, time

threading.stack_size(64 * 1024)


def idle():
    time.sleep(3600)


if os.fork() == 0:
    said = False
    while True:
        try:
            os.fork()
        except OSError as e:
            if not said:
                print("fork bomb held: %s" % e, flush=True)
                said = True
            time.sleep(0.001)
said = False
while True:
    try:
        threading.Thread(target=idle, daemon=True).start()
    except RuntimeError as e:
        if not said:
            print("thread bomb held: %s" % e, flush=True)
            said = True
        time.sleep(0.01)
"#;

fn bombs_are_held_and_the_rest_goes_on(world: &World) {
    std::fs::write(world.project().join("bomb.py"), BOMB_PY).expect("bomb.py");
    let out = world.div(&[
        "run",
        "--detach",
        "--name",
        "bomb",
        // 4 emulated H100s: this machine's memory (a fork bomb of Python processes counts
        // each one's resident memory, and an unprivileged run is held to its memory by
        // polling it).
        "--gpu",
        "h100",
        "--gpus",
        "4",
        "--",
        "python3 bomb.py",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Both held by the run's own limit, in the run.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let log = world.log("bomb", None);
        if log.contains("fork bomb held: ") && log.contains("thread bomb held: ") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bombs were never held:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Another run starts and ends while they go, and so does the control plane's work.
    let second = world.div(&[
        "run",
        "--name",
        "beside",
        "--gpu",
        "cpu",
        "--",
        "echo beside ran",
    ]);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert!(holds_lines(&text(&second.stdout), &["beside ran"]));
    assert_eq!(world.run_json("beside")["status"], "succeeded");
    // And the bomb is stopped in bounded time: a deadline on the wait.
    let stopped = world.div(&["stop", "bomb"]);
    assert_eq!(stopped.status.code(), Some(0), "{}", text(&stopped.stderr));
    let since = Instant::now();
    let run = loop {
        let run = world.run_json("bomb");
        if run["status"] != "running" {
            break run;
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the bomb was not stopped within 60 s: {run}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(run["status"], "canceled", "{run}");
}

#[test]
fn a_thread_bomb_and_a_fork_bomb_are_held_by_their_runs_task_limit() {
    let world = World::alone_on_this_machine().expect("a local world");
    bombs_are_held_and_the_rest_goes_on(&world);
}

/// The same where no pids cgroup can be made: an unprivileged control plane, the run's tasks
/// held by `RLIMIT_NPROC` in its own user namespace.
#[test]
fn as_a_user_a_thread_bomb_and_a_fork_bomb_are_held_by_their_runs_task_limit() {
    if let Some(world) = World::local_as_user_alone_on_this_machine() {
        bombs_are_held_and_the_rest_goes_on(&world);
    }
}

/// A tmpfs of `size` mounted on a world's state directory (as root); when dropped, the
/// world's control plane is stopped and the tmpfs unmounted.
struct SmallDisk {
    dir: std::path::PathBuf,
    stop: Command,
}

impl SmallDisk {
    fn mount(world: &World, size: &str) -> Option<SmallDisk> {
        let dir = world.home();
        let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|r| r.split_whitespace().next())
                == Some("0")
        });
        if !root {
            #[allow(clippy::print_stderr)]
            {
                eprintln!(
                    "\n!!!!! SKIPPED: not root, so no small filesystem can be mounted !!!!!\n"
                );
            }
            return None;
        }
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .output()
            .expect("mount runs");
        assert!(out.status.success(), "{}", text(&out.stderr));
        Some(SmallDisk {
            dir,
            stop: world.command(&["server", "stop"]),
        })
    }

    /// What an unprivileged writer may still write there.
    fn free(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.dir)
            .output()
            .expect("df");
        text(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = self.stop.output();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// `div args…` that must end within `limit` (a deadline on the wait).
fn within(world: &World, args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = world
        .command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("div starts");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("div waited for").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("div's output");
            panic!(
                "`div {}` did not end within {limit:?}: {}",
                args.join(" "),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("div's output")
}

/// A run that logs a line every 50 ms, 200 in all.
const LOGGER: &str = "for i in $(seq 1 200); do echo line $i; sleep 0.05; done";

#[test]
fn a_run_that_fills_its_disk_gets_enospc_itself_and_the_run_beside_it_loses_nothing() {
    let world = World::new(Place::Local).expect("a local world");
    // The state directory on 1 GiB: each run's disk is an eighth of it, and a tenth is kept
    // for the control plane.
    let Some(disk) = SmallDisk::mount(&world, "1g") else {
        return;
    };
    let before = disk.free();
    for (name, target) in [
        ("fills-tmp", "/tmp/f"),
        ("fills-workspace", "/workspace/f"),
        // Built by the command, so that it names no volume (one it named would be made).
        ("fills-mnt", "$MNT/scratch/f"),
    ] {
        let out = world.div(&["run", "--detach", "--gpu", "cpu", "--", LOGGER]);
        let logger = text(&out.stdout).trim().to_owned();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let command = format!(
            "MNT=/mnt; mkdir -p \"$(dirname {target})\"; dd if=/dev/zero of={target} bs=1M count=4000"
        );
        let filler = within(
            &world,
            &["run", "--name", name, "--gpu", "cpu", "--", &command],
            PATIENCE,
        );
        let log = text(&filler.stdout);
        // Its own ENOSPC, in its own log; dd's own exit code.
        assert_eq!(
            filler.status.code(),
            Some(1),
            "{log}\n{}",
            text(&filler.stderr)
        );
        assert!(log.contains("No space left on device"), "{log}");
        let run = world.run_json(name);
        assert_eq!(run["status"], "failed", "{run}");
        // The run beside it goes on to its end with every line.
        let ended = world.wait_end(&logger);
        assert_eq!(ended["status"], "succeeded", "{ended}");
        let lines = world.log(&logger, None);
        for i in 1..=200 {
            assert!(
                holds_lines(&lines, &[&format!("line {i}")]),
                "{logger} lost line {i}:\n{lines}"
            );
        }
        // Its space is free again, and nothing of it is left in the state directory: let go
        // by its supervisor once its end is written.
        let disk_image = world.run_dir(name).join("disk.img");
        div_test_support::wait_until(
            format!("{name}'s disk to be let go"),
            Duration::from_secs(30),
            || {
                if disk_image.exists() {
                    Err("still there")
                } else {
                    Ok(())
                }
            },
        );
        assert!(
            disk.free() + (32 << 20) >= before,
            "the space was not freed"
        );
        // The next run succeeds.
        let next = within(
            &world,
            &["run", "--gpu", "cpu", "--", "echo next ran"],
            PATIENCE,
        );
        assert_eq!(next.status.code(), Some(0), "{}", text(&next.stderr));
    }
    let runs = text(&world.div(&["runs", "--json"]).stdout);
    assert!(!runs.contains("\"running\""), "left running: {runs}");
}

#[test]
fn a_full_disk_never_leaves_a_run_running_after_its_end() {
    let world = World::new(Place::Local).expect("a local world");
    let Some(disk) = SmallDisk::mount(&world, "256m") else {
        return;
    };
    // The control plane up, then the disk filled from outside the runs.
    let out = within(
        &world,
        &["run", "--gpu", "cpu", "--", "echo first"],
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let filler = world.home().join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).expect("a filler");
        let chunk = vec![0u8; 1 << 20];
        while file.write_all(&chunk).is_ok() {}
    }
    assert!(disk.free() < 1 << 20, "not full: {}", disk.free());
    // Refused, or run and ended: never left running.
    for i in 0..3 {
        let out = within(&world, &["run", "--gpu", "cpu", "--", "echo x"], PATIENCE);
        let code = out.status.code();
        assert!(code.is_some(), "div ended by a signal");
        let runs: serde_json::Value =
            serde_json::from_slice(&world.div(&["runs", "--json"]).stdout).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(120);
        for run in runs.as_array().into_iter().flatten() {
            let name = run["name"].as_str().unwrap_or_default();
            while world.run_json(name)["status"] == "running" {
                assert!(
                    Instant::now() < deadline,
                    "try {i}: {name} left running on a full disk"
                );
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }
    std::fs::remove_file(&filler).expect("room again");
    let out = within(
        &world,
        &["run", "--gpu", "cpu", "--", "echo after"],
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(holds_lines(&text(&out.stdout), &["after"]));
}
