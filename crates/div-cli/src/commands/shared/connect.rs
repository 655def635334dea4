//! The control plane a command speaks to, and the run it acts on.

use anyhow::anyhow;
use div_api::{ControlPlane, Endpoint, HttpControlPlane, Options, Token};

use super::local::connect_local;
use super::output::failure;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::{Settings, Target};

/// The control plane the settings name: a remote one, or the local one (started on demand).
pub(crate) async fn connect(settings: &Settings) -> Result<Box<dyn ControlPlane>, Failure> {
    let mut options = Options::default();
    if let Some(deadline) = settings.deadline {
        options.deadline = deadline;
    }
    match &settings.target {
        Target::Remote { url, token, from } => {
            let endpoint = Endpoint::parse(url).map_err(|e| {
                Failure::new(
                    exit_codes::REFUSED,
                    anyhow!(e).context(format!("`{url}` ({from}) is not a control plane address")),
                )
                .hint(Some("write it like `https://api.example.com`".into()))
            })?;
            options.token = token.clone().map(Token::new);
            let cp = HttpControlPlane::new(endpoint, options)
                .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
            Ok(Box::new(cp))
        }
        Target::Local => connect_local(settings, options).await,
    }
}

/// The run a command acts on: the one named, or, when none is, the project's latest, said on
/// stderr (`run-k4t9, the latest run of quickstart`). Returns its name or id.
pub(crate) async fn which_run(
    cp: &dyn ControlPlane,
    settings: &Settings,
    printer: &mut Printer,
    named: Option<String>,
) -> Result<String, Failure> {
    Ok(which_run_named(cp, settings, printer, named).await?.0)
}

/// [`which_run`], and what to call the run when speaking of it: as typed, or its name.
pub(crate) async fn which_run_named(
    cp: &dyn ControlPlane,
    settings: &Settings,
    printer: &mut Printer,
    named: Option<String>,
) -> Result<(String, String), Failure> {
    if let Some(named) = named {
        return Ok((named.clone(), named));
    }
    let (project, run) = div_core::latest_run(cp, &settings.cwd, None, settings.project.as_deref())
        .await
        .map_err(failure)?;
    printer.status(&format!("{}, the latest run of {}", run.name, project.slug));
    Ok((run.id, run.name))
}
