//! `div config` and `div login`.

use anyhow::anyhow;

use super::shared::local::inventory_in_effect;
use super::shared::output::{columns, output_failure, print_json};
use super::shared::prompt::read_value;
use crate::args::{ConfigArgs, LoginArgs};
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::{Settings, Source, Target, write_credentials};

/// Each setting, its value and where it came from; a token is always `<redacted>`. With the
/// local control plane, the last row is the GPU inventory really in effect: the running
/// server's, which `DIVERGENT_EMULATE_GPUS` only asks for (nothing is started to find it).
pub(crate) async fn config(
    args: ConfigArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let mut sources = settings.sources.clone();
    if matches!(settings.target, Target::Local) {
        let (value, from) = match inventory_in_effect(settings).await {
            Some(words) => (words, "the local control plane running now".to_owned()),
            None => (
                "none running".to_owned(),
                "no local control plane answers; the next one starts with emulate_gpus".to_owned(),
            ),
        };
        sources.push(Source {
            name: "inventory",
            value,
            from,
        });
    }
    if args.json {
        print_json(printer, &sources)?;
        return Ok(exit_codes::SUCCESS);
    }
    let rows: Vec<Vec<String>> = sources
        .iter()
        .map(|s| vec![s.name.to_string(), s.value.clone(), format!("({})", s.from)])
        .collect();
    printer.data(&columns(&rows)).map_err(output_failure)?;
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
    let token = read_value("token (not shown): ", None).await?;
    write_credentials(&path, &args.api_url, &token)
        .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    printer.status(&format!(
        "the token for {} is in {} (readable by you only)",
        args.api_url,
        path.display()
    ));
    Ok(exit_codes::SUCCESS)
}
