//! `div config` and `div login`.

use anyhow::anyhow;

use crate::args::{ConfigArgs, LoginArgs};
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::{Settings, write_credentials};

/// Each setting, its value and where it came from; a token is always `<redacted>`.
pub(crate) fn config(
    args: ConfigArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    if args.json {
        super::run::print_json(printer, &settings.sources)?;
        return Ok(exit_codes::SUCCESS);
    }
    let rows: Vec<Vec<String>> = settings
        .sources
        .iter()
        .map(|s| vec![s.name.to_string(), s.value.clone(), format!("({})", s.from)])
        .collect();
    printer
        .data(&super::runs::columns(&rows))
        .map_err(super::run::output_failure)?;
    Ok(exit_codes::SUCCESS)
}

/// Store the control plane's address and a token (from stdin or a hidden prompt) in the user
/// config file, owner-only.
pub(crate) async fn login(
    args: LoginArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    div_api::Endpoint::parse(&args.api_url).map_err(|e| {
        Failure::new(
            exit_codes::REFUSED,
            anyhow!(e).context(format!("`{}` is not a control plane address", args.api_url)),
        )
        .hint(Some("write it like `https://api.example.com`".into()))
    })?;
    let path = settings.user_config.clone().ok_or_else(|| {
        Failure::new(
            exit_codes::LOCAL,
            anyhow!("neither XDG_CONFIG_HOME nor HOME is set, so there is no user config file"),
        )
    })?;
    let token = super::secrets::read_value("token (not shown): ", None).await?;
    write_credentials(&path, &args.api_url, &token)
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    printer.status(&format!(
        "the token for {} is in {} (readable by you only)",
        args.api_url,
        path.display()
    ));
    Ok(exit_codes::SUCCESS)
}
