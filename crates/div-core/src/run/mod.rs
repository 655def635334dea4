//! `div run`: check everything typed ([`prepare`]), pull the image, ship the code, place the
//! run, follow its log.

pub(crate) mod options;
mod prepare;

use div_api::{ControlPlane, CreateRun};
use div_ship::Shipment;
use div_spec::Money;

use self::options::{DryRun, RunOptions, RunOutcome, ShipmentSummary};
use self::prepare::{Plan, prepare};
use crate::error::RunError;
use crate::event::{Event, EventSink};
use crate::follow::{follow_log, wait_in_queue};
use crate::upload::{CODE_UPLOAD, upload};

/// A shipment of this many bytes or more gets a warning (100 MB, div-ship's figure): sent on
/// every run, it is usually data that belongs on a volume.
pub const LARGE_SHIPMENT_BYTES: u64 = div_ship::LARGE_SHIPMENT_BYTES;

/// Place a run and, unless detached, follow it until it ends.
///
/// Everything typed is checked first — SKU (against `cp`'s catalogue), sizes, entrypoint,
/// project, what will be shipped, the telemetry layout — then the control plane is asked
/// whether it would place the run ([`ControlPlane::validate_run`]), and only then is anything
/// created: before that, the only requests are reads (`GET /v1/catalogue`, `GET /v1/volumes`)
/// and that question, which creates nothing.
pub async fn run(
    cp: &dyn ControlPlane,
    options: &RunOptions,
    sink: &mut dyn EventSink,
) -> Result<RunOutcome, RunError> {
    let mut plan = prepare(cp, options, sink).await?;
    if options.dry_run {
        announce(&plan, sink);
        return Ok(RunOutcome::DryRun(dry_run(plan)));
    }
    let mut request = plan.request.clone();
    // The image first, before anything is shipped: one that cannot be used is refused now,
    // and a pull's progress shows before the header.
    if let Some(image) = request.image.clone() {
        pull_image(cp, &image, options, &mut request, sink).await?;
    }
    // What will be shipped is said once nothing can be refused before the upload: an image
    // that cannot be used is refused without a line that reads as if code had gone.
    announce(&plan, sink);
    if let Some((shipment, volume, path, digest)) = plan.shipment.take() {
        let to = (path.as_str(), "");
        upload(
            cp,
            &shipment,
            &volume,
            to,
            Some(&digest),
            &CODE_UPLOAD,
            sink,
        )
        .await?;
        // Nor is the shipment held while the run is followed (the bytes kept for the upload,
        // an entry per file): one of many files is freed on a thread of its own, rather than
        // at the run's end before `div` can exit (1.2 ms for 40,000 files); a small one here
        // (a thread costs more).
        if shipment.files() > 4096 {
            std::thread::spawn(move || drop(shipment));
        }
    }
    for volume in &plan.new_volumes {
        cp.create_volume(&volume.name)
            .await
            .map_err(|e| RunError::api("make the volume", e))?;
        sink.event(Event::VolumeCreated {
            name: volume.name.clone(),
            env: volume.env.clone(),
        });
    }
    let key = options
        .idempotency_key
        .clone()
        .unwrap_or_else(idempotency_key);
    request.extra = Default::default();
    sink.event(Event::Placing);
    let placed = cp
        .create_run(&key, &request)
        .await
        .map_err(|e| RunError::api("place the run", e))?;
    let header = div_pricing::header_line(&placed.name, &plan.sizing, options.max_spend);
    sink.event(Event::Placed {
        run: Box::new(placed.clone()),
        header,
    });
    if options.detach {
        return Ok(RunOutcome::Detached(placed));
    }
    let started = wait_in_queue(cp, &placed, sink).await?;
    let ended = follow_log(cp, &started, 0, sink).await?;
    Ok(RunOutcome::Ended(ended))
}

/// Has the control plane pull `image` (or find it in its cache), handing the sink each
/// [`div_api::PullEvent`] as it comes. Where it asked the registry (`--pull always`),
/// `request` then asks for what the cache holds, which the tag now names.
async fn pull_image(
    cp: &dyn ControlPlane,
    image: &str,
    options: &RunOptions,
    request: &mut CreateRun,
    sink: &mut dyn EventSink,
) -> Result<(), RunError> {
    // The control plane's callback may come from any thread; the sink is ours: events go
    // through a channel and are handed on here, as they come.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let progress = move |event: &div_api::PullEvent| {
        let _ = tx.send(event.clone());
    };
    let asked = div_api::PullImage {
        image: image.to_owned(),
        pull: options.pull,
    };
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen_ready = std::sync::Arc::clone(&ready);
    let progress = move |event: &div_api::PullEvent| {
        if matches!(event, div_api::PullEvent::Ready { .. }) {
            seen_ready.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        progress(event);
    };
    let pull = cp.pull_image_with(&asked, &progress);
    tokio::pin!(pull);
    let pulled = loop {
        tokio::select! {
            pulled = &mut pull => break pulled,
            Some(event) = rx.recv() => sink.event(Event::Pulling { image: image.to_owned(), event }),
        }
    };
    while let Ok(event) = rx.try_recv() {
        sink.event(Event::Pulling {
            image: image.to_owned(),
            event,
        });
    }
    pulled.map_err(|e| RunError::api("pull the image", e))?;
    // The run gets the image this pull just found: where it asked the registry
    // (`always`), the run is created from the cache, which its tag now names, so a tag
    // that moves meanwhile does not give the run another image than the one shown.
    if ready.load(std::sync::atomic::Ordering::Relaxed)
        && options.pull == Some(div_api::PullPolicy::Always)
    {
        request.pull = Some(div_api::PullPolicy::Missing);
    }
    Ok(())
}

/// The line that says what is shipped (`14 files, 38.2 KB → …`), and its warnings.
fn announce(plan: &Plan, sink: &mut dyn EventSink) {
    if let Some((s, volume, path, _)) = &plan.shipment {
        if s.source == div_ship::Source::Walk {
            sink.event(Event::OutsideRepository { files: s.files() });
        }
        sink.event(Event::Shipping {
            files: s.files(),
            bytes: s.bytes(),
            volume: volume.clone(),
            path: path.clone(),
        });
        for warning in shipment_warnings(s) {
            sink.event(warning);
        }
    }
}

fn dry_run(plan: Plan) -> DryRun {
    let rate = plan.sizing.rate;
    let ceiling = plan.request.max_spend_cents.map(Money::from_cents);
    let most = ceiling.unwrap_or_else(|| rate.spend_after(div_spec::MAX_RUN_SECONDS));
    let dry = DryRun {
        header: div_pricing::header_line("<name>", &plan.sizing, ceiling),
        cents_per_hour: rate.cents_per_hour(),
        most_it_can_spend: most,
        shipment: plan
            .shipment
            .as_ref()
            .map(|(s, volume, path, _)| ShipmentSummary {
                files: s.files(),
                bytes: s.bytes(),
                volume: volume.clone(),
                path: path.clone(),
                largest_files: s.largest_files(5),
                biggest_folders: s.biggest_folders(5),
            }),
        new_volumes: plan.new_volumes,
        project: plan.project,
        request: plan.request,
    };
    // A shipment holds a manifest entry per file: freed on a thread of its own rather than
    // before the answer.
    std::thread::spawn(move || drop(plan.shipment));
    dry
}

/// Warnings about a shipment: what div-ship noticed (links left out…), and a shipment of
/// [`LARGE_SHIPMENT_BYTES`] or more, naming the biggest thing at its top level, with a hint
/// that fits where it is: `.gitignore` in a repository, `git init` and one outside.
fn shipment_warnings(s: &Shipment) -> Vec<Event> {
    let mut events: Vec<Event> = s
        .warnings
        .iter()
        .map(|w| Event::Warning {
            message: w.clone(),
            hint: None,
        })
        .collect();
    if let Some(mut large) = s.large(LARGE_SHIPMENT_BYTES) {
        // The biggest thing at the top level may be a file, not a folder: name it.
        let top_file = s
            .largest_files(1)
            .into_iter()
            .find(|(path, _)| !path.contains('/'))
            .filter(|(_, size)| large.biggest_folder.as_ref().is_none_or(|(_, b)| size > b));
        let message = match &top_file {
            Some((file, size)) => format!(
                "this ships {}, {} of it in `{file}`",
                div_spec::format_bytes(large.bytes),
                div_spec::format_bytes(*size)
            ),
            None => large.message(),
        };
        if top_file.is_some() {
            large.biggest_folder = top_file;
        }
        events.push(Event::Warning {
            message,
            hint: Some(large.hint()),
        });
    }
    events
}

/// A key unique to this attempt: the time, the process and a counter.
fn idempotency_key() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "div-{nanos:x}-{:x}-{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}
