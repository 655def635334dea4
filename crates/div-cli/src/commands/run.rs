//! `div run`.

use std::sync::Mutex;

use anyhow::anyhow;
use div_api::ControlPlane;
use div_core::{DryRun, Event, RunError, RunOptions, RunOutcome, shipping_line};

use super::shared::connect::connect;
use super::shared::follow::{LogColours, LogTail, outage_status};
use super::shared::output::{detached, failure, output_failure, print_json};
use super::shared::timings::Timings;
use crate::args::RunArgs;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

/// Where a run stands, as far as the printer has heard.
#[derive(Debug, Default)]
struct Seen {
    /// The request that places the run was sent.
    placing: bool,
    placed: Option<String>,
    /// The quarter of the image's bytes last said (`pulled 1.2 GB of 4.8 GB`).
    pulled_quarter: u64,
    /// The image is being pulled (not found in the cache).
    pulling: bool,
}

/// Said when Ctrl-C comes while the request that places the run is out.
const WAITING: &str =
    "waiting to hear whether the run was placed, to say how to follow it; Ctrl-C again to exit now";
/// Said when a second Ctrl-C exits before the answer came.
const GAVE_UP: &str =
    "exited before the control plane answered; the run may have been placed: `div runs` finds it";

/// From now on, a Ctrl-C exits at once. The listener is made before this returns, so a
/// Ctrl-C that comes right after is not missed.
fn exit_on_second_ctrl_c() -> Result<(), Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut second =
        signal(SignalKind::interrupt()).map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
    tokio::spawn(async move {
        if second.recv().await.is_some() {
            crate::printer::to_stderr(format_args!("{GAVE_UP}"));
            std::process::exit(exit_codes::INTERRUPTED);
        }
    });
    Ok(())
}

pub(crate) async fn run(
    args: RunArgs,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    if let Some(nodes) = &args.nodes {
        return Err(nodes_refused(nodes));
    }
    let json = args.json;
    // `--telemetry` as typed, for a hint that places the run again.
    let telemetry = args.telemetry.clone();
    let options = options(args, settings);
    let placed = div_core::PlacedWith::from_options(&options, telemetry.as_deref());
    if json {
        printer.log_to_stderr();
    }
    let cp = connect(settings).await?;

    let seen = Mutex::new(Seen::default());
    let mut timings = settings.timings.then(Timings::new);
    let mut tail = LogTail::placed_with(placed);
    // The log goes to stdout, or to stderr with `--json` (whose terminal `color` speaks for).
    let mut colours = LogColours::new(
        settings.color && (json || std::io::IsTerminal::is_terminal(&std::io::stdout())),
    );
    let following = Following {
        seen: &seen,
        timings: &mut timings,
        tail: &mut tail,
        colours: &mut colours,
    };
    let outcome = match place_and_follow(&*cp, &options, printer, following).await? {
        Followed::Ended(outcome) => outcome,
        Followed::Interrupted => return Ok(exit_codes::INTERRUPTED),
    };
    let outcome = outcome.map_err(|e| run_failure(e, &seen))?;
    report(printer, outcome, json, timings, &tail)
}

/// `--nodes`, refused: runs are placed in GPUs.
fn nodes_refused(nodes: &str) -> Failure {
    let hint = match nodes.parse::<u32>() {
        Ok(n) if n > 0 => format!(
            "for {n} nodes of eight, ask for `--gpus {}`",
            n.saturating_mul(8)
        ),
        _ => "ask for the GPUs themselves, like `--gpus 32`".to_string(),
    };
    Failure::new(
        exit_codes::REFUSED,
        anyhow!("runs are placed in GPUs, not nodes: `--gpus 32` asks for the same hardware as four nodes of eight"),
    )
    .hint(Some(hint))
}

/// What was typed, as div-core's options.
fn options(args: RunArgs, settings: &Settings) -> RunOptions {
    RunOptions {
        dir: settings.cwd.clone(),
        command: args.command,
        args: args.args,
        gpu: args.gpu,
        gpus: args.gpus,
        cpu: args.cpu,
        memory: args.memory,
        max_spend: args.max_spend,
        project: args.project,
        project_env: settings.project.clone(),
        name: args.name,
        image: args.image,
        pull: args.pull.map(Into::into),
        env: args.env,
        checks: args.check,
        telemetry: args.telemetry.map(|t| settings.cwd.join(t)),
        volume: args.volume,
        no_upload: args.no_upload,
        detach: args.detach,
        dry_run: args.dry_run,
        ship_cache: settings
            .cache_dir
            .as_ref()
            .map(|c| div_ship::cache_file_for(&c.join("ship"), &settings.cwd)),
        git_dir: settings.git_dir.clone(),
        git_work_tree: settings.git_work_tree.clone(),
        idempotency_key: None,
        model: args.model,
    }
}

/// What following a run keeps as its events go by, beside the printer.
struct Following<'a> {
    seen: &'a Mutex<Seen>,
    timings: &'a mut Option<Timings>,
    tail: &'a mut LogTail,
    colours: &'a mut LogColours,
}

/// How following the run ended: div-core's answer, or a Ctrl-C after which `div` exits (what
/// it leaves going is said already).
// Made once a run and moved once, as div-core's `RunOutcome` it holds (allowed the same).
#[allow(clippy::large_enum_variant)]
enum Followed {
    Ended(Result<RunOutcome, RunError>),
    Interrupted,
}

/// Places the run and follows it through div-core, rendering each event as it comes (a
/// verdict line coloured whole, the log's end kept, each step timed); a Ctrl-C is
/// [`until_ended_or_interrupted`]'s.
async fn place_and_follow(
    cp: &dyn ControlPlane,
    options: &RunOptions,
    printer: &mut Printer,
    following: Following<'_>,
) -> Result<Followed, Failure> {
    let Following {
        seen,
        timings,
        tail,
        colours,
    } = following;
    let (placed_tx, placed_rx) = tokio::sync::watch::channel::<Option<String>>(None);
    let printer_cell = Mutex::new(printer);
    let mut sink = |event: Event| {
        let event = match event {
            Event::Log(bytes) => {
                tail.saw(&bytes);
                let idle = bytes.is_empty();
                let now = colours.feed(bytes);
                if idle && !now.is_empty() {
                    let mut p = printer_cell.lock().unwrap_or_else(|e| e.into_inner());
                    render(&mut p, seen, Event::Log(now));
                    Event::Log(Default::default())
                } else {
                    Event::Log(now)
                }
            }
            Event::Ended(run) => {
                // A held piece of the log's last line is written before the end.
                let held = colours.feed(Default::default());
                if !held.is_empty() {
                    let mut p = printer_cell.lock().unwrap_or_else(|e| e.into_inner());
                    render(&mut p, seen, Event::Log(held));
                }
                Event::Ended(run)
            }
            other => other,
        };
        if let Some(t) = timings.as_mut() {
            t.saw(&event);
        }
        if let Event::Placed { run, .. } = &event {
            placed_tx.send_replace(Some(run.name.clone()));
        }
        let mut p = printer_cell.lock().unwrap_or_else(|e| e.into_inner());
        render(&mut p, seen, event);
    };
    let work = div_core::run(cp, options, &mut sink);
    until_ended_or_interrupted(work, seen, &printer_cell, placed_rx).await
}

/// Waits for `work`, div-core placing and following the run. A Ctrl-C detaches: a run placed
/// goes on, and `div` says how to follow it; before the request that places the run is out,
/// no run was made; while it is out, `div` waits for the answer, so it can say which run goes
/// on, and a second Ctrl-C exits at once.
async fn until_ended_or_interrupted(
    work: impl Future<Output = Result<RunOutcome, RunError>>,
    seen: &Mutex<Seen>,
    printer_cell: &Mutex<&mut Printer>,
    mut placed_rx: tokio::sync::watch::Receiver<Option<String>>,
) -> Result<Followed, Failure> {
    tokio::pin!(work);
    // Set once a Ctrl-C came while the request that places the run was out.
    let mut waiting = false;
    loop {
        tokio::select! {
            outcome = &mut work => return Ok(Followed::Ended(outcome)),
            _ = tokio::signal::ctrl_c(), if !waiting => {
                let (placed, placing) = {
                    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                    (seen.placed.clone(), seen.placing)
                };
                let mut p = printer_cell.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(name) = placed {
                    detached(&mut p, &name);
                    return Ok(Followed::Interrupted);
                }
                if !placing {
                    p.status("interrupted before the run was placed; no run was made");
                    return Ok(Followed::Interrupted);
                }
                exit_on_second_ctrl_c()?;
                p.status(WAITING);
                waiting = true;
            }
            changed = placed_rx.changed(), if waiting => {
                let name = placed_rx.borrow().clone();
                if let (Ok(()), Some(name)) = (changed, name) {
                    let mut p = printer_cell.lock().unwrap_or_else(|e| e.into_inner());
                    detached(&mut p, &name);
                    return Ok(Followed::Interrupted);
                }
            }
        }
    }
}

/// div-core's failure, as `div` says it. Placed, the run goes on whatever happened to this
/// `div`: the hint says how to reach it.
fn run_failure(e: RunError, seen: &Mutex<Seen>) -> Failure {
    // Given up past the run's latest end, it cannot go on: its own hint says what to do.
    let gone = matches!(e, RunError::ControlPlaneGone { .. });
    let failure = failure(e);
    match seen.lock().unwrap_or_else(|e| e.into_inner()).placed.clone() {
        Some(name) if !gone => failure.hint(Some(format!(
            "{name} goes on: follow it again with `div logs {name} --follow`, stop it with `div stop {name}`"
        ))),
        _ => failure,
    }
}

/// What `div run` prints once div-core answers, and its exit code: a dry run's report, a
/// detached run's name, or an ended run's last lines (and hint); each `--json` when asked.
fn report(
    printer: &mut Printer,
    outcome: RunOutcome,
    json: bool,
    timings: Option<Timings>,
    tail: &LogTail,
) -> Result<i32, Failure> {
    match outcome {
        RunOutcome::DryRun(dry) => {
            if json {
                print_json(printer, &dry.request)?;
            } else {
                dry_run_report(printer, &dry)?;
            }
            if let Some(t) = timings {
                printer.status(&t.line());
            }
            Ok(exit_codes::SUCCESS)
        }
        RunOutcome::Detached(run) => {
            if json {
                print_json(printer, &run)?;
            } else {
                printer.data(&run.name).map_err(output_failure)?;
            }
            Ok(exit_codes::SUCCESS)
        }
        RunOutcome::Ended(run) => {
            tail.end(printer, &run);
            if json {
                print_json(printer, &run)?;
            }
            if let Some(t) = timings {
                printer.status(&t.line());
            }
            Ok(exit_codes::for_run(&run))
        }
    }
}

/// What `div run` says while the control plane pulls the image: the layers and bytes, each
/// quarter of them as it arrives, the unpacking, then the digest.
fn pull_line(seen: &Mutex<Seen>, image: &str, event: &div_api::PullEvent) -> Option<String> {
    use div_api::{ImageSourceKind, PullEvent as P};
    match event {
        P::Resolved { layers, bytes } => {
            seen.lock().unwrap_or_else(|e| e.into_inner()).pulling = true;
            Some(format!(
                "pulling {image}: {layers} layer{}, {}",
                if *layers == 1 { "" } else { "s" },
                div_spec::format_bytes(*bytes)
            ))
        }
        P::Progress { done, total } if *total > 0 => {
            let quarter = done.saturating_mul(4) / total;
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            if quarter > seen.pulled_quarter && quarter < 4 {
                seen.pulled_quarter = quarter;
                Some(format!(
                    "pulled {} of {}",
                    div_spec::format_bytes(*done),
                    div_spec::format_bytes(*total)
                ))
            } else {
                None
            }
        }
        P::Unpacking { layer: 1, layers } => Some(format!(
            "unpacking {layers} layer{}",
            if *layers == 1 { "" } else { "s" }
        )),
        P::Ready { digest, .. } if seen.lock().unwrap_or_else(|e| e.into_inner()).pulling => {
            Some(format!("image {image} ready ({digest})"))
        }
        // Not pulled: which image the run gets, and why it may not be the registry's latest.
        P::Ready {
            digest,
            source: Some(ImageSourceKind::Cached),
            resolved_at,
            ..
        } => Some(match resolved_at {
            Some(at) => format!(
                "image {image}: {digest} from the cache, as the tag resolved at {at} (--pull always looks for a newer one)"
            ),
            None => format!("image {image}: {digest} from the cache"),
        }),
        P::Ready {
            digest,
            source: Some(ImageSourceKind::Checked),
            ..
        } => Some(format!(
            "image {image}: {digest}, as the registry has it now, already cached"
        )),
        _ => None,
    }
}

fn render(printer: &mut Printer, seen: &Mutex<Seen>, event: Event) {
    match event {
        Event::Shipping {
            files,
            bytes,
            volume,
            path,
        } => printer.status(&shipping_line(files, bytes, &volume, &path)),
        Event::OutsideRepository { files } => {
            printer.status(&div_core::outside_repository_line(files))
        }
        Event::Warning { message, hint } => printer.warning(&message, hint.as_deref()),
        Event::Hashing { hashed } => printer.hashing_started(hashed),
        Event::Step(div_core::Step::Listed) => printer.upload_finished(),
        Event::UploadStarted { bytes, .. } => printer.upload_started(bytes),
        Event::UploadProgress { sent } => printer.upload_progress(sent),
        Event::UploadFinished => printer.upload_finished(),
        Event::VolumeCreated { name, env } => {
            printer.status(&div_core::new_volume_line_for(&name, env.as_deref()))
        }
        Event::Placing => seen.lock().unwrap_or_else(|e| e.into_inner()).placing = true,
        Event::Pulling { image, event } => {
            if let Some(line) = pull_line(seen, &image, &event) {
                printer.status_escaped(&line);
            }
        }
        Event::Placed { run, header } => {
            seen.lock().unwrap_or_else(|e| e.into_inner()).placed = Some(run.name.clone());
            // From here a closed pipe leaves the run going, and says so where it can.
            crate::printer::following(Some(&run.name));
            printer.status(&header);
        }
        Event::Queued { reason } => printer.status(&format!("queued: {reason}")),
        Event::Started { run } => printer.status(&format!("{} started", run.name)),
        Event::Log(bytes) => {
            // A reader that went away ends `div` in the printer, leaving the run going; any
            // other failure to write the log (a full disk) loses those bytes, not the run.
            let _ = printer.log(&bytes);
        }
        Event::Ended(_) => crate::printer::following(None),
        Event::Step(_) => {}
        other => {
            outage_status(printer, &other);
        }
    }
}

fn dry_run_report(printer: &mut Printer, dry: &DryRun) -> Result<(), Failure> {
    let mut out = String::new();
    out.push_str(&format!("project    {}\n", dry.project.slug));
    out.push_str(&format!("entrypoint {}\n", dry.request.entrypoint));
    out.push_str(&format!("command    {}\n", dry.request.command));
    match &dry.shipment {
        Some(s) => {
            out.push_str(&format!(
                "ships      {}\n",
                shipping_line(s.files, s.bytes, &s.volume, &s.path)
            ));
            if !s.largest_files.is_empty() {
                out.push_str("largest files\n");
                for (path, size) in &s.largest_files {
                    out.push_str(&format!(
                        "  {:>10}  {path}\n",
                        div_spec::format_bytes(*size)
                    ));
                }
            }
            if !s.biggest_folders.is_empty() {
                out.push_str("biggest folders\n");
                for (path, size) in &s.biggest_folders {
                    out.push_str(&format!(
                        "  {:>10}  {path}\n",
                        div_spec::format_bytes(*size)
                    ));
                }
            }
        }
        None => out.push_str("ships      nothing (--no-upload)\n"),
    }
    for volume in &dry.new_volumes {
        out.push_str(&format!("would make {}\n", volume.line()));
    }
    out.push_str(&format!("header     {}\n", dry.header));
    let most = match dry.request.max_spend_cents {
        Some(_) => format!("{} (its ceiling)", dry.most_it_can_spend),
        None => format!("{} (24 hours with no ceiling)", dry.most_it_can_spend),
    };
    out.push_str(&format!("at most    {most}\n"));
    out.push_str("nothing was placed (--dry-run)");
    printer.data(&out).map_err(output_failure)
}
