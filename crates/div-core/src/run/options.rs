//! What `div run` is asked ([`RunOptions`]) and what it answers ([`RunOutcome`], a
//! [`DryRun`]'s report), and the volumes a run names.

use std::path::{Path, PathBuf};

use div_api::{CreateRun, Run};
use div_spec::{Check, EnvPair, MemoryGib, Money};

use crate::missing_module::{PlacedFlags, PlacedWith};
use crate::project::Project;

/// The image a run gets when `--image` is not given (div-spec's, shared with the server).
pub use div_spec::DEFAULT_IMAGE;

/// Everything `div run` was asked, already parsed into div-spec's types.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The directory it was started in: what is shipped, and what names the project.
    pub dir: PathBuf,
    /// The entrypoint: one word (`train.py::run`, `train.py`, `'torchrun … train.py'`) or the
    /// words after `--`.
    pub command: Vec<String>,
    /// The words after `--` when an entrypoint came before it: the script's arguments
    /// (`div run train.py -- --epochs 3`). Without an entrypoint before `--`, the words after
    /// it are the command itself, and belong in `command`.
    pub args: Vec<String>,
    /// The SKU as typed (`--gpu`); checked against the control plane's catalogue.
    pub gpu: String,
    pub gpus: u32,
    pub cpu: Option<u32>,
    pub memory: Option<MemoryGib>,
    pub max_spend: Option<Money>,
    /// `--project`.
    pub project: Option<String>,
    /// `DIVERGENT_PROJECT`, read by the caller.
    pub project_env: Option<String>,
    pub name: Option<String>,
    /// `--image`, when typed: `None` sends no image, and the control plane runs the run in its
    /// default image (`DEFAULT_IMAGE`, or what its settings let stand in for it). A named
    /// image, the default one included, is pulled and never replaced.
    pub image: Option<String>,
    /// `--pull`: when the control plane asks the registry for the image; `None` leaves it
    /// to the control plane (`missing`).
    pub pull: Option<div_api::PullPolicy>,
    pub env: Vec<EnvPair>,
    pub checks: Vec<Check>,
    /// `--telemetry`: a layout file, read before anything is created.
    pub telemetry: Option<PathBuf>,
    /// `--volume`: where the code goes (default `<project>-code`).
    pub volume: Option<String>,
    pub no_upload: bool,
    pub detach: bool,
    pub dry_run: bool,
    /// Where div-ship keeps its hash cache, if anywhere.
    pub ship_cache: Option<PathBuf>,
    /// `GIT_DIR` and `GIT_WORK_TREE`, read by the caller: the repository and work tree whose
    /// files are shipped, as git would take them (`div_ship::ShipOptions`).
    pub git_dir: Option<PathBuf>,
    pub git_work_tree: Option<PathBuf>,
    /// Sent with the run's creation so a retried request never places a second run; one is
    /// made when `None`.
    pub idempotency_key: Option<String>,
    /// `div eval NAME…` or `--model`: the model version the run judges (its latest, for a
    /// name alone, resolved by the control plane when the run is placed).
    pub model: Option<div_spec::ModelRef>,
}

impl RunOptions {
    /// Options with every flag at its default, for `command` started in `dir`.
    pub fn new(dir: impl Into<PathBuf>, command: Vec<String>) -> RunOptions {
        RunOptions {
            dir: dir.into(),
            command,
            args: Vec::new(),
            gpu: "h100".into(),
            gpus: 1,
            cpu: None,
            memory: None,
            max_spend: None,
            project: None,
            project_env: None,
            name: None,
            image: None,
            pull: None,
            env: Vec::new(),
            checks: Vec::new(),
            telemetry: None,
            volume: None,
            no_upload: false,
            detach: false,
            dry_run: false,
            ship_cache: None,
            git_dir: None,
            git_work_tree: None,
            idempotency_key: None,
            model: None,
        }
    }
}

/// How `run` returned.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum RunOutcome {
    /// `--dry-run`: what would have happened.
    DryRun(DryRun),
    /// `--detach`: the run as it was placed.
    Detached(Run),
    /// The run as it ended.
    Ended(Run),
}

/// What `--dry-run` found: everything checked, nothing created.
#[derive(Debug, Clone)]
pub struct DryRun {
    pub project: Project,
    /// What would be sent; `None` with `--no-upload`.
    pub shipment: Option<ShipmentSummary>,
    /// The header line, with `<name>` for the run's name.
    pub header: String,
    /// What the run costs an hour, in cents.
    pub cents_per_hour: i64,
    /// The most it can spend: its ceiling, or 24 hours at its rate.
    pub most_it_can_spend: Money,
    /// Volumes the command (or an `--env` value) names that would be made.
    pub new_volumes: Vec<NewVolume>,
    /// The request that would be sent.
    pub request: CreateRun,
}

/// A volume a run names at `/mnt/<name>` that does not exist yet: made before the run is
/// placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVolume {
    pub name: String,
    /// The `--env` key whose value names it (`CKPT_DIR=/mnt/ckpt-vol/ckpt`), when the command
    /// itself does not.
    pub env: Option<String>,
}

impl NewVolume {
    /// `new volume ckpt-vol, for the /mnt/ckpt-vol the command names` (or `that --env KEY
    /// names`).
    pub fn line(&self) -> String {
        crate::event::new_volume_line_for(&self.name, self.env.as_deref())
    }
}

/// Every `/mnt/<volume>` a run names: in its command, then in its `--env` values (a
/// checkpoint directory passed as `--env CKPT_DIR=/mnt/ckpt-vol/ckpt`), each once, with the
/// key of the first `--env` that names it when the command does not.
pub fn volumes_named(command: &str, env: &[EnvPair]) -> Vec<NewVolume> {
    let mut found: Vec<NewVolume> = Vec::new();
    let texts = std::iter::once((command, None))
        .chain(env.iter().map(|p| (p.value.as_str(), Some(p.key.as_str()))));
    for (text, key) in texts {
        for name in div_spec::volumes_named(text) {
            if !found.iter().any(|v| v.name == name.as_str()) {
                found.push(NewVolume {
                    name: name.as_str().to_owned(),
                    env: key.map(str::to_owned),
                });
            }
        }
    }
    found
}

/// What a shipment holds, for people.
#[derive(Debug, Clone)]
pub struct ShipmentSummary {
    pub files: u64,
    pub bytes: u64,
    pub volume: String,
    pub path: String,
    /// The largest files, biggest first.
    pub largest_files: Vec<(String, u64)>,
    /// The biggest top-level folders, biggest first.
    pub biggest_folders: Vec<(String, u64)>,
}

impl PlacedWith {
    /// How a run about to be placed with `options` is placed, for a hint that places it
    /// again: every flag typed but `--name` (a second run cannot have it) and those that only
    /// say how to print (`--dry-run`, and the caller's own), and the `requirements.txt` beside
    /// the entrypoint (in `options.dir`), which is shipped with it. `telemetry` is
    /// `--telemetry` as typed: `options.telemetry` is that path made absolute to be read.
    pub fn from_options(options: &RunOptions, telemetry: Option<&Path>) -> PlacedWith {
        let flags = PlacedFlags {
            gpu: (options.gpu != "h100").then_some(options.gpu.as_str()),
            gpus: (options.gpus != 1).then_some(options.gpus),
            cpu: options.cpu,
            memory: options.memory,
            max_spend: options.max_spend,
            project: options.project.as_deref(),
            image: options.image.as_deref(),
            pull: options.pull,
            env: options
                .env
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect(),
            checks: options.checks.iter().map(ToString::to_string).collect(),
            telemetry,
            volume: options.volume.as_deref(),
            no_upload: options.no_upload,
            detach: options.detach,
        };
        PlacedWith {
            flags: flags.words(),
            requirements: if options.no_upload {
                None
            } else {
                shipped_requirements(&options.dir)
            },
        }
    }
}

/// The text of `dir/requirements.txt`, when there is one of at most a megabyte (a
/// requirements file, not a data file of that name).
fn shipped_requirements(dir: &Path) -> Option<String> {
    std::fs::File::open(dir.join("requirements.txt"))
        .ok()
        .filter(|f| {
            f.metadata()
                .is_ok_and(|m| m.is_file() && m.len() <= 1 << 20)
        })
        .and_then(|f| std::io::read_to_string(f).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<EnvPair> {
        pairs
            .iter()
            .map(|(k, v)| EnvPair {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect()
    }

    fn named(command: &str, pairs: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
        volumes_named(command, &env(pairs))
            .into_iter()
            .map(|v| (v.name, v.env))
            .collect()
    }

    #[test]
    fn an_env_value_names_a_volume_as_the_command_does() {
        let own = |n: &str| (n.to_string(), None);
        let by = |n: &str, k: &str| (n.to_string(), Some(k.to_string()));
        assert_eq!(
            named("python train.py", &[("CKPT_DIR", "/mnt/ckpt-vol/ckpt")]),
            [by("ckpt-vol", "CKPT_DIR")]
        );
        // Named by both: the command's, once.
        assert_eq!(
            named(
                "ls /mnt/data && python train.py",
                &[
                    ("DATA", "/mnt/data/v1"),
                    ("OUT", "/mnt/out"),
                    ("B", "/mnt/out/x")
                ]
            ),
            [own("data"), by("out", "OUT")]
        );
        // Not a path that starts with /mnt/, or a name the shell builds: nothing.
        assert_eq!(
            named(
                "true",
                &[("A", "/data/mnt/x"), ("B", "/mnt/$V"), ("C", "x")]
            ),
            []
        );
    }

    /// The flags typed are written back in `div run --help`'s order, defaults left out, and
    /// `--telemetry` as typed; a `requirements.txt` beside the entrypoint comes with them,
    /// unless nothing is shipped.
    #[test]
    fn the_flags_typed_are_written_back_as_typed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("requirements.txt"), "numpy\n").unwrap();
        let mut options = RunOptions::new(dir.path(), vec!["train.py".into()]);
        options.gpu = "cpu".into();
        options.memory = Some("8".parse().unwrap());
        options.max_spend = Some("2.50".parse().unwrap());
        options.pull = Some(div_api::PullPolicy::Always);
        options.env = env(&[("A", "1 2")]);
        options.checks = vec!["metrics.accuracy>=0.8".parse().unwrap()];
        options.telemetry = Some(dir.path().join("layout.toml"));
        options.detach = true;
        let placed = PlacedWith::from_options(&options, Some(Path::new("layout.toml")));
        assert_eq!(
            placed.flags,
            [
                "--gpu",
                "cpu",
                "--memory",
                &options.memory.unwrap().to_string(),
                "--max-spend",
                "$2.50",
                "--pull",
                "always",
                "--env",
                "A=1 2",
                "--check",
                &options.checks[0].to_string(),
                "--telemetry",
                "layout.toml",
                "--detach",
            ]
        );
        assert_eq!(placed.requirements.as_deref(), Some("numpy\n"));
        options.no_upload = true;
        let placed = PlacedWith::from_options(&options, None);
        assert_eq!(placed.requirements, None);
        assert_eq!(placed.flags.last().map(String::as_str), Some("--detach"));
        assert!(placed.flags.contains(&"--no-upload".to_string()));
    }
}
