//! `div secrets`: values come from stdin, a prompt that does not echo, or a file — never from
//! the command line, so they stay out of shell history and `ps`.

use anyhow::anyhow;

use super::shared::connect::connect;
use super::shared::output::{columns, failure, output_failure, print_json};
use super::shared::prompt::read_value;
use crate::args::SecretsCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn secrets(
    command: SecretsCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        SecretsCommand::Set { name, from_file } => {
            match div_spec::check_env_name(&name) {
                Ok(()) => {}
                // A name of the right letters, too long: said with its length and the bound.
                Err(e @ div_spec::EnvError::KeyTooLong { .. }) => {
                    return Err(Failure::new(
                        exit_codes::REFUSED,
                        anyhow!("the secret's name is refused: {e}"),
                    ));
                }
                Err(_) => return Err(failure(div_core::RunError::SecretName(name))),
            }
            let value = read_value(
                &format!("value for {name} (not shown): "),
                from_file
                    .as_deref()
                    .map(|f| settings.cwd.join(f))
                    .as_deref(),
            )
            .await?;
            // Refused here, before the control plane is asked: no NUL, at most 128 KiB.
            div_spec::check_env_value(&name, &value)
                .map_err(|e| Failure::new(exit_codes::REFUSED, anyhow!(e)))?;
            let cp = connect(settings).await?;
            div_core::secret_set(&*cp, &name, &value)
                .await
                .map_err(failure)?;
            printer.status(&format!(
                "secret {name} set; every run placed from now on has it (an --env of the same name wins)"
            ));
        }
        SecretsCommand::Ls { json } => {
            let cp = connect(settings).await?;
            let list = div_core::secret_list(&*cp).await.map_err(failure)?;
            if json {
                print_json(printer, &list)?;
            } else if list.is_empty() {
                printer.status("no secrets");
            } else {
                let mut rows = vec![vec!["NAME".to_string(), "UPDATED".to_string()]];
                rows.extend(
                    list.iter()
                        .map(|s| vec![s.name.clone(), s.updated_at.clone()]),
                );
                printer.data(&columns(&rows)).map_err(output_failure)?;
            }
        }
        SecretsCommand::Rm { name } => {
            let cp = connect(settings).await?;
            div_core::secret_remove(&*cp, &name)
                .await
                .map_err(failure)?;
            printer.status(&format!("secret {name} removed"));
        }
    }
    Ok(exit_codes::SUCCESS)
}
