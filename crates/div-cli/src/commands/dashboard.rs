//! `div dashboard`: the local control plane's dashboard, opened on loopback TCP with a fresh
//! token; its URL on stdout, and `--open` hands it to the desktop's browser.

use anyhow::anyhow;

use super::shared::local::connect_local;
use crate::args::DashboardArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::{Settings, Target};

pub(crate) async fn dashboard(
    args: DashboardArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    if let Target::Remote { url, from, .. } = &settings.target {
        return Err(Failure::new(
            exit_codes::REFUSED,
            anyhow!(
                "`div dashboard` opens the local control plane's dashboard, and `{url}` ({from}) is a remote one"
            ),
        )
        .hint(Some(
            "open the remote control plane's own dashboard in a browser, or unset it to use the local one".into(),
        )));
    }
    // Started on demand, as for any command.
    connect_local(settings, div_api::Options::default()).await?;
    let socket = div_server::socket_path(&settings.home);
    let link = div_server::open_dashboard(&socket)
        .await
        .map_err(|e| Failure::new(exit_codes::UNREACHABLE, e))?;
    printer
        .data(&link.url)
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    printer.status(&format!(
        "the dashboard is on {} (this machine only); the link holds a fresh token, keep it to yourself",
        link.address
    ));
    if args.open {
        open_browser(&link.url, printer);
    }
    Ok(exit_codes::SUCCESS)
}

/// Hands `url` to `xdg-open`, where there is one; says so where there is none.
fn open_browser(url: &str, printer: &mut Printer) {
    let spawned = std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        Ok(_) => printer.status("opening it in the browser (xdg-open)"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => printer.warning(
            "no browser could be opened here: `xdg-open` is not installed",
            Some("open the URL above in a browser on this machine"),
        ),
        Err(e) => printer.warning(
            &format!("no browser could be opened here: xdg-open failed: {e}"),
            Some("open the URL above in a browser on this machine"),
        ),
    }
}
