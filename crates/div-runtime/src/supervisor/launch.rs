//! Starting the run: bubblewrap (or, unsandboxed, a shell that puts itself in the run's
//! cgroups) started in the run's cgroups with a fixed environment, the run's own variables
//! handed to it down a pipe.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::prepare::Room;
use super::spec::{EndRecord, RunSpec, early_end};
use super::tree::kill_tree;
use crate::sys;

/// The environment the supervisor starts the sandbox (or an unsandboxed run's cgroup shell)
/// with: fixed, never the run's. The run's own variables reach it through bwrap's
/// `--setenv`, read by `--args 0` from a pipe the supervisor writes (never a file), inside
/// the sandbox.
const LAUNCH_ENV: [(&str, &str); 2] = [
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("LANG", "C.UTF-8"),
];

/// The run, started.
#[derive(Debug)]
pub(super) struct Launched {
    /// bubblewrap, or the unsandboxed run's first process.
    pub(super) child: Child,
    /// Woken when it exits.
    pub(super) exit: crate::waiting::ExitWatch,
    /// Every process of the run was born in its cgroups and cannot leave them.
    pub(super) contained: bool,
}

/// Starts the run in its room; an early end, said in the log, when it cannot start.
pub(super) fn launch(spec: &RunSpec, room: &mut Room) -> Result<Launched, EndRecord> {
    let argv = argv(spec, room);
    let (Ok(out), Ok(err)) = (room.log.try_clone(), room.log.try_clone()) else {
        return Err(early_end(
            spec,
            "the log could not be shared with the run".to_owned(),
        ));
    };
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env_clear()
        .envs(LAUNCH_ENV)
        .current_dir(&spec.cwd)
        .stdin(if room.sandboxed {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    limit_tasks(&mut command, room);
    let (mut child, contained) = spawn_in_cgroups(spec, room, &mut command)?;
    if let Some(mut pipe) = child.stdin.take() {
        if let Err(e) = room.cgroups.attach_v2(child.id()) {
            drop(pipe);
            let _ = kill_tree(&mut child, &room.cgroups, false);
            let _ = writeln!(
                room.log,
                "div: the run could not be put in its cgroups: {e}"
            );
            room.cgroups.remove();
            return Err(early_end(
                spec,
                format!("the run could not be put in its cgroups: {e}"),
            ));
        }
        // Written from a thread: bwrap reads it whole at its start, but a pipe holds only
        // 64 KiB, and a bwrap that failed first never reads it (the write then fails).
        let args = env_args(&run_env(spec));
        std::thread::spawn(move || {
            let _ = pipe.write_all(&args);
        });
    }
    let exit = crate::waiting::ExitWatch::new(child.id());
    Ok(Launched {
        child,
        exit,
        contained,
    })
}

/// What is started: bwrap with `--args 0` (its arguments, the run's variables among them,
/// come down the pipe on its stdin, which the supervisor writes only once bwrap is in the
/// run's cgroups: never on a command line another user could read, never in a file), or,
/// unsandboxed, a shell that puts itself in the cgroups and `env -i` with the variables.
fn argv(spec: &RunSpec, room: &Room) -> Vec<String> {
    if room.sandboxed {
        let mut bwrap = spec.argv.iter().cloned();
        let mut argv: Vec<String> = bwrap.next().into_iter().collect();
        argv.extend(["--args".to_owned(), "0".to_owned()]);
        argv.extend(bwrap);
        argv
    } else {
        let mut argv = launch_prefix(&room.cgroups.dirs());
        argv.extend(["/usr/bin/env".to_owned(), "-i".to_owned()]);
        argv.extend(run_env(spec).iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend(spec.argv.iter().cloned());
        argv
    }
}

/// No pids cgroup: the run's tasks are held by RLIMIT_NPROC in its own user namespace,
/// where it counts the run's alone (without a sandbox it would count every process of this
/// user, the server's too, so there is no task limit then: its first lines say it has no
/// sandbox).
fn limit_tasks(command: &mut Command, room: &mut Room) {
    if room.cgroups.pids.is_some() || !room.sandboxed {
        return;
    }
    if crate::sandbox::own_user_namespace() {
        sys::limit_tasks(command, room.tasks);
    } else {
        let _ = writeln!(
            room.log,
            "div: no task limit: neither a pids cgroup nor a user namespace of its own holds this run's processes"
        );
    }
}

/// Spawns `command` so that a sandboxed run goes in its cgroups before it can start
/// anything: born in the v1 ones (this thread enters them to start it, then leaves), moved
/// into a v2 one while bwrap waits for its arguments. (Unsandboxed, the launch shell moves
/// itself in before it execs.) Returns it, and whether the run is contained in them.
fn spawn_in_cgroups(
    spec: &RunSpec,
    room: &mut Room,
    command: &mut Command,
) -> Result<(Child, bool), EndRecord> {
    let entered = if room.sandboxed {
        room.cgroups.enter_v1()
    } else {
        Ok(())
    };
    let contained = room.sandboxed && entered.is_ok() && !room.cgroups.dirs().is_empty();
    let spawned = match entered {
        Ok(()) => command.spawn(),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("it could not be put in its cgroups: {e}"),
        )),
    };
    if room.sandboxed
        && let Err(e) = room.cgroups.leave_v1()
    {
        let _ = writeln!(
            room.log,
            "div: the supervisor could not leave the run's cgroups: {e}"
        );
    }
    match spawned {
        Ok(child) => Ok((child, contained)),
        Err(e) => {
            let _ = writeln!(room.log, "div: the run could not start: {e}");
            room.cgroups.remove();
            Err(early_end(spec, format!("the run could not start: {e}")))
        }
    }
}

/// The program and arguments put before an unsandboxed run's own: a shell that moves itself
/// into each cgroup in `dirs` and becomes the command, so the run is in its cgroups before it
/// execs, and the supervisor stays outside them. It runs with [`LAUNCH_ENV`], never the run's
/// variables. (A sandboxed run needs none: bubblewrap waits for its arguments, and the
/// supervisor puts it in the cgroups meanwhile.)
fn launch_prefix(dirs: &[PathBuf]) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        "while [ \"$1\" != -- ]; do echo $$ > \"$1\" || exit 125; shift; done; shift; exec \"$@\""
            .to_owned(),
        "sh".to_owned(),
    ];
    argv.extend(
        dirs.iter()
            .map(|d| d.join("cgroup.procs").display().to_string()),
    );
    argv.push("--".to_owned());
    argv
}

/// The run's variables, and, when its command begins with the line that sets them again after
/// the login shell's profile ([`crate::sandbox::RESTORE_ENV`]), the copies that line reads.
fn run_env(spec: &RunSpec) -> Vec<(String, String)> {
    let mut env = spec.env.clone();
    if spec
        .argv
        .last()
        .is_some_and(|c| c.starts_with(crate::sandbox::RESTORE_ENV))
    {
        env.extend(crate::sandbox::profile_proof(&spec.env));
    }
    env
}

/// bwrap's `--args` input: `--clearenv`, then `--setenv KEY VALUE` for each variable, each
/// argument ended by a NUL (the server refuses a variable holding one).
pub(super) fn env_args(env: &[(String, String)]) -> Vec<u8> {
    let mut out = b"--clearenv\0".to_vec();
    for (k, v) in env {
        for part in ["--setenv", k.as_str(), v.as_str()] {
            out.extend(part.bytes().filter(|b| *b != 0));
            out.push(0);
        }
    }
    out
}
