//! Which executor a server uses, read once from its state directory when it starts.

use std::path::Path;

use super::local::LocalExecutor;
use super::seam::Executor;
use super::slurm;

/// Where this server's runs run, chosen once when it starts from its state directory:
/// `home/slurm.toml` present means Slurm, absent means this machine. A third executor is one
/// folder beside `local` and `slurm` and one arm here.
#[derive(Debug)]
pub(crate) enum Choice {
    Local,
    Slurm(slurm::config::SlurmConfig),
}

impl Choice {
    /// The choice the state directory makes; an error says what is wrong with its settings.
    pub(crate) fn read(home: &Path) -> Result<Choice, crate::ServerError> {
        Ok(
            match slurm::config::load(home).map_err(|e| crate::ServerError::Slurm(e.to_string()))? {
                Some(config) => Choice::Slurm(config),
                None => Choice::Local,
            },
        )
    }

    /// Whether runs run on this machine.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Choice::Local)
    }

    /// The executor, and the inventory the server schedules against (this machine's, or the
    /// cluster's).
    pub(crate) fn open(
        self,
        options: &crate::ServerOptions,
        home: &Path,
        cgroups: &div_runtime::cgroup::Plan,
    ) -> Result<(crate::inventory::Inventory, Box<dyn Executor>), crate::ServerError> {
        Ok(match self {
            Choice::Slurm(config) => {
                let (executor, inventory) =
                    slurm::SlurmExecutor::open(config, &options.supervisor, home)
                        .map_err(|e| crate::ServerError::Slurm(e.to_string()))?;
                (inventory, Box::new(executor))
            }
            Choice::Local => (
                crate::inventory::Inventory::load(&options.gpus)?,
                Box::new(LocalExecutor::new(
                    options.supervisor.clone(),
                    cgroups.clone(),
                )),
            ),
        })
    }
}
