//! `div models push|ls|show|rm` and `div evals`: models' versions and the evaluations of
//! them, through div-core (`div_core::push_model`, `models`, `model`, `remove_model`,
//! `evaluations`). `div eval` is `div run` with a model (`dispatch.rs`).

use div_api::{Evaluation, ModelVersion};
use div_core::{Event, PushFrom, VolumePath};

use super::shared::connect::connect;
use super::shared::output::{columns, failure, print_json};
use crate::args::{EvalsArgs, ModelsCommand};
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn models(
    command: ModelsCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    match command {
        ModelsCommand::Push {
            name,
            path,
            from,
            json,
        } => {
            let from = match (path, from) {
                (_, Some(at)) => PushFrom::Volume(at.parse::<VolumePath>().map_err(failure)?),
                (Some(path), None) => PushFrom::Local(settings.cwd.join(path)),
                (None, None) => unreachable!("clap asks for PATH or --from"),
            };
            push(&name, &from, json, settings, printer).await
        }
        ModelsCommand::Ls { json } => ls(json, settings, printer).await,
        ModelsCommand::Show { name, json } => show(&name, json, settings, printer).await,
        ModelsCommand::Rm { model } => {
            let cp = connect(settings).await?;
            div_core::remove_model(&*cp, &model)
                .await
                .map_err(failure)?;
            printer.status(&format!("removed {model}"));
            Ok(exit_codes::SUCCESS)
        }
    }
}

/// `mask-rcnn v3 sha256:…`
fn version_line(v: &ModelVersion) -> String {
    format!("{} v{} {}", v.model, v.version, v.digest)
}

async fn push(
    name: &str,
    from: &PushFrom,
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
    let pushed = div_core::push_model(&*cp, name, from, &mut sink).await;
    let printer = printer_cell.into_inner().unwrap_or_else(|e| e.into_inner());
    let pushed = pushed.map_err(failure)?;
    for warning in &pushed.warnings {
        printer.warning(warning, None);
    }
    if json {
        print_json(printer, &pushed.version)?;
    } else {
        printer
            .data(&version_line(&pushed.version))
            .map_err(super::shared::output::output_failure)?;
        let v = &pushed.version;
        let files = format!(
            "{} file{}, {}",
            v.files,
            if v.files == 1 { "" } else { "s" },
            div_spec::format_bytes(v.bytes)
        );
        printer.status(&if pushed.new {
            format!("new version v{} of {}: {files}", v.version, v.model)
        } else {
            format!(
                "unchanged: v{} of {} already is this tree ({files}); no version made",
                v.version, v.model
            )
        });
    }
    Ok(exit_codes::SUCCESS)
}

async fn ls(json: bool, settings: &Settings, printer: &mut Printer) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let list = div_core::models(&*cp).await.map_err(failure)?;
    if json {
        print_json(printer, &list)?;
        return Ok(exit_codes::SUCCESS);
    }
    if list.models.is_empty() {
        printer.status("no models yet: push one with `div models push NAME PATH`");
        return Ok(exit_codes::SUCCESS);
    }
    let mut rows = vec![vec![
        "MODEL".to_owned(),
        "VERSIONS".to_owned(),
        "LATEST".to_owned(),
        "DIGEST".to_owned(),
        "SIZE".to_owned(),
        "PUSHED".to_owned(),
    ]];
    for m in &list.models {
        let latest = m.latest.as_ref();
        rows.push(vec![
            m.name.clone(),
            m.versions.to_string(),
            latest.map_or_else(|| "-".into(), |v| format!("v{}", v.version)),
            latest.map_or_else(|| "-".into(), |v| short_digest(&v.digest)),
            latest.map_or_else(|| "-".into(), |v| div_spec::format_bytes(v.bytes)),
            latest.map_or_else(|| "-".into(), |v| v.created_at.clone()),
        ]);
    }
    printer
        .data_escaped(columns(&rows).trim_end())
        .map_err(super::shared::output::output_failure)?;
    Ok(exit_codes::SUCCESS)
}

/// `sha256:` and the first 12 hex digits, as a table shows a digest (the whole is in
/// `--json`).
fn short_digest(digest: &str) -> String {
    digest.get(..19).unwrap_or(digest).to_owned()
}

async fn show(
    name: &str,
    json: bool,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let model = div_core::model(&*cp, name).await.map_err(failure)?;
    if json {
        print_json(printer, &model)?;
        return Ok(exit_codes::SUCCESS);
    }
    let mut rows = vec![vec![
        "VERSION".to_owned(),
        "DIGEST".to_owned(),
        "FILES".to_owned(),
        "SIZE".to_owned(),
        "PUSHED".to_owned(),
        "BY".to_owned(),
        "EVALUATIONS".to_owned(),
        "FROM".to_owned(),
    ]];
    for v in &model.versions {
        let evaluated = model
            .evaluations
            .iter()
            .filter(|e| e.version == v.version)
            .count();
        rows.push(vec![
            format!("v{}", v.version),
            v.digest.clone(),
            v.files.to_string(),
            div_spec::format_bytes(v.bytes),
            v.created_at.clone(),
            v.created_by.clone().unwrap_or_else(|| "-".into()),
            evaluated.to_string(),
            v.from.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = columns(&rows);
    if !model.evaluations.is_empty() {
        out.push('\n');
        out.push_str(&evaluation_table(&model.evaluations));
    }
    printer
        .data_escaped(out.trim_end())
        .map_err(super::shared::output::output_failure)?;
    Ok(exit_codes::SUCCESS)
}

/// How an evaluation's checks went, as a run's last line says it (`passed 2 of 2 checks`,
/// `missed 1 of 2 checks`); `-` while the run has not ended, `no checks` without any.
fn verdicts_said(e: &Evaluation) -> String {
    if !e.status.is_terminal() {
        return "-".into();
    }
    div_core::checks_said(&e.checks, &e.verdicts).unwrap_or_else(|| "no checks".into())
}

/// `metrics.accuracy=0.91 metrics.loss=0.2`: the result's metrics, one level deep.
fn metrics_said(e: &Evaluation) -> String {
    match &e.metrics {
        Some(serde_json::Value::Object(m)) => m
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        Some(other) => other.to_string(),
        None => "-".into(),
    }
}

fn evaluation_table(evaluations: &[Evaluation]) -> String {
    let mut rows = vec![vec![
        "EVALUATION".to_owned(),
        "MODEL".to_owned(),
        "RUN".to_owned(),
        "STATUS".to_owned(),
        "CHECKS".to_owned(),
        "METRICS".to_owned(),
        "CREATED".to_owned(),
    ]];
    for e in evaluations {
        rows.push(vec![
            e.id.clone(),
            format!("{}:v{}", e.model, e.version),
            e.run_name.clone(),
            e.status.to_string(),
            verdicts_said(e),
            metrics_said(e),
            e.created_at.clone(),
        ]);
    }
    columns(&rows)
}

/// `div evals [MODEL] [--check …] [--json]`.
pub(crate) async fn evals(
    args: EvalsArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    let list = div_core::evaluations(&*cp, args.model.as_ref())
        .await
        .map_err(failure)?;
    if !args.check.is_empty() {
        return gate(&*cp, &list.evaluations, &args, printer).await;
    }
    if args.json {
        print_json(printer, &list.evaluations)?;
        return Ok(exit_codes::SUCCESS);
    }
    if list.evaluations.is_empty() {
        printer.status("no evaluations yet: `div eval MODEL ENTRYPOINT` places one");
        return Ok(exit_codes::SUCCESS);
    }
    printer
        .data_escaped(evaluation_table(&list.evaluations).trim_end())
        .map_err(super::shared::output::output_failure)?;
    Ok(exit_codes::SUCCESS)
}

/// `--check`: the latest evaluation's result judged, each verdict said; 210 when one missed.
async fn gate(
    cp: &dyn div_core::ControlPlane,
    evaluations: &[Evaluation],
    args: &EvalsArgs,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let Some(latest) = evaluations.first() else {
        let of = args
            .model
            .as_ref()
            .map_or_else(String::new, |m| format!(" of `{m}`"));
        return Err(Failure::new(
            exit_codes::REFUSED,
            anyhow::anyhow!("there is no evaluation{of} to judge"),
        )
        .hint(Some("place one with `div eval MODEL ENTRYPOINT`".into())));
    };
    let judged = div_core::judge(cp, latest, &args.check)
        .await
        .map_err(failure)?;
    if args.json {
        let verdicts: Vec<serde_json::Value> = judged
            .iter()
            .map(|(line, passed)| serde_json::json!({"line": line, "passed": passed}))
            .collect();
        print_json(
            printer,
            &serde_json::json!({"evaluation": latest, "judged": verdicts}),
        )?;
    } else {
        printer.status(&format!(
            "{} of {}:v{} ({}, {})",
            latest.id, latest.model, latest.version, latest.run_name, latest.digest
        ));
        let lines: Vec<&str> = judged.iter().map(|(l, _)| l.as_str()).collect();
        printer
            .data_escaped(&lines.join("\n"))
            .map_err(super::shared::output::output_failure)?;
    }
    Ok(if judged.iter().all(|(_, passed)| *passed) {
        exit_codes::SUCCESS
    } else {
        exit_codes::CHECK_MISSED
    })
}
