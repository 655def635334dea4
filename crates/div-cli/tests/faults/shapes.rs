//! The shapes of command a user writes, each with a SIGTERM handler that takes 3 s to write
//! its result (`{"saved": true}`, judged by `--check saved==true`), as a training script
//! saving a checkpoint does.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A training loop whose SIGTERM handler saves for 3 s, writes the result, says `saved` and
/// exits 0. Told twice (by div and by a parent that passes it on), it saves once.
const TRAIN_PY: &str = r#"import json, os, signal, sys, time


def say(line):
    # One write per line: two processes share the log, and print() writes its text and its
    # newline apart when Python is unbuffered (as div runs it), so their lines would mix.
    os.write(1, (line + "\n").encode())


SAVING = False


def on_term(signum, frame):
    global SAVING
    if SAVING:
        return
    SAVING = True
    say("got signal 15: will save a checkpoint and exit")
    time.sleep(3)
    path = os.environ["DIVERGENT_RESULT_PATH"]
    partial = "%s.%d" % (path, os.getpid())
    with open(partial, "w") as f:
        json.dump({"saved": True}, f)
    os.replace(partial, path)
    say("saved")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)


def main():
    say("training")
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
"#;

/// A second process beside the first, with a handler of its own.
const SPARE_PY: &str = r#"import os, signal, sys, time


def say(line):
    # One write per line: two processes share the log, and print() writes its text and its
    # newline apart when Python is unbuffered (as div runs it), so their lines would mix.
    os.write(1, (line + "\n").encode())


def on_term(signum, frame):
    time.sleep(3)
    say("spare: saved")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
say("spare: started")
while True:
    time.sleep(0.05)
"#;

/// A process that takes SIGTERM and goes on: only SIGKILL, at the end of the grace, ends it.
const STUBBORN_PY: &str = r#"import os, signal, time


def say(line):
    # One write per line: two processes share the log, and print() writes its text and its
    # newline apart when Python is unbuffered (as div runs it), so their lines would mix.
    os.write(1, (line + "\n").encode())


def on_term(signum, frame):
    say("stubborn: ignoring SIGTERM")


signal.signal(signal.SIGTERM, on_term)
say("stubborn: started")
i = 0
while True:
    time.sleep(0.5)
    i += 1
    say("stubborn: still here %d" % i)
"#;

/// torchrun's shape: a parent that starts two workers and, on SIGTERM, passes it on to them
/// and waits for them.
const LAUNCHER_PY: &str = r#"import os, signal, subprocess, sys


def say(line):
    # One write per line: two processes share the log, and print() writes its text and its
    # newline apart when Python is unbuffered (as div runs it), so their lines would mix.
    os.write(1, (line + "\n").encode())


workers = [
    subprocess.Popen([sys.executable, "train.py"], env=dict(os.environ, WORKER=str(i)))
    for i in range(2)
]


def forward(signum, frame):
    say("launcher: passing SIGTERM on to its workers")
    for w in workers:
        try:
            w.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass


signal.signal(signal.SIGTERM, forward)
codes = [w.wait() for w in workers]
say("launcher: its workers saved and exited %s" % codes)
"#;

/// A process that leaves its parent's tree the way a daemon does (fork, setsid, fork) and
/// trains on alone; its parent exits at once.
const DAEMONIZE_PY: &str = r#"import os, sys

if os.fork() > 0:
    sys.exit(0)
os.setsid()
if os.fork() > 0:
    os._exit(0)
os.execv(sys.executable, [sys.executable, "train.py"])
"#;

/// A script, as a user wraps a training command.
const GRACEFUL_SH: &str = "#!/bin/bash\necho \"graceful.sh: starting\"\npython3 train.py\necho \"graceful.sh: python exited $?\"\n";

/// Writes every file the shapes need into the project.
pub(crate) fn write_project(project: &Path) {
    for (name, text) in [
        ("train.py", TRAIN_PY),
        ("spare.py", SPARE_PY),
        ("stubborn.py", STUBBORN_PY),
        ("launcher.py", LAUNCHER_PY),
        ("daemonize.py", DAEMONIZE_PY),
        ("graceful.sh", GRACEFUL_SH),
        (
            "requirements.txt",
            "# nothing to install: the image has what train.py needs\n",
        ),
    ] {
        std::fs::write(project.join(name), text).expect("a project file");
    }
    std::fs::set_permissions(
        project.join("graceful.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
}

/// One shape of command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// The run's name.
    pub(crate) name: &'static str,
    /// What follows `div run`'s own flags.
    pub(crate) args: &'static [&'static str],
    /// What its log shows once it is going (each as often as given): a stop before it
    /// would come before the handlers are there.
    pub(crate) started: &'static [&'static str],
    /// What its log shows once the stop has been handled (each as often as given).
    pub(crate) saved: &'static [&'static str],
}

/// Every shape: `file.py::fn`, `file.py`, an own command, a script, `pip install … &&
/// python …`, a shell that backgrounds two processes, a parent that passes the signal on to
/// its workers, a process that ignores SIGTERM beside one that saves, and a daemon that left
/// its parent's tree.
pub(crate) const SHAPES: [Shape; 9] = [
    Shape {
        name: "entry",
        args: &["train.py::main"],
        started: &["training"],
        saved: &["saved"],
    },
    Shape {
        name: "file",
        args: &["train.py"],
        started: &["training"],
        saved: &["saved"],
    },
    Shape {
        name: "own",
        args: &["--", "python3 train.py"],
        started: &["training"],
        saved: &["saved"],
    },
    Shape {
        name: "script",
        args: &["--", "./graceful.sh"],
        started: &["graceful.sh: starting", "training"],
        saved: &["saved"],
    },
    Shape {
        name: "pip",
        args: &["--", "pip install -r requirements.txt && python train.py"],
        started: &["training"],
        saved: &["saved"],
    },
    Shape {
        name: "background",
        args: &["--", "python3 train.py & python3 spare.py & wait"],
        started: &["training", "spare: started"],
        saved: &["saved", "spare: saved"],
    },
    Shape {
        name: "forwarding",
        args: &["--", "python3 launcher.py"],
        started: &["training", "training"],
        saved: &[
            "saved",
            "saved",
            "launcher: its workers saved and exited [0, 0]",
        ],
    },
    Shape {
        name: "stubborn",
        args: &["--", "python3 train.py & python3 stubborn.py & wait"],
        started: &["training", "stubborn: started"],
        saved: &["saved", "stubborn: ignoring SIGTERM"],
    },
    Shape {
        name: "daemon",
        args: &["--", "python3 daemonize.py && sleep 1000"],
        started: &["training"],
        saved: &["saved"],
    },
];
