//! Every stop × every shape of command, here and on Slurm (one node and four): the run's
//! handler gets SIGTERM and its grace, writes its result, and the result is judged; the run
//! ends with the stop's own status, and `div run` with the stop's own exit code.

use crate::shapes::{SHAPES, Shape};
use crate::world::{Place, World, holds_lines, text};

/// What ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// `div stop`, once the run is going.
    Asked,
    /// `--max-spend`, reached about 45 s after the start.
    Ceiling,
    /// This machine's `max_run_seconds`, 45 s.
    TimeLimit,
}

/// The grace every run here has: a bound, over six times the 3 s its handler sleeps (a run
/// ends as soon as its handlers have exited; only the `stubborn` shape waits it out). With
/// 6 s, then with 8 s, handlers missed it with two suites at once on this machine's two cores
/// (a load average near 190): a launcher's last line, and on Slurm's four nodes a `train.py`
/// that said "will save" and had not saved 8 s later.
const GRACE: &str = "DIVERGENT_STOP_GRACE=20";
/// A time limit that the runs reach well after their handlers are in place: SIGTERM comes a
/// grace before it, 25 s after the start. At 12 s, under that load, a four-node launcher had
/// not yet put its handler in place (its log had no line of it).
const TIME_LIMIT: &str = r#"{"max_run_seconds": 45, "stop_grace_seconds": 20}"#;

fn every_shape_keeps_its_grace(place: Place, stop: Stop) {
    let Some(world) = World::new(place) else {
        return;
    };
    every_shape_keeps_its_grace_in(&world, stop);
}

fn every_shape_keeps_its_grace_in(world: &World, stop: Stop) {
    let place = world.place;
    if stop == Stop::TimeLimit {
        world.settings(TIME_LIMIT);
    }
    // Each shape is its own run, all at once (on Slurm as the cluster has room).
    std::thread::scope(|scope| {
        let going: Vec<_> = SHAPES
            .iter()
            .map(|shape| scope.spawn(move || one_shape(world, shape, stop)))
            .collect();
        for (shape, handle) in SHAPES.iter().zip(going) {
            if let Err(panic) = handle.join() {
                panic!(
                    "the {} shape ({:?}), stopped by {stop:?} on {place:?}: {}",
                    shape.name,
                    shape.args,
                    panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("a panic")
                );
            }
        }
    });
}

fn one_shape(world: &World, shape: &Shape, stop: Stop) {
    let place = world.place;
    let mut args = vec![
        "run",
        "--name",
        shape.name,
        "--env",
        GRACE,
        "--check",
        "saved==true",
    ];
    args.extend(place.gpu_args());
    if stop == Stop::Ceiling {
        args.extend(["--max-spend", place.ceiling()]);
    }
    if stop == Stop::Asked {
        args.push("--detach");
    }
    args.extend(shape.args);
    let out = world.div(&args);
    let stderr = text(&out.stderr);
    match stop {
        Stop::Asked => {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            // Every process of it is there, on every node, before it is told.
            for node in nodes(place) {
                world.wait_log(shape.name, node, shape.started);
            }
            let stopped = world.div(&["stop", shape.name]);
            assert_eq!(stopped.status.code(), Some(0), "{}", text(&stopped.stderr));
        }
        // Attached, as a user runs it: `div run` exits with the stop's code.
        Stop::Ceiling => assert_eq!(out.status.code(), Some(205), "{stderr}"),
        Stop::TimeLimit => assert_eq!(out.status.code(), Some(209), "{stderr}"),
    }
    let run = world.wait_end(shape.name);
    let (status, reason) = match stop {
        Stop::Asked => ("canceled", None),
        Stop::Ceiling => ("hit_ceiling", None),
        Stop::TimeLimit => (
            "failed",
            Some("reached this machine's time limit of 45 s (max_run_seconds)"),
        ),
    };
    assert_eq!(run["status"], status, "{run}\n{stderr}");
    if let Some(reason) = reason {
        assert_eq!(run["reason"], reason, "{run}");
    }
    // The result the handler wrote during its grace, judged.
    assert_eq!(
        run["verdicts"][0]["line"],
        "check passed: saved == true (found true)",
        "{run}\n{}",
        world.log(shape.name, None)
    );
    let result = world.div(&["result", shape.name, "--check", "saved==true"]);
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    // Each node's handlers ran to their end.
    for node in nodes(place) {
        let log = world.log(shape.name, node);
        assert!(
            holds_lines(&log, shape.saved),
            "node {node:?} of {} did not save {:?}:\n{log}",
            shape.name,
            shape.saved
        );
        if shape.name == "stubborn" {
            // The process that ignores SIGTERM was not killed when the other had exited:
            // the sandbox stayed up for it until the end of the grace.
            let after = log
                .split_once("\nsaved\n")
                .map_or("", |(_, after)| after)
                .matches("stubborn: still here")
                .count();
            assert!(after >= 2, "the stubborn process went early:\n{log}");
        }
    }
    if stop == Stop::Ceiling {
        // `--max-spend` in cents: "0.11" is 11.
        let (dollars, cents) = place.ceiling().split_once('.').expect("dollars.cents");
        let ceiling: i64 =
            dollars.parse::<i64>().expect("dollars") * 100 + cents.parse::<i64>().expect("cents");
        assert!(
            run["spent_cents"].as_i64().is_some_and(|s| s <= ceiling),
            "{run}"
        );
    }
}

/// The logs to look at: the run's, and each node's where it has several.
fn nodes(place: Place) -> Vec<Option<u32>> {
    if place.nodes() == 1 {
        vec![None]
    } else {
        (0..place.nodes()).map(Some).collect()
    }
}

#[test]
fn here_div_stop_gives_every_shape_its_grace() {
    every_shape_keeps_its_grace(Place::Local, Stop::Asked);
}

#[test]
fn here_the_ceiling_gives_every_shape_its_grace() {
    every_shape_keeps_its_grace(Place::Local, Stop::Ceiling);
}

#[test]
fn here_the_time_limit_gives_every_shape_its_grace() {
    every_shape_keeps_its_grace(Place::Local, Stop::TimeLimit);
}

/// The same as a user made with `useradd`: the control plane unprivileged, its runs in
/// bubblewrap's user namespace, their memory held by polling.
#[test]
fn here_as_a_user_div_stop_gives_every_shape_its_grace() {
    if let Some(world) = World::local_as_user() {
        // Its runs are the user's, not root's.
        let out = world.div(&["run", "--gpu", "cpu", "--", "id -u"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let uid = text(&out.stdout);
        assert!(
            uid.lines()
                .any(|l| l.trim().parse::<u32>().is_ok_and(|u| u != 0)),
            "{uid}"
        );
        every_shape_keeps_its_grace_in(&world, Stop::Asked);
    }
}

#[test]
fn slurm_one_node_div_stop_gives_every_shape_its_grace() {
    every_shape_keeps_its_grace(Place::SlurmOneNode, Stop::Asked);
}

#[test]
fn slurm_one_node_the_ceiling_gives_every_shape_its_grace() {
    every_shape_keeps_its_grace(Place::SlurmOneNode, Stop::Ceiling);
}

#[test]
fn slurm_one_node_the_time_limit_gives_every_shape_its_grace() {
    every_shape_keeps_its_grace(Place::SlurmOneNode, Stop::TimeLimit);
}

#[test]
fn slurm_four_nodes_div_stop_gives_every_shape_on_every_node_its_grace() {
    every_shape_keeps_its_grace(Place::SlurmFourNodes, Stop::Asked);
}

#[test]
fn slurm_four_nodes_the_ceiling_gives_every_shape_on_every_node_its_grace() {
    every_shape_keeps_its_grace(Place::SlurmFourNodes, Stop::Ceiling);
}

#[test]
fn slurm_four_nodes_the_time_limit_gives_every_shape_on_every_node_its_grace() {
    every_shape_keeps_its_grace(Place::SlurmFourNodes, Stop::TimeLimit);
}
