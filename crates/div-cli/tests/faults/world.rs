//! Where a fault test runs: the real `div` against a fresh local control plane of its own, on
//! this machine or on the loopback Slurm cluster `.ci/slurm-up` brings up (4 nodes × 8 fake
//! GPUs), with the project every shape of command is written in.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) const DIV: &str = env!("CARGO_BIN_EXE_div");

/// How long a test waits for a state a run should reach: long, because a 4-node run may
/// wait in Slurm's queue behind the others (a deadline, never a measured figure).
pub(crate) const PATIENCE: Duration = Duration::from_secs(300);

/// Where the runs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// This machine, through its local control plane, with emulated H100s.
    Local,
    /// The loopback Slurm cluster, each run on one node.
    SlurmOneNode,
    /// The loopback Slurm cluster, each run on all four nodes (2 of each node's GPUs, so
    /// that four such runs fit at once).
    SlurmFourNodes,
}

impl Place {
    /// What `div run` is told to get the place's shape: 4 emulated H100s (more cores than
    /// this machine has, so every run shares it and all go at once), one H100 of a node, or
    /// 4 nodes of 2.
    pub(crate) fn gpu_args(self) -> &'static [&'static str] {
        match self {
            Place::Local => &["--gpu", "h100", "--gpus", "4"],
            Place::SlurmOneNode => &["--gpu", "h100", "--gpus", "1"],
            Place::SlurmFourNodes => &["--gpu", "h100", "--gpus", "8"],
        }
    }

    /// How many nodes a run has.
    pub(crate) fn nodes(self) -> u32 {
        match self {
            Place::SlurmFourNodes => 4,
            _ => 1,
        }
    }

    /// A ceiling that a run reaches about 45 s after it starts: what 45 s of its GPUs cost
    /// (SIGTERM comes a grace of 20 s before it, about 25 s after the start, with every
    /// handler in place even on a loaded machine).
    pub(crate) fn ceiling(self) -> &'static str {
        match self {
            // 4 H100s, $19.80/h: 25 cents buy 45.5 s.
            Place::Local => "0.25",
            // $4.95/h: 6 cents buy 43.6 s.
            Place::SlurmOneNode => "0.06",
            // 8 H100s, $39.60/h: 50 cents buy 45.5 s.
            Place::SlurmFourNodes => "0.50",
        }
    }
}

/// Whether the loopback Slurm cluster answers (asked once); says so loudly when not.
pub(crate) fn cluster() -> bool {
    static ANSWERS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ANSWERS.get_or_init(|| {
        Command::new("timeout")
            .args(["10", "sinfo", "-h"])
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
    });
    if !ok {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "\n!!!!! SKIPPED: no Slurm cluster answers here (`sinfo -h` failed); `.ci/slurm-up` brings one up (as root) !!!!!\n"
            );
        }
    }
    ok
}

/// The loopback cluster, shared by the tests that only place runs on it and held alone by
/// those that break it (a slurmd killed) or fill it (every node held).
static CLUSTER: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// This machine, shared by every test and held alone by the bombs: a thread bomb and a fork
/// bomb load two cores to a load average of 2,000 for as long as they go, and every other
/// test's runs would be timed under that (their own runs beside a bomb are its test's).
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A test's hold on the cluster, or on this machine.
#[allow(dead_code)] // held, never read
enum Hold {
    Shared(std::sync::RwLockReadGuard<'static, ()>),
    Alone(std::sync::RwLockWriteGuard<'static, ()>),
}

/// A state directory, a project and (for Slurm) the `slurm.toml` that sends runs there; the
/// control plane `div` starts in it is stopped when this is dropped.
pub(crate) struct World {
    tmp: tempfile::TempDir,
    pub(crate) place: Place,
    _hold: Option<Hold>,
    /// Dropped after the cluster's hold (a test takes this first).
    _machine: Hold,
    /// The `useradd` user every `div` runs as (so its control plane and runs too); `None`:
    /// this test's own user.
    user: Option<&'static str>,
}

/// The user the tests made with `useradd` run `div` as.
const USER: &str = "div-faults";

impl World {
    /// `None` (after saying so) where the place needs a cluster and none answers.
    pub(crate) fn new(place: Place) -> Option<World> {
        World::make(place, false, false)
    }

    /// [`World::new`], with the cluster to this test alone while it lasts.
    pub(crate) fn alone(place: Place) -> Option<World> {
        World::make(place, true, false)
    }

    /// A local world with this machine to this test alone while it lasts (no other test's
    /// world is made or kept meanwhile).
    pub(crate) fn alone_on_this_machine() -> Option<World> {
        World::make(Place::Local, false, true)
    }

    fn make(place: Place, alone: bool, alone_on_this_machine: bool) -> Option<World> {
        if place != Place::Local && !cluster() {
            return None;
        }
        let machine = if alone_on_this_machine {
            Hold::Alone(MACHINE.write().unwrap_or_else(|e| e.into_inner()))
        } else {
            Hold::Shared(MACHINE.read().unwrap_or_else(|e| e.into_inner()))
        };
        let hold = (place != Place::Local).then(|| {
            if alone {
                Hold::Alone(CLUSTER.write().unwrap_or_else(|e| e.into_inner()))
            } else {
                Hold::Shared(CLUSTER.read().unwrap_or_else(|e| e.into_inner()))
            }
        });
        let tmp = tempfile::tempdir().expect("a temp dir");
        let world = World {
            tmp,
            place,
            _hold: hold,
            _machine: machine,
            user: None,
        };
        std::fs::create_dir_all(world.home()).expect("home");
        std::fs::create_dir_all(world.project()).expect("project");
        if place != Place::Local {
            world.slurm_toml(match place {
                Place::SlurmFourNodes => 2,
                _ => 8,
            });
        }
        crate::shapes::write_project(&world.project());
        Some(world)
    }

    /// A local world whose every `div` runs as a user made with `useradd` (made now when
    /// missing); `None` (after saying so) when these tests do not run as root.
    pub(crate) fn local_as_user() -> Option<World> {
        World::as_user(false)
    }

    /// [`World::local_as_user`], with this machine to this test alone while it lasts.
    pub(crate) fn local_as_user_alone_on_this_machine() -> Option<World> {
        World::as_user(true)
    }

    fn as_user(alone_on_this_machine: bool) -> Option<World> {
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
                    "\n!!!!! SKIPPED: not root, so no `useradd` user can run div here !!!!!\n"
                );
            }
            return None;
        }
        let exists = Command::new("id")
            .arg(USER)
            .output()
            .is_ok_and(|o| o.status.success());
        if !exists {
            let made = Command::new("useradd")
                .args(["-m", USER])
                .status()
                .expect("useradd runs");
            assert!(made.success(), "useradd {USER}");
        }
        let mut world = World::make(Place::Local, false, alone_on_this_machine)?;
        let owned = Command::new("chown")
            .args(["-R", &format!("{USER}:{USER}")])
            .arg(world.tmp.path())
            .status()
            .expect("chown runs");
        assert!(owned.success());
        world.user = Some(USER);
        Some(world)
    }

    /// Points the control plane at the cluster, `gpus_per_node` of each node's GPUs a run.
    pub(crate) fn slurm_toml(&self, gpus_per_node: u32) {
        self.slurm_toml_on(gpus_per_node, "gpu");
    }

    /// [`World::slurm_toml`], H100s on `partition`.
    pub(crate) fn slurm_toml_on(&self, gpus_per_node: u32, partition: &str) {
        std::fs::write(
            self.home().join("slurm.toml"),
            format!(
                "shared_dir = \"{}\"\ngres = \"gpu\"\ngpus_per_node = {gpus_per_node}\ngrace_seconds = 2\n[partitions]\nh100 = \"{partition}\"\n",
                self.tmp.path().display()
            ),
        )
        .expect("slurm.toml");
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.tmp.path().join("div-home")
    }

    pub(crate) fn project(&self) -> PathBuf {
        self.tmp.path().join("project")
    }

    /// `home/settings.json`.
    pub(crate) fn settings(&self, json: &str) {
        std::fs::write(self.home().join("settings.json"), json).expect("settings.json");
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut env: Vec<(String, String)> = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            (
                "HOME".to_owned(),
                self.tmp.path().join("home").display().to_string(),
            ),
            (
                "DIVERGENT_HOME".to_owned(),
                self.home().display().to_string(),
            ),
            ("NO_COLOR".to_owned(), "1".to_owned()),
        ];
        if self.place == Place::Local {
            // Four H100s for each shape at once, all sharing this machine.
            env.push(("DIVERGENT_EMULATE_GPUS".to_owned(), "h100:64".to_owned()));
        }
        if let Ok(conf) = std::env::var("SLURM_CONF") {
            env.push(("SLURM_CONF".to_owned(), conf));
        }
        let mut c = match self.user {
            // The user's own environment is exactly these (`env -i`, after runuser's).
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--", "/usr/bin/env", "-i"])
                    .args(env.iter().map(|(k, v)| format!("{k}={v}")))
                    .arg(DIV);
                c
            }
            None => {
                let mut c = Command::new(DIV);
                c.env_clear().envs(env);
                c
            }
        };
        c.args(args).current_dir(self.project());
        c
    }

    pub(crate) fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }

    /// The run named `name`, as `div runs --json` shows it.
    pub(crate) fn run_json(&self, name: &str) -> Value {
        let out = self.div(&["runs", "--json"]);
        let runs: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        runs.as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == name))
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Waits until `check` holds of the run named `name`; returns it then.
    pub(crate) fn wait_for(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let run = self.run_json(name);
            if check(&run) {
                return run;
            }
            if Instant::now() >= deadline {
                panic!("{name} never {what}: {run}\n{}", self.diagnose(&run));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// What a run that never reached a state left to look at: its run directory (files and
    /// sizes, its phases), its processes and their children with their states and where
    /// they wait in the kernel, the state directory's free space, and the end of its log.
    pub(crate) fn diagnose(&self, run: &Value) -> String {
        let mut out = String::from("--- diagnosis ---\n");
        let Some(id) = run["id"].as_str() else {
            return out + "no such run\n";
        };
        let dir = self.home().join("runs").join(id);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            out += &format!("{}: {len} bytes\n", entry.path().display());
        }
        out += &format!(
            "phases:\n{}\n",
            std::fs::read_to_string(dir.join("phases")).unwrap_or_default()
        );
        let df = Command::new("df").arg(self.home()).output();
        out += &df.map(|o| text(&o.stdout)).unwrap_or_default();
        // Its processes (those naming its directory or working in it) and every one below them.
        let mut pids: Vec<u32> = div_test_support::leftovers::processes_under(&dir)
            .into_iter()
            .map(|p| p.pid)
            .collect();
        let table: Vec<(u32, u32, String)> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let after = stat.rsplit_once(") ")?.1;
                let mut fields = after.split_whitespace();
                let state = fields.next()?.to_owned();
                let ppid = fields.next()?.parse().ok()?;
                Some((pid, ppid, state))
            })
            .collect();
        let mut i = 0;
        while i < pids.len() && pids.len() < 200 {
            let parent = pids[i];
            for (pid, ppid, _) in &table {
                if *ppid == parent && !pids.contains(pid) {
                    pids.push(*pid);
                }
            }
            i += 1;
        }
        for &pid in &pids {
            let state = table
                .iter()
                .find(|(p, _, _)| *p == pid)
                .map(|(_, ppid, s)| format!("ppid {ppid} {s}"))
                .unwrap_or_default();
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            out += &format!(
                "pid {pid} {state} wchan {wchan}: {}\n",
                cmd.chars().take(160).collect::<String>()
            );
        }
        out += &cgroups_of(&pids);
        let log = std::fs::read(dir.join("log")).unwrap_or_default();
        let tail = &log[log.len().saturating_sub(600)..];
        out += &format!("log tail:\n{}\n", String::from_utf8_lossy(tail));
        out
    }

    /// Waits until the run named `name` has ended; returns it.
    pub(crate) fn wait_end(&self, name: &str) -> Value {
        self.wait_for(name, "ended", |r| {
            r["status"]
                .as_str()
                .is_some_and(|s| !matches!(s, "queued" | "running"))
        })
    }

    /// The log of the run (`node` `None`) or of one of its nodes, as `div logs` prints it.
    pub(crate) fn log(&self, name: &str, node: Option<u32>) -> String {
        let node = node.map(|k| k.to_string());
        let mut args = vec!["logs", name];
        if let Some(k) = &node {
            args.extend(["--node", k.as_str()]);
        }
        text(&self.div(&args).stdout)
    }

    /// Waits until the log of the run (or of its node) holds each of `lines`, as often as
    /// each is given.
    pub(crate) fn wait_log(&self, name: &str, node: Option<u32>, lines: &[&str]) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let log = self.log(name, node);
            if holds_lines(&log, lines) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name}'s log (node {node:?}) never showed {lines:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The run's directory in the state directory.
    pub(crate) fn run_dir(&self, name: &str) -> PathBuf {
        let id = self.run_json(name)["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no run {name}"))
            .to_owned();
        self.home().join("runs").join(id)
    }
}

/// Its runs stopped (on the cluster, their jobs with them), then its server, when the test
/// ends, pass or panic.
impl Drop for World {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.command(args),
            &self.home(),
            self.tmp.path(),
        );
        let _ = self.div(&["server", "stop"]);
    }
}

/// The cgroups `pids` are in (each once) and what they say of the processes in them: CPU
/// time and throttling, memory and its OOM state, tasks, whether frozen.
fn cgroups_of(pids: &[u32]) -> String {
    const FILES: [&str; 9] = [
        "cpu.stat",
        "cpu.cfs_quota_us",
        "cpu.max",
        "memory.usage_in_bytes",
        "memory.oom_control",
        "memory.events",
        "pids.current",
        "freezer.state",
        "cgroup.freeze",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for pid in pids {
        let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        for line in listed.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
            let (Some(controllers), Some(path)) = (controllers, path) else {
                continue;
            };
            if path == "/" || controllers.starts_with("name=") {
                continue;
            }
            let dir = if controllers.is_empty() {
                // cgroup v2: the whole tree, or its hybrid mount beside v1's.
                if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
                    format!("/sys/fs/cgroup{path}")
                } else {
                    format!("/sys/fs/cgroup/unified{path}")
                }
            } else {
                format!("/sys/fs/cgroup/{controllers}{path}")
            };
            seen.insert(dir);
        }
    }
    let mut out = String::new();
    for dir in seen {
        for file in FILES {
            if let Ok(text) = std::fs::read_to_string(format!("{dir}/{file}")) {
                out += &format!(
                    "{dir}/{file}: {}\n",
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                );
            }
        }
    }
    out
}

/// Whether `log` has each of `lines` as a whole line, as often as each is given.
pub(crate) fn holds_lines(log: &str, lines: &[&str]) -> bool {
    lines.iter().all(|line| {
        let want = lines.iter().filter(|l| *l == line).count();
        log.lines().filter(|l| l.trim_end() == *line).count() >= want
    })
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether `path` names a live process's command line argument (a test finds processes of a
/// run by the folder they run in).
pub(crate) fn pids_with_arg(arg: &Path) -> Vec<u32> {
    let needle = arg.as_os_str().as_encoded_bytes().to_vec();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == needle.as_slice()))
        })
        .collect()
}
