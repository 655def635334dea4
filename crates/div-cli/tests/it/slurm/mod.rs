//! `div run` on a real Slurm cluster: the real `div`, its local control plane with
//! `home/slurm.toml`, and the loopback cluster `.ci/slurm-up` brings up (4 nodes × 8 fake
//! GPUs). What the server's Slurm executor does (placement, refusals, waits, nodes' logs, how
//! runs end, a member's account) is tested in div-server's own suite
//! (`crates/div-server/tests/it/slurm/`); here, only what `div` prints and how it exits. The
//! test skips, loudly, when no cluster answers (`sinfo` fails).

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::support::DIV;

/// Whether a Slurm cluster answers here (asked once, within 10 s: `sinfo` retries a missing
/// configuration for a minute); says so loudly when not.
fn cluster() -> bool {
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

/// A temp shared directory holding the state directory (with its `slurm.toml`) and a project.
struct Cluster {
    tmp: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Cluster {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let home = tmp.path().join("div-home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(tmp.path().join("project")).expect("project");
        std::fs::write(tmp.path().join("project/README"), "a project\n").expect("a file to ship");
        std::fs::write(
            home.join("slurm.toml"),
            format!(
                "shared_dir = \"{}\"\ngres = \"gpu\"\ngpus_per_node = 8\ngrace_seconds = 2\n[partitions]\nh100 = \"gpu\"\n",
                tmp.path().display()
            ),
        )
        .expect("slurm.toml");
        Cluster { tmp }
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("div-home")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(DIV);
        c.args(args)
            .current_dir(self.tmp.path().join("project"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("DIVERGENT_HOME", self.home())
            .env("NO_COLOR", "1");
        if let Some(conf) = std::env::var_os("SLURM_CONF") {
            c.env("SLURM_CONF", conf);
        }
        c
    }

    fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }
}

/// Its runs stopped (their jobs with them), then its server, when the test ends.
impl Drop for Cluster {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.command(args),
            &self.home(),
            self.tmp.path(),
        );
        let _ = self.div(&["server", "stop"]);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `div run` on the cluster prints the node's log (after the line naming its Slurm job) and
/// exits with the run's exit code.
#[test]
fn a_run_that_exits_3_makes_div_exit_3() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let out = c.div(&["run", "--gpu", "h100", "--", "sh", "-c", "echo bye; exit 3"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(stdout.contains("div: Slurm job "), "{stdout}");
    assert!(stdout.contains("bye"), "{stdout}");
}
