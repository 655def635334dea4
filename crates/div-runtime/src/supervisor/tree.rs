//! The run's processes: finding them from `/proc` or its cgroups, telling them to stop, and
//! killing whatever is left so that no orphan survives.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::process::Child;
use std::time::Duration;

use crate::cgroup::RunCgroups;
use crate::sys;

/// One line of `/proc/<pid>/stat`: parent, process group, and whether it is a zombie.
pub(super) struct Proc {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    zombie: bool,
}

pub(super) fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: read after the last `)`.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(state), Some(ppid), Some(pgrp)) = (
            fields.first(),
            fields.get(1).and_then(|s| s.parse().ok()),
            fields.get(2).and_then(|s| s.parse().ok()),
        ) else {
            continue;
        };
        out.push(Proc {
            pid,
            ppid,
            pgrp,
            zombie: *state == "Z" || *state == "X",
        });
    }
    out
}

/// Whether `pid` is a process that is neither a zombie nor gone.
pub(super) fn is_live(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Every process under `root` (itself included), from `/proc`.
pub(super) fn descendants(root: u32, table: &[Proc]) -> Vec<u32> {
    let mut tree = BTreeSet::from([root]);
    loop {
        let before = tree.len();
        for p in table {
            if tree.contains(&p.ppid) {
                tree.insert(p.pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    tree.into_iter().collect()
}

/// The resident memory of the process tree under `root`, in bytes.
pub(super) fn tree_rss(root: u32) -> u64 {
    let page = sys::page_size();
    descendants(root, &processes())
        .into_iter()
        .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/statm")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok())
        })
        .map(|pages| pages * page)
        .sum()
}

/// Kills everything the run started: every live descendant of the child, every live process
/// of its process group, and everything in its cgroup; then reaps the child and returns how
/// it ended. No orphan survives.
///
/// The child is reaped only at the very end: until then it is a zombie at worst, so its pid
/// and its process-group id stay the run's. (Reaping it first, as this once did, freed the
/// pid: a process started meanwhile — another run's supervisor, whose `setsid` makes its
/// group id its pid — could get it and be killed as "the run's group", and its run read as
/// "the supervisor was lost".)
///
/// `contained`: every process of the run was born in its cgroups and cannot leave them (a
/// sandboxed run, which has no cgroup filesystem it could write): the cgroups alone then
/// name them all, and the process table is not read.
pub(super) fn kill_tree(
    child: &mut Child,
    cgroups: &RunCgroups,
    contained: bool,
) -> io::Result<std::process::ExitStatus> {
    let pid = child.id();
    let me = std::process::id();
    // A sandboxed run ends whole with its bubblewrap (`--die-with-parent`: the namespace's
    // first process is killed with it, and the kernel kills every process of the namespace
    // at once): one signal, where a fork bomb's thousands would each need theirs while it
    // makes more. What is left in its cgroups is killed below.
    if contained {
        sys::kill(pid, libc::SIGKILL);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Looked at again soon: a sandboxed run's namespace is often still going away as its
    // bubblewrap has exited (a moment, not a 10 ms sleep).
    let mut pause = Duration::from_micros(250);
    loop {
        let (mut targets, live): (BTreeSet<u32>, BTreeSet<u32>) = if contained {
            let pids: BTreeSet<u32> = cgroups.pids().into_iter().collect();
            let live = pids.iter().copied().filter(|p| is_live(*p)).collect();
            (pids, live)
        } else {
            let table = processes();
            let live = table.iter().filter(|p| !p.zombie).map(|p| p.pid).collect();
            let mut targets: BTreeSet<u32> = descendants(pid, &table).into_iter().collect();
            targets.extend(table.iter().filter(|p| p.pgrp == pid).map(|p| p.pid));
            targets.extend(cgroups.pids());
            (targets, live)
        };
        targets.remove(&me);
        let mut any = false;
        for p in targets {
            if live.contains(&p) && sys::kill(p, libc::SIGKILL) {
                any = true;
            }
        }
        if !any || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
    child.wait()
}

/// Sends SIGTERM to the run's own processes: every live descendant of the child except, in a
/// sandbox, bubblewrap's own two (the child itself and the namespace's first process, its
/// child): a SIGTERM to bubblewrap would end the whole namespace at once, with no grace for
/// the run. Without a sandbox the child is the run's shell, and gets it too.
///
/// `told` holds the processes told before; they are not told again (a handler that saves a
/// checkpoint runs once), and those told now are added.
pub(super) fn terminate(child: u32, sandboxed: bool, told: &mut BTreeSet<u32>) {
    let table = processes();
    let bwrap: BTreeSet<u32> = if sandboxed {
        table
            .iter()
            .filter(|p| p.ppid == child)
            .map(|p| p.pid)
            .chain([child])
            .collect()
    } else {
        BTreeSet::new()
    };
    let me = std::process::id();
    for pid in descendants(child, &table) {
        let live = table.iter().any(|p| p.pid == pid && !p.zombie);
        if live && pid != me && !bwrap.contains(&pid) && told.insert(pid) {
            sys::kill(pid, libc::SIGTERM);
        }
    }
}

/// Sends SIGTERM to the run's div-init (`init`, as the run's first process names itself):
/// in a sandbox, the one child of bubblewrap (never bubblewrap itself, still setting up, whose
/// end would end the namespace at once); without one, the child itself, once it has become
/// div-init. Only those places are looked at, so no process of the run can pass itself off
/// as it.
pub(super) fn tell_init(child: u32, sandboxed: bool, init: &std::path::Path) {
    let candidates: Vec<u32> = if sandboxed {
        processes()
            .iter()
            .filter(|p| p.ppid == child && !p.zombie)
            .map(|p| p.pid)
            .collect()
    } else {
        vec![child]
    };
    let want = init.as_os_str().as_encoded_bytes();
    for pid in candidates {
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.split(|b| *b == 0).next() == Some(want) {
            sys::kill(pid, libc::SIGTERM);
        }
    }
}
