//! `div storage`.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::anyhow;
use div_core::{Event, Listing, PutOptions, VolumePath};
use serde_json::json;

use super::shared::connect::connect;
use super::shared::output::{columns, failure, output_failure, print_json};
use crate::args::StorageCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn storage(
    command: StorageCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        StorageCommand::Put {
            volume,
            path,
            to,
            json,
        } => {
            let options = PutOptions {
                volume,
                local: settings.cwd.join(path),
                to,
            };
            put(&options, json, settings, printer).await
        }
        StorageCommand::Get { from, dest, json } => {
            get(&from, &dest, json, settings, printer).await
        }
        StorageCommand::Ls {
            at,
            recursive,
            json,
        } => ls(at, recursive, json, settings, printer).await,
        StorageCommand::Rm { volume, yes } => rm(&volume, yes, settings, printer).await,
    }
}

/// `div storage put`: the upload's progress as it goes, then what was sent where.
async fn put(
    options: &PutOptions,
    json: bool,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let printer_cell = std::sync::Mutex::new(&mut *printer);
    let mut sink = |event: Event| {
        let mut p = printer_cell.lock().unwrap_or_else(|e| e.into_inner());
        p.upload_event(&event);
    };
    let put = div_core::storage_put(&*cp, options, &mut sink).await;
    let printer = printer_cell.into_inner().unwrap_or_else(|e| e.into_inner());
    let put = put.map_err(failure)?;
    for warning in &put.warnings {
        printer.warning(warning, None);
    }
    if json {
        print_json(
            printer,
            &json!({
                "volume": put.volume,
                "to": put.to,
                "files": put.files,
                "bytes": put.bytes,
                "created_volume": put.created_volume,
            }),
        )?;
    } else {
        if put.created_volume {
            printer.status(&format!("new volume {}", put.volume));
        }
        let noun = if put.files == 1 { "file" } else { "files" };
        printer.status(&format!(
            "{} {noun}, {} → {}",
            put.files,
            div_spec::format_bytes(put.bytes),
            place(&put.volume, &put.to)
        ));
    }
    Ok(exit_codes::SUCCESS)
}

/// `div storage get`.
async fn get(
    from: &str,
    dest: &Path,
    json: bool,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let from: VolumePath = from.parse().map_err(failure)?;
    let cp = connect(settings).await?;
    let got = div_core::storage_get(&*cp, &from, &settings.cwd.join(dest))
        .await
        .map_err(failure)?;
    if json {
        print_json(
            printer,
            &json!({"files": got.files, "bytes": got.bytes, "dest": got.dest}),
        )?;
    } else {
        let noun = if got.files == 1 { "file" } else { "files" };
        printer.status(&format!(
            "{} → {}: {} {noun}, {}",
            place(&from.volume, &from.path),
            dest.display(),
            got.files,
            div_spec::format_bytes(got.bytes)
        ));
    }
    Ok(exit_codes::SUCCESS)
}

/// `div storage ls`: the volumes, or what a volume holds at a path.
async fn ls(
    at: Option<String>,
    recursive: bool,
    json: bool,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let at: Option<VolumePath> = match at {
        Some(a) => Some(a.parse().map_err(failure)?),
        None => None,
    };
    let cp = connect(settings).await?;
    let listing = div_core::storage_ls(&*cp, at.as_ref(), recursive)
        .await
        .map_err(failure)?;
    match listing {
        Listing::Volumes(volumes) if json => print_json(printer, &volumes)?,
        Listing::Entries { entries, .. } if json => print_json(printer, &entries)?,
        Listing::Volumes(volumes) if volumes.is_empty() => printer.status("no volumes"),
        Listing::Volumes(volumes) => {
            let mut rows = vec![vec!["NAME".into(), "SIZE".into(), "CREATED".into()]];
            rows.extend(volumes.iter().map(|v| {
                vec![
                    v.name.clone(),
                    div_spec::format_bytes(v.size_bytes),
                    v.created_at.clone(),
                ]
            }));
            printer.data(&columns(&rows)).map_err(output_failure)?;
        }
        Listing::Entries {
            entries,
            volume,
            path,
        } if entries.is_empty() => printer.status(&format!("{volume}/{path} is empty")),
        Listing::Entries { entries, .. } => {
            let rows: Vec<Vec<String>> = entries.iter().map(|e| entry_row(e, recursive)).collect();
            printer.data(&columns(&rows)).map_err(output_failure)?;
        }
    }
    Ok(exit_codes::SUCCESS)
}

/// A line of `div storage ls` at a path: the size, and the name (`dir/`, `link -> target`).
fn entry_row(e: &div_api::VolumeEntry, recursive: bool) -> Vec<String> {
    // A folder shown without its contents carries their total.
    let size = if e.kind == "file" || (e.kind == "dir" && !recursive) {
        div_spec::format_bytes(e.size)
    } else {
        "-".into()
    };
    // A name that is not UTF-8 comes escaped; each of its bytes is shown as `\xNN`
    // (`caf\xe9.txt`).
    let path = div_ship::display_path(&e.path);
    let name = match (e.kind.as_str(), &e.target) {
        ("dir", _) => format!("{path}/"),
        ("symlink", Some(t)) => {
            format!("{path} -> {}", div_ship::display_path(t))
        }
        _ => path.into_owned(),
    };
    vec![size, name]
}

/// `div storage rm`: asked first on a terminal, unless `--yes`.
async fn rm(
    volume: &str,
    yes: bool,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit_codes::REFUSED,
                anyhow!("removing volume `{volume}` needs a confirmation, and there is no terminal to ask on"),
            )
            .hint(Some(format!("pass `--yes`: `div storage rm {volume} --yes`"))));
        }
        if !confirm(&format!(
            "remove volume {volume} and everything in it? [y/N] "
        )) {
            printer.status("nothing was removed");
            return Ok(exit_codes::REFUSED);
        }
    }
    let cp = connect(settings).await?;
    div_core::storage_rm(&*cp, volume).await.map_err(failure)?;
    printer.status(&format!("volume {volume} removed"));
    Ok(exit_codes::SUCCESS)
}

fn confirm(question: &str) -> bool {
    crate::printer::prompt(question);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok()
        && matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// `data` for a volume's root, `data/train` for a path in it.
fn place(volume: &str, path: &str) -> String {
    if path.is_empty() {
        volume.to_string()
    } else {
        format!("{volume}/{path}")
    }
}
