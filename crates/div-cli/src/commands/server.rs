//! `div server …`, `div __supervise`, and starting the local control plane on demand.

use anyhow::anyhow;
use div_api::{ControlPlane, Options};

use crate::args::ServerCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

/// The local control plane, started when it is not answering.
pub(crate) async fn connect_local(
    _settings: &Settings,
    _options: Options,
) -> Result<Box<dyn ControlPlane>, Failure> {
    Err(Failure::new(
        exit_codes::UNREACHABLE,
        anyhow!("the local control plane is not part of this build yet"),
    )
    .hint(Some("set DIVERGENT_API_URL to a control plane".into())))
}

pub(crate) async fn server(
    _command: ServerCommand,
    settings: &Settings,
    _printer: &mut Printer,
) -> Result<i32, Failure> {
    connect_local(settings, Options::default()).await.map(|_| 0)
}

pub(crate) fn supervise(_run_dir: &std::path::Path) -> i32 {
    exit_codes::LOCAL
}
