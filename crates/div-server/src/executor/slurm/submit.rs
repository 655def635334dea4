//! Submitting a run: its shape on the cluster (nodes, GPUs, cores and memory a node), the job's
//! time limit, sbatch's resource options, and the batch script (`slurm.sh`).

use super::config::SlurmConfig;
use crate::executor::{Placement, Unplaceable};

/// The batch script's template: `@RUN_DIR@` and `@SUPERVISE@` are filled in, shell-quoted.
pub(super) const BATCH_TEMPLATE: &str = include_str!("slurm.sh");
/// Minutes added to the job's `--time` past the ceiling, so div's own stop (which writes the
/// run's end) comes first and Slurm's is the backstop.
pub(super) const TIME_MARGIN_MINUTES: u64 = 1;

/// How a run is laid out on the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) partition: String,
    pub(crate) nodes: u32,
    pub(crate) gpus_per_node: u32,
    pub(crate) cpus_per_node: u32,
    pub(crate) memory_gib_per_node: u32,
}

/// `--gpus N`: one node up to a node's GPUs, whole nodes past it; cores and memory split
/// evenly between the nodes (rounded up).
pub(crate) fn shape(config: &SlurmConfig, placement: &Placement<'_>) -> Result<Shape, Unplaceable> {
    let partition = config
        .partitions
        .get(placement.sku)
        .cloned()
        .ok_or_else(|| {
            let named: Vec<&str> = config.partitions.keys().map(String::as_str).collect();
            Unplaceable(format!(
                "this Slurm cluster has no partition for `{}` in slurm.toml; it takes {}",
                placement.sku,
                named.join(", ")
            ))
        })?;
    let per = config.gpus_per_node;
    let gpus = placement.gpus;
    let (nodes, gpus_per_node) = if gpus <= per {
        (1, gpus)
    } else if gpus.is_multiple_of(per) {
        (gpus / per, per)
    } else {
        let below = gpus / per * per;
        return Err(Unplaceable(format!(
            "`--gpus {gpus}`: past {per} GPUs a run takes whole nodes of {per} GPUs; ask for `--gpus {below}` or `--gpus {}`",
            below + per
        )));
    };
    Ok(Shape {
        partition,
        nodes,
        gpus_per_node,
        cpus_per_node: placement.cores.div_ceil(nodes).max(1),
        memory_gib_per_node: placement.memory_gib.div_ceil(nodes).max(1),
    })
}

/// The job's `--time`, in minutes: what the ceiling buys (or 24 hours), capped at 24 hours,
/// plus a minute so that div's own stop comes first.
pub(crate) fn time_minutes(
    cents_per_hour: i64,
    max_spend_cents: Option<i64>,
    max_seconds: u64,
) -> u64 {
    let mut seconds = max_seconds;
    if let Some(ceiling) = max_spend_cents
        && cents_per_hour > 0
        && ceiling > 0
    {
        let buys = (ceiling as u128 * 3600).div_ceil(cents_per_hour as u128);
        seconds = seconds.min(u64::try_from(buys).unwrap_or(u64::MAX));
    }
    seconds.div_ceil(60).max(1) + TIME_MARGIN_MINUTES
}

/// sbatch's resource options for `shape`.
pub(super) fn resource_args(config: &SlurmConfig, shape: &Shape) -> Vec<String> {
    let mut args = vec![
        format!("--partition={}", shape.partition),
        format!("--nodes={}", shape.nodes),
        "--ntasks-per-node=1".to_owned(),
        format!("--cpus-per-task={}", shape.cpus_per_node),
        format!("--mem={}G", shape.memory_gib_per_node),
    ];
    if shape.gpus_per_node > 0 {
        args.push(format!("--gres={}:{}", config.gres, shape.gpus_per_node));
    }
    args
}

/// The options that tell the cluster's own accounting who ran the job: the member's account
/// (`--account`), where one is set, and a comment naming the member and the run, which
/// `sacct --format=comment` and `squeue --format=%k` show (docs/team.md).
pub(super) fn accounting_args(
    run: &div_api::Run,
    member: &str,
    account: Option<&str>,
) -> Vec<String> {
    let mut args = vec![format!("--comment=div run {} placed by {member}", run.name)];
    if let Some(account) = account {
        args.push(format!("--account={account}"));
    }
    args
}

/// Single-quotes `s` for bash.
pub(super) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::accounting_args;

    #[test]
    fn the_job_names_its_member_and_is_charged_to_their_account() {
        let mut run = div_test_support::mock::sample_run("run-k4t9", div_api::RunStatus::Queued);
        run.placed_by = Some("alice".into());
        assert_eq!(
            accounting_args(&run, "alice", Some("vision")),
            [
                "--comment=div run run-k4t9 placed by alice",
                "--account=vision"
            ]
        );
        assert_eq!(
            accounting_args(&run, "owner", None),
            ["--comment=div run run-k4t9 placed by owner"]
        );
    }
}
