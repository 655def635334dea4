//! Cgroups for a run's memory, CPU quota and tasks: which hierarchy this process may use (found from
//! `/proc/self/cgroup`, `/proc/self/mountinfo` and the cgroup files, under a root so tests
//! read fixture trees), and the run's own cgroups made, filled, read and removed.
//!
//! Memory prefers cgroup v2 where its controller is delegated to us, then v1; the CPU quota
//! likewise (`cpu.max` on v2, `cpu.cfs_quota_us` on v1). Either may be absent: memory then
//! falls back to polling the process tree (a soft limit), cores to CPU affinity alone. Tasks
//! (`pids.max`, v2 or v1) fall back to `RLIMIT_NPROC` in the run's own user namespace
//! (`sys::limit_tasks`).
//!
//! Why over 700 lines: some 240 are its tests, which build a fixture tree for each layout
//! (hybrid, delegated v2, a container's mount root…); the code itself is about 460.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The CFS period the quota is given in: 100 ms, the kernel's default.
const PERIOD_US: u64 = 100_000;
/// The leaf a v2 server moves itself into so its cgroup may hand controllers to runs'.
const SERVER_LEAF: &str = "div-server";

/// Which cgroup hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

/// A directory runs' cgroups are made in, for one controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parent {
    pub version: Version,
    pub dir: PathBuf,
}

/// Where runs' memory, CPU and tasks cgroups go; `None` where this process may not make them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub memory: Option<Parent>,
    pub cpu: Option<Parent>,
    /// A plan written by an older server has none.
    #[serde(default)]
    pub pids: Option<Parent>,
}

/// One mount of a cgroup filesystem, from `mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// The directory of the hierarchy this mount shows at its mount point.
    root: String,
    point: PathBuf,
    /// v1: its controllers (`memory`, `cpu`, …); v2: empty.
    controllers: BTreeSet<String>,
    version: Version,
}

/// `/proc/self/mountinfo`'s cgroup mounts. Fields: id, parent, dev, root, mount point,
/// options, optional fields up to `-`, then type, source and super options.
fn cgroup_mounts(mountinfo: &str) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let tail: Vec<&str> = after.split(' ').collect();
        let (Some(root), Some(point), Some(kind)) = (fields.get(3), fields.get(4), tail.first())
        else {
            continue;
        };
        let version = match *kind {
            "cgroup" => Version::V1,
            "cgroup2" => Version::V2,
            _ => continue,
        };
        let controllers = match version {
            Version::V1 => tail
                .get(2)
                .map(|o| {
                    o.split(',')
                        .filter(|c| !matches!(*c, "rw" | "ro") && !c.contains('='))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            Version::V2 => BTreeSet::new(),
        };
        mounts.push(Mount {
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
            controllers,
            version,
        });
    }
    mounts
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(b) => {
                out.push(char::from(b));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The directory of cgroup `path` under `mount`, when the mount shows it.
fn dir_in(mount: &Mount, path: &str) -> Option<PathBuf> {
    let relative = if mount.root == "/" {
        path
    } else {
        let rest = path.strip_prefix(mount.root.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    Some(mount.point.join(relative.trim_start_matches('/')))
}

/// This process's cgroup paths from `/proc/self/cgroup`: v1 by controller, and the v2 one.
fn own_paths(text: &str) -> (Vec<(BTreeSet<String>, String)>, Option<String>) {
    let mut v1 = Vec::new();
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_owned());
        } else {
            v1.push((
                controllers.split(',').map(str::to_owned).collect(),
                path.to_owned(),
            ));
        }
    }
    (v1, v2)
}

/// The controllers a v2 `cgroup.controllers` or `cgroup.subtree_control` file names.
fn controller_list(text: &str) -> BTreeSet<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// Where runs' cgroups could go, read from the files under `root` (`/` on a real machine):
/// nothing is written. v2 where the controller is available in our cgroup (or in its
/// parent, when we are in the server's own leaf), else v1 where the controller is mounted.
pub fn candidates(root: &Path) -> Plan {
    let read = |p: &str| fs::read_to_string(root.join(p)).unwrap_or_default();
    let mounts = cgroup_mounts(&read("proc/self/mountinfo"));
    let (v1_paths, v2_path) = own_paths(&read("proc/self/cgroup"));
    let under_root = |p: PathBuf| root.join(p.strip_prefix("/").unwrap_or(&p));

    let v2_dir = v2_path.as_deref().and_then(|path| {
        let mount = mounts.iter().find(|m| m.version == Version::V2)?;
        let dir = under_root(dir_in(mount, path)?);
        // A server that moved itself into its leaf earlier hands out its parent's controllers.
        if dir.file_name().is_some_and(|n| n == SERVER_LEAF) {
            dir.parent().map(Path::to_path_buf)
        } else {
            Some(dir)
        }
    });
    let v2_controllers = v2_dir
        .as_deref()
        .map(|d| {
            controller_list(&fs::read_to_string(d.join("cgroup.controllers")).unwrap_or_default())
        })
        .unwrap_or_default();
    let v1_dir = |controller: &str| -> Option<PathBuf> {
        let (_, path) = v1_paths.iter().find(|(c, _)| c.contains(controller))?;
        let mount = mounts
            .iter()
            .find(|m| m.version == Version::V1 && m.controllers.contains(controller))?;
        let dir = under_root(dir_in(mount, path)?);
        dir.is_dir().then_some(dir)
    };
    let pick = |controller: &str| -> Option<Parent> {
        if v2_controllers.contains(controller)
            && let Some(dir) = &v2_dir
        {
            return Some(Parent {
                version: Version::V2,
                dir: dir.clone(),
            });
        }
        v1_dir(controller).map(|dir| Parent {
            version: Version::V1,
            dir,
        })
    };
    Plan {
        memory: pick("memory"),
        cpu: pick("cpu"),
        pids: pick("pids"),
    }
}

/// The plan this process can really use: each candidate proved by making (and removing) a
/// probe cgroup that has the controller's files; a v2 parent gets the controller enabled for
/// its children first.
pub fn detect() -> Plan {
    let plan = candidates(Path::new("/"));
    let prove = |parent: Option<Parent>, controller: &str| -> Option<Parent> {
        let parent = parent?;
        if parent.version == Version::V2 {
            enable_v2(&parent.dir, controller).ok()?;
        }
        probe(&parent.dir, control_file(parent.version, controller)).then_some(parent)
    };
    Plan {
        memory: prove(plan.memory, "memory"),
        cpu: prove(plan.cpu, "cpu"),
        pids: prove(plan.pids, "pids"),
    }
}

/// The file that holds `controller`'s limit in a cgroup of `version`.
fn control_file(version: Version, controller: &str) -> &'static str {
    match (version, controller) {
        (Version::V1, "memory") => "memory.limit_in_bytes",
        (Version::V2, "memory") => "memory.max",
        (_, "pids") => "pids.max",
        (Version::V1, _) => "cpu.cfs_quota_us",
        (Version::V2, _) => "cpu.max",
    }
}

/// Whether a cgroup made under `dir` has `file`; the probe is removed again.
fn probe(dir: &Path, file: &str) -> bool {
    let probe = dir.join(format!("div-probe-{}", std::process::id()));
    if fs::create_dir(&probe).is_err() && !probe.is_dir() {
        return false;
    }
    let ok = probe.join(file).exists();
    let _ = fs::remove_dir(&probe);
    ok
}

/// Enables `controller` for the children of the v2 cgroup `dir`. A cgroup holding processes
/// cannot (the "no internal processes" rule), so when it refuses, this process moves itself
/// into the leaf `dir/div-server` and tries again.
fn enable_v2(dir: &Path, controller: &str) -> io::Result<()> {
    let control = dir.join("cgroup.subtree_control");
    if controller_list(&fs::read_to_string(&control)?).contains(controller) {
        return Ok(());
    }
    if fs::write(&control, format!("+{controller}")).is_ok() {
        return Ok(());
    }
    let leaf = dir.join(SERVER_LEAF);
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())?;
    fs::write(&control, format!("+{controller}"))
}

/// A run's own cgroups, made from a [`Plan`].
#[derive(Debug, Default)]
pub struct RunCgroups {
    pub memory: Option<Parent>,
    pub cpu: Option<Parent>,
    pub pids: Option<Parent>,
}

impl RunCgroups {
    /// Makes the run's cgroups (`div-<run-id>` under each parent; one for all on v2 when
    /// they share a parent) and writes the limits: its memory, its cores, and `tasks`
    /// processes and threads together. A cgroup that cannot be made is left out: the caller
    /// says so and falls back.
    pub fn make(
        plan: &Plan,
        run_id: &str,
        memory_bytes: u64,
        cores: usize,
        tasks: u64,
    ) -> RunCgroups {
        let name = format!("div-{run_id}");
        let memory = plan.memory.as_ref().and_then(|p| {
            let dir = p.dir.join(&name);
            make_dir(&dir).ok()?;
            let ok = match p.version {
                Version::V1 => {
                    let ok = fs::write(dir.join("memory.limit_in_bytes"), memory_bytes.to_string());
                    // Without swap accounting this file is absent; the limit above is then whole.
                    let _ = fs::write(
                        dir.join("memory.memsw.limit_in_bytes"),
                        memory_bytes.to_string(),
                    );
                    ok
                }
                Version::V2 => {
                    let ok = fs::write(dir.join("memory.max"), memory_bytes.to_string());
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                    // The kernel kills the whole run together, not one process of it.
                    let _ = fs::write(dir.join("memory.oom.group"), "1");
                    ok
                }
            };
            finish(ok, p.version, dir)
        });
        let cpu = plan.cpu.as_ref().filter(|_| cores > 0).and_then(|p| {
            let dir = p.dir.join(&name);
            make_dir(&dir).ok()?;
            let quota = PERIOD_US * cores as u64;
            let ok = match p.version {
                Version::V1 => fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())
                    .and_then(|()| fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())),
                Version::V2 => fs::write(dir.join("cpu.max"), format!("{quota} {PERIOD_US}")),
            };
            finish(ok, p.version, dir)
        });
        let pids = plan.pids.as_ref().and_then(|p| {
            let dir = p.dir.join(&name);
            make_dir(&dir).ok()?;
            finish(
                fs::write(dir.join("pids.max"), tasks.to_string()),
                p.version,
                dir,
            )
        });
        RunCgroups { memory, cpu, pids }
    }

    /// The cgroups a run of `run_id` was given under `plan`, those that still exist: what a
    /// lost supervisor left behind.
    pub fn left_by(plan: &Plan, run_id: &str) -> RunCgroups {
        let name = format!("div-{run_id}");
        let existing = |p: &Option<Parent>| {
            p.as_ref()
                .map(|p| Parent {
                    version: p.version,
                    dir: p.dir.join(&name),
                })
                .filter(|p| p.dir.is_dir())
        };
        RunCgroups {
            memory: existing(&plan.memory),
            cpu: existing(&plan.cpu),
            pids: existing(&plan.pids),
        }
    }

    /// Each distinct cgroup directory of the run.
    pub fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for p in [&self.memory, &self.cpu, &self.pids].into_iter().flatten() {
            if !dirs.contains(&p.dir) {
                dirs.push(p.dir.clone());
            }
        }
        dirs
    }

    /// Whether the kernel killed something in the run's memory cgroup for its memory.
    pub fn oom_killed(&self) -> bool {
        let Some(p) = &self.memory else {
            return false;
        };
        let file = match p.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        oom_kill_count(&fs::read_to_string(p.dir.join(file)).unwrap_or_default()) > 0
    }

    /// Moves the calling thread into the run's v1 cgroups, so that a process it starts is
    /// born in them ([`RunCgroups::leave_v1`] moves it back). It writes `0` to each `tasks`
    /// file: the kernel moves one thread, the caller, without the global lock that moving a
    /// whole process through `cgroup.procs` takes, which waits for an RCU grace period
    /// (about 10 ms here, where this takes 0.3 ms).
    pub fn enter_v1(&self) -> io::Result<()> {
        for dir in self.dirs_of(Version::V1) {
            write_in(&dir.join("tasks"), "0")?;
        }
        Ok(())
    }

    /// Moves the calling thread back out of the run's v1 cgroups, into each one's parent:
    /// where the supervisor was, since a run's cgroups are made in the server's own.
    pub fn leave_v1(&self) -> io::Result<()> {
        for dir in self.dirs_of(Version::V1) {
            if let Some(parent) = dir.parent() {
                write_in(&parent.join("tasks"), "0")?;
            }
        }
        Ok(())
    }

    /// Moves the process `pid` into the run's v2 cgroup (`cgroup.procs`): what is not
    /// entered by [`RunCgroups::enter_v1`]. Its children afterwards are born there.
    pub fn attach_v2(&self, pid: u32) -> io::Result<()> {
        for dir in self.dirs_of(Version::V2) {
            write_in(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The run's distinct cgroup directories of one version.
    fn dirs_of(&self, version: Version) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for p in [&self.memory, &self.cpu, &self.pids].into_iter().flatten() {
            if p.version == version && !dirs.contains(&p.dir) {
                dirs.push(p.dir.clone());
            }
        }
        dirs
    }

    /// Every process in the run's cgroups.
    pub fn pids(&self) -> Vec<u32> {
        self.dirs()
            .iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| l.trim().parse::<u32>().ok())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Removes the run's cgroups (empty once its processes are gone; retried briefly while
    /// the kernel finishes with them).
    pub fn remove(&self) {
        for dir in self.dirs() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while fs::remove_dir(&dir).is_err()
                && dir.exists()
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// Writes `value` to the cgroup file `file`; an error names the file.
fn write_in(file: &Path, value: &str) -> io::Result<()> {
    fs::write(file, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn finish(written: io::Result<()>, version: Version, dir: PathBuf) -> Option<Parent> {
    match written {
        Ok(()) => Some(Parent { version, dir }),
        Err(_) => {
            let _ = fs::remove_dir(&dir);
            None
        }
    }
}

/// `oom_kill N` from v1's `memory.oom_control` or v2's `memory.events`.
fn oom_kill_count(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture machine: `/proc/self/{cgroup,mountinfo}` and cgroup directories, each
    /// `(path, cgroup.controllers)` (`None`: a v1 directory, no such file).
    fn machine(cgroup: &str, mountinfo: &str, dirs: &[(&str, Option<&str>)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("a temp dir");
        let proc_self = root.path().join("proc/self");
        fs::create_dir_all(&proc_self).expect("proc/self");
        fs::write(proc_self.join("cgroup"), cgroup).expect("cgroup");
        fs::write(proc_self.join("mountinfo"), mountinfo).expect("mountinfo");
        for (dir, controllers) in dirs {
            let dir = root.path().join(dir);
            fs::create_dir_all(&dir).expect("a cgroup dir");
            if let Some(c) = controllers {
                fs::write(dir.join("cgroup.controllers"), c).expect("controllers");
            }
        }
        root
    }

    /// The plan as `memory=<version>:<dir> cpu=…`, dirs relative to the fixture's root.
    fn check(cgroup: &str, mountinfo: &str, dirs: &[(&str, Option<&str>)], expect: &str) {
        let root = machine(cgroup, mountinfo, dirs);
        let plan = candidates(root.path());
        let show = |p: &Option<Parent>| match p {
            None => "none".to_owned(),
            Some(p) => format!(
                "{:?}:/{}",
                p.version,
                p.dir
                    .strip_prefix(root.path())
                    .expect("under the root")
                    .display()
            ),
        };
        let got = format!("memory={} cpu={}", show(&plan.memory), show(&plan.cpu));
        assert_eq!(got, expect, "{cgroup:?} {mountinfo:?} {dirs:?}");
    }

    const HYBRID_MOUNTS: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "9:name=systemd:/
4:memory:/process_api/cf22
2:cpuacct:/
1:cpu:/
0::/
";
    const V2_MOUNTS: &str = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
    const V2_CGROUP: &str =
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/div.service\n";
    const V2_DIR: &str =
        "sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/div.service";

    #[test]
    fn hybrid_v1_memory_and_cpu_when_v2_has_no_memory_controller() {
        // This machine's layout: the v2 mount only has hugetlb.
        check(
            HYBRID_CGROUP,
            HYBRID_MOUNTS,
            &[
                ("sys/fs/cgroup/unified", Some("hugetlb")),
                ("sys/fs/cgroup/memory/process_api/cf22", None),
                ("sys/fs/cgroup/cpu", None),
            ],
            "memory=V1:/sys/fs/cgroup/memory/process_api/cf22 cpu=V1:/sys/fs/cgroup/cpu",
        );
    }

    #[test]
    fn detection_cases() {
        // v2 with both controllers delegated.
        check(
            V2_CGROUP,
            V2_MOUNTS,
            &[(V2_DIR, Some("cpuset cpu io memory pids"))],
            &format!("memory=V2:/{V2_DIR} cpu=V2:/{V2_DIR}"),
        );
        // v2 with memory only: no CPU quota.
        check(
            V2_CGROUP,
            V2_MOUNTS,
            &[(V2_DIR, Some("memory pids"))],
            &format!("memory=V2:/{V2_DIR} cpu=none"),
        );
        // v2 delegating nothing: nothing (no v1 to fall back on).
        check(
            V2_CGROUP,
            V2_MOUNTS,
            &[(V2_DIR, Some("pids"))],
            "memory=none cpu=none",
        );
        // v2 without its controllers file (not readable): nothing.
        check(
            V2_CGROUP,
            V2_MOUNTS,
            &[(V2_DIR, None)],
            "memory=none cpu=none",
        );
        // A server already in its own leaf hands out its parent's controllers.
        check(
            &format!(
                "0::/{}/div-server\n",
                V2_DIR.trim_start_matches("sys/fs/cgroup/")
            ),
            V2_MOUNTS,
            &[(V2_DIR, Some("cpu memory"))],
            &format!("memory=V2:/{V2_DIR} cpu=V2:/{V2_DIR}"),
        );
        // v1 with cpu and cpuacct on one mount.
        check(
            "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
            "40 31 0:37 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n41 31 0:38 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
            &[
                ("sys/fs/cgroup/cpu,cpuacct/docker/abc", None),
                ("sys/fs/cgroup/memory/docker/abc", None),
            ],
            "memory=V1:/sys/fs/cgroup/memory/docker/abc cpu=V1:/sys/fs/cgroup/cpu,cpuacct/docker/abc",
        );
        // A v1 mount whose root is our own cgroup (a container's): the mount point itself.
        check(
            "4:memory:/docker/abc\n",
            "41 31 0:38 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
            &[("sys/fs/cgroup/memory", None)],
            "memory=V1:/sys/fs/cgroup/memory cpu=none",
        );
        // A v1 mount that does not show our cgroup: unusable.
        check(
            "4:memory:/elsewhere\n",
            "41 31 0:38 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
            &[("sys/fs/cgroup/memory", None)],
            "memory=none cpu=none",
        );
        // v1 named in /proc/self/cgroup but its directory missing: unusable.
        check(
            "4:memory:/gone\n",
            "41 31 0:38 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
            &[],
            "memory=none cpu=none",
        );
        // A mount point with a space, escaped as mountinfo does.
        check(
            "4:memory:/\n",
            "41 31 0:38 / /sys/fs/my\\040cgroups rw - cgroup cgroup rw,memory\n",
            &[("sys/fs/my cgroups", None)],
            "memory=V1:/sys/fs/my cgroups cpu=none",
        );
        // No cgroup files at all (no /proc): nothing.
        check("", "", &[], "memory=none cpu=none");
    }

    #[test]
    fn oom_kill_counts() {
        assert_eq!(
            oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"),
            1
        );
        assert_eq!(
            oom_kill_count("low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\noom_group_kill 0\n"),
            2
        );
        assert_eq!(oom_kill_count("oom_kill_disable 0\nunder_oom 0\n"), 0);
        assert_eq!(oom_kill_count(""), 0);
    }

    #[test]
    fn a_runs_cgroups_hold_its_limits() {
        // Fixture parents: plain directories take the files the kernel would.
        let root = tempfile::tempdir().expect("a temp dir");
        let v1_mem = root.path().join("memory");
        let v1_cpu = root.path().join("cpu");
        let v1_pids = root.path().join("pids");
        let v2 = root.path().join("unified");
        for d in [&v1_mem, &v1_cpu, &v1_pids, &v2] {
            fs::create_dir_all(d).expect("a parent");
        }
        let read = |p: PathBuf| fs::read_to_string(p).expect("written");
        let plan = Plan {
            memory: Some(Parent {
                version: Version::V1,
                dir: v1_mem.clone(),
            }),
            cpu: Some(Parent {
                version: Version::V1,
                dir: v1_cpu.clone(),
            }),
            pids: Some(Parent {
                version: Version::V1,
                dir: v1_pids.clone(),
            }),
        };
        let run = RunCgroups::make(&plan, "r_1", 1 << 30, 2, 2048);
        assert_eq!(
            run.dirs(),
            vec![
                v1_mem.join("div-r_1"),
                v1_cpu.join("div-r_1"),
                v1_pids.join("div-r_1")
            ]
        );
        assert_eq!(read(v1_pids.join("div-r_1/pids.max")), "2048");
        assert_eq!(
            read(v1_mem.join("div-r_1/memory.limit_in_bytes")),
            "1073741824"
        );
        assert_eq!(read(v1_cpu.join("div-r_1/cpu.cfs_quota_us")), "200000");
        assert_eq!(read(v1_cpu.join("div-r_1/cpu.cfs_period_us")), "100000");

        let plan = Plan {
            memory: Some(Parent {
                version: Version::V2,
                dir: v2.clone(),
            }),
            cpu: Some(Parent {
                version: Version::V2,
                dir: v2.clone(),
            }),
            pids: Some(Parent {
                version: Version::V2,
                dir: v2.clone(),
            }),
        };
        let run = RunCgroups::make(&plan, "r_2", 1 << 30, 1, 1024);
        assert_eq!(
            run.dirs(),
            vec![v2.join("div-r_2")],
            "one cgroup for all on v2"
        );
        assert_eq!(read(v2.join("div-r_2/pids.max")), "1024");
        assert_eq!(read(v2.join("div-r_2/memory.max")), "1073741824");
        assert_eq!(read(v2.join("div-r_2/memory.oom.group")), "1");
        assert_eq!(read(v2.join("div-r_2/cpu.max")), "100000 100000");
        fs::write(v2.join("div-r_2/memory.events"), "oom 1\noom_kill 1\n").expect("events");
        assert!(run.oom_killed());

        // No cores: no quota.
        let run = RunCgroups::make(&plan, "r_3", 1 << 30, 0, 1024);
        assert!(run.cpu.is_none() && run.memory.is_some());
        // A parent that is not there: left out.
        let plan = Plan {
            memory: Some(Parent {
                version: Version::V1,
                dir: root.path().join("absent/x"),
            }),
            cpu: None,
            pids: None,
        };
        let run = RunCgroups::make(&plan, "r_4", 1 << 30, 1, 1024);
        assert!(run.memory.is_none() && run.dirs().is_empty());
    }
}
