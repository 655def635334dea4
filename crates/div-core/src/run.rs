//! `div run`: check everything typed, ship the code, place the run, follow its log.

use std::path::{Path, PathBuf};

use div_api::{CodeRef, ControlPlane, CreateRun, EnvVar, Run};
use div_pricing::{SizeRequest, Sizing};
use div_ship::{ShipOptions, Shipment};
use div_spec::{Check, EnvPair, MemoryGib, Money, Sku, UnknownSku, VolumeName};

use crate::error::RunError;
use crate::event::{Event, EventSink, Step};
use crate::follow::{follow_log, wait_in_queue};
use crate::project::{Project, resolve_project};
use crate::upload::{CODE_UPLOAD, upload};

/// The image a run gets when `--image` is not given (div-spec's, shared with the server).
pub use div_spec::DEFAULT_IMAGE;

/// How many bytes of the small files it hashes the listing keeps for the upload, which then
/// sends them without reading them again (a cold ship of 57,000 small files read each twice):
/// freed once the code is sent.
const KEEP_FOR_UPLOAD: u64 = 256 << 20;

/// A shipment of this many bytes or more gets a warning (100 MB, div-ship's figure): sent on
/// every run, it is usually data that belongs on a volume.
pub const LARGE_SHIPMENT_BYTES: u64 = div_ship::LARGE_SHIPMENT_BYTES;

/// Everything `div run` was asked, already parsed into div-spec's types.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The directory it was started in: what is shipped, and what names the project.
    pub dir: PathBuf,
    /// The entrypoint: one word (`train.py::run`, `train.py`, `'torchrun … train.py'`) or the
    /// words after `--`.
    pub command: Vec<String>,
    /// The words after `--` when an entrypoint came before it: the script's arguments
    /// (`div run train.py -- --epochs 3`). Without an entrypoint before `--`, the words after
    /// it are the command itself, and belong in `command`.
    pub args: Vec<String>,
    /// The SKU as typed (`--gpu`); checked against the control plane's catalogue.
    pub gpu: String,
    pub gpus: u32,
    pub cpu: Option<u32>,
    pub memory: Option<MemoryGib>,
    pub max_spend: Option<Money>,
    /// `--project`.
    pub project: Option<String>,
    /// `DIVERGENT_PROJECT`, read by the caller.
    pub project_env: Option<String>,
    pub name: Option<String>,
    /// `--image`, when typed: `None` sends no image, and the control plane runs the run in its
    /// default image (`DEFAULT_IMAGE`, or what its settings let stand in for it). A named
    /// image, the default one included, is pulled and never replaced.
    pub image: Option<String>,
    /// `--pull`: when the control plane asks the registry for the image; `None` leaves it
    /// to the control plane (`missing`).
    pub pull: Option<div_api::PullPolicy>,
    pub env: Vec<EnvPair>,
    pub checks: Vec<Check>,
    /// `--telemetry`: a layout file, read before anything is created.
    pub telemetry: Option<PathBuf>,
    /// `--volume`: where the code goes (default `<project>-code`).
    pub volume: Option<String>,
    pub no_upload: bool,
    pub detach: bool,
    pub dry_run: bool,
    /// Where div-ship keeps its hash cache, if anywhere.
    pub ship_cache: Option<PathBuf>,
    /// `GIT_DIR` and `GIT_WORK_TREE`, read by the caller: the repository and work tree whose
    /// files are shipped, as git would take them (`div_ship::ShipOptions`).
    pub git_dir: Option<PathBuf>,
    pub git_work_tree: Option<PathBuf>,
    /// Sent with the run's creation so a retried request never places a second run; one is
    /// made when `None`.
    pub idempotency_key: Option<String>,
}

impl RunOptions {
    /// Options with every flag at its default, for `command` started in `dir`.
    pub fn new(dir: impl Into<PathBuf>, command: Vec<String>) -> RunOptions {
        RunOptions {
            dir: dir.into(),
            command,
            args: Vec::new(),
            gpu: "h100".into(),
            gpus: 1,
            cpu: None,
            memory: None,
            max_spend: None,
            project: None,
            project_env: None,
            name: None,
            image: None,
            pull: None,
            env: Vec::new(),
            checks: Vec::new(),
            telemetry: None,
            volume: None,
            no_upload: false,
            detach: false,
            dry_run: false,
            ship_cache: None,
            git_dir: None,
            git_work_tree: None,
            idempotency_key: None,
        }
    }
}

/// How `run` returned.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum RunOutcome {
    /// `--dry-run`: what would have happened.
    DryRun(DryRun),
    /// `--detach`: the run as it was placed.
    Detached(Run),
    /// The run as it ended.
    Ended(Run),
}

/// What `--dry-run` found: everything checked, nothing created.
#[derive(Debug, Clone)]
pub struct DryRun {
    pub project: Project,
    /// What would be sent; `None` with `--no-upload`.
    pub shipment: Option<ShipmentSummary>,
    /// The header line, with `<name>` for the run's name.
    pub header: String,
    /// What the run costs an hour, in cents.
    pub cents_per_hour: i64,
    /// The most it can spend: its ceiling, or 24 hours at its rate.
    pub most_it_can_spend: Money,
    /// Volumes the command (or an `--env` value) names that would be made.
    pub new_volumes: Vec<NewVolume>,
    /// The request that would be sent.
    pub request: CreateRun,
}

/// A volume a run names at `/mnt/<name>` that does not exist yet: made before the run is
/// placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVolume {
    pub name: String,
    /// The `--env` key whose value names it (`CKPT_DIR=/mnt/ckpt-vol/ckpt`), when the command
    /// itself does not.
    pub env: Option<String>,
}

impl NewVolume {
    /// `new volume ckpt-vol, for the /mnt/ckpt-vol the command names` (or `that --env KEY
    /// names`).
    pub fn line(&self) -> String {
        crate::event::new_volume_line_for(&self.name, self.env.as_deref())
    }
}

/// Every `/mnt/<volume>` a run names: in its command, then in its `--env` values (a
/// checkpoint directory passed as `--env CKPT_DIR=/mnt/ckpt-vol/ckpt`), each once, with the
/// key of the first `--env` that names it when the command does not.
pub fn volumes_named(command: &str, env: &[EnvPair]) -> Vec<NewVolume> {
    let mut found: Vec<NewVolume> = Vec::new();
    let texts = std::iter::once((command, None))
        .chain(env.iter().map(|p| (p.value.as_str(), Some(p.key.as_str()))));
    for (text, key) in texts {
        for name in div_spec::volumes_named(text) {
            if !found.iter().any(|v| v.name == name.as_str()) {
                found.push(NewVolume {
                    name: name.as_str().to_owned(),
                    env: key.map(str::to_owned),
                });
            }
        }
    }
    found
}

/// What a shipment holds, for people.
#[derive(Debug, Clone)]
pub struct ShipmentSummary {
    pub files: u64,
    pub bytes: u64,
    pub volume: String,
    pub path: String,
    /// The largest files, biggest first.
    pub largest_files: Vec<(String, u64)>,
    /// The biggest top-level folders, biggest first.
    pub biggest_folders: Vec<(String, u64)>,
}

/// Everything checked and ready to create.
struct Plan {
    project: Project,
    sizing: Sizing,
    shipment: Option<(Shipment, String, String)>,
    new_volumes: Vec<NewVolume>,
    request: CreateRun,
}

/// The shipped set: being listed on a thread of its own, or listed already.
enum Listing {
    Thread(tokio::sync::oneshot::Receiver<Result<Shipment, div_ship::ShipError>>),
    Done(Result<Shipment, div_ship::ShipError>),
}

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
        // The control plane's callback may come from any thread; the sink is ours: events go
        // through a channel and are handed on here, as they come.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let progress = move |event: &div_api::PullEvent| {
            let _ = tx.send(event.clone());
        };
        let asked = div_api::PullImage {
            image: image.clone(),
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
                Some(event) = rx.recv() => sink.event(Event::Pulling { image: image.clone(), event }),
            }
        };
        while let Ok(event) = rx.try_recv() {
            sink.event(Event::Pulling {
                image: image.clone(),
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
    }
    // What will be shipped is said once nothing can be refused before the upload: an image
    // that cannot be used is refused without a line that reads as if code had gone.
    announce(&plan, sink);
    if let Some((shipment, volume, path)) = &mut plan.shipment {
        upload(cp, shipment, volume, (path, ""), &CODE_UPLOAD, sink).await?;
        // The bytes kept for the upload are not held while the run is followed.
        let kept = std::mem::take(&mut shipment.kept);
        std::thread::spawn(move || drop(kept));
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

async fn prepare(
    cp: &dyn ControlPlane,
    options: &RunOptions,
    sink: &mut dyn EventSink,
) -> Result<Plan, RunError> {
    // What needs nothing but the words typed.
    if options.command.is_empty() && options.args.is_empty() {
        return Err(RunError::NoEntrypoint);
    }
    let entrypoint = div_spec::Entrypoint::from_parts(&options.command, &options.args)?;
    let project = resolve_project(
        options.project.as_deref(),
        options.project_env.as_deref(),
        &options.dir,
    )?;
    let volume = match &options.volume {
        Some(v) => v.clone(),
        None => format!("{}-code", project.slug),
    };
    volume.parse::<VolumeName>().map_err(|e| RunError::Volume {
        name: volume.clone(),
        message: e.to_string(),
    })?;
    if let Some(name) = &options.name {
        div_spec::check_run_name(name)?;
    }
    // Each `--env` was checked as it was typed; together they must fit in an environment too
    // (the control plane adds the secrets and says if all of them do not).
    div_spec::check_env_total(
        "the run's --env variables",
        options
            .env
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str())),
    )?;
    // The grace the run sets for itself, refused here as the control plane would.
    if let Some(grace) = options
        .env
        .iter()
        .rev()
        .find(|p| p.key == div_spec::STOP_GRACE_ENV)
    {
        div_spec::parse_stop_grace(&grace.value)?;
    }
    let mut telemetry_layout = match &options.telemetry {
        Some(path) => Some(layout_text(path, read_bytes(path)?)?),
        None => None,
    };

    sink.event(Event::Step(Step::Validated));

    // What will be shipped, listed on a thread of its own while the catalogue is read.
    let listing = if options.no_upload {
        None
    } else {
        let hashed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        sink.event(Event::Hashing {
            hashed: hashed.clone(),
        });
        let ship_options = ShipOptions {
            cache: options.ship_cache.clone(),
            hashed: Some(hashed),
            git_dir: options.git_dir.clone(),
            work_tree: options.git_work_tree.clone(),
            keep_bytes: if options.dry_run { 0 } else { KEEP_FOR_UPLOAD },
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let dir = options.dir.clone();
        let listed = std::thread::Builder::new()
            .name("div-ship".into())
            .spawn(move || drop(tx.send(div_ship::collect(&dir, &ship_options))));
        Some(match listed {
            Ok(_) => Listing::Thread(rx),
            // No thread to be had: listed here, before the catalogue.
            Err(_) => Listing::Done(div_ship::collect(
                &options.dir,
                &ShipOptions {
                    cache: options.ship_cache.clone(),
                    git_dir: options.git_dir.clone(),
                    work_tree: options.git_work_tree.clone(),
                    ..ShipOptions::default()
                },
            )),
        })
    };
    let catalogue = cp.catalogue();
    let (listed, api_catalogue) = match listing {
        Some(Listing::Thread(rx)) => {
            let (listed, catalogue) = tokio::join!(rx, catalogue);
            let listed = listed.expect("the listing thread does not panic");
            (Some(listed), catalogue)
        }
        Some(Listing::Done(listed)) => (Some(listed), catalogue.await),
        None => (None, catalogue.await),
    };
    let shipment = match listed {
        Some(shipment) => {
            let shipment = shipment?;
            crate::pyscan::check_shipped(&entrypoint, &shipment, &options.dir)?;
            if telemetry_layout.is_none() && shipment.contains("telemetry.toml") {
                let bytes = shipment
                    .read("telemetry.toml")
                    .map_err(|source| RunError::Read {
                        path: shipment.local_path("telemetry.toml"),
                        source,
                    })?;
                telemetry_layout =
                    Some(layout_text(&shipment.local_path("telemetry.toml"), bytes)?);
            }
            Some(shipment)
        }
        None => None,
    };

    sink.event(Event::Step(Step::Listed));

    // What needs the control plane's catalogue: reads only.
    let api_catalogue = api_catalogue.map_err(|e| RunError::api("read the catalogue", e))?;
    if let Some(usage) = api_catalogue.org_usage().filter(|u| u.reached) {
        return Err(RunError::OrgLimitReached {
            limit: Money::from_cents(usage.limit_cents),
            spent: Money::from_cents(usage.spent_cents),
            month: usage.month,
        });
    }
    let accepted: Vec<&str> = api_catalogue.skus.iter().map(|s| s.name.as_str()).collect();
    let sku = match options.gpu.parse::<Sku>() {
        Ok(sku) if accepted.contains(&sku.name()) => sku,
        Ok(sku) => {
            return Err(RunError::SkuNotOffered {
                sku: sku.name().to_string(),
                accepted: accepted.iter().map(|s| s.to_string()).collect(),
            });
        }
        Err(_) => return Err(UnknownSku::with_accepted(&options.gpu, &accepted).into()),
    };
    if sku.is_gpu()
        && let Some(have) = api_catalogue
            .skus
            .iter()
            .find(|s| s.name == sku.name())
            .and_then(|s| s.capacity)
        && options.gpus > have
    {
        return Err(RunError::TooManyGpus {
            sku: sku.label().to_string(),
            asked: options.gpus,
            have,
        });
    }
    if let Some(name) = &options.name {
        match cp.get_run(name).await {
            Ok(_) => return Err(RunError::NameTaken(name.clone())),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(RunError::api("look for a run of that name", e)),
        }
    }
    let catalogue = api_catalogue.pricing();
    let sizing = catalogue.size(&SizeRequest {
        sku,
        gpus: options.gpus,
        cpu: options.cpu,
        memory: options.memory,
    })?;

    let named = volumes_named(entrypoint.command(), &options.env);
    let new_volumes = if named.is_empty() {
        Vec::new()
    } else {
        let existing = cp
            .list_volumes()
            .await
            .map_err(|e| RunError::api("list the volumes", e))?;
        named
            .into_iter()
            .filter(|n| !existing.iter().any(|v| v.name == n.name))
            .collect()
    };

    let shipment = shipment.map(|s| {
        let path = format!("code/{}", s.manifest.short_id());
        (s, volume.clone(), path)
    });
    let request = CreateRun {
        project: project.slug.clone(),
        name: options.name.clone(),
        entrypoint: entrypoint.typed().to_string(),
        command: entrypoint.command().to_string(),
        sku: sku.name().to_string(),
        // As sized: the cpu SKU has no GPUs, whatever `--gpus` defaulted to.
        gpus: sizing.gpus,
        cpu: options.cpu,
        memory_gib: options.memory.map(|m| m.gib()),
        max_spend_cents: options.max_spend.map(|m| m.cents()),
        image: options.image.clone(),
        pull: options.pull,
        env: options
            .env
            .iter()
            .map(|p| EnvVar {
                key: p.key.clone(),
                value: p.value.clone(),
            })
            .collect(),
        checks: options.checks.iter().map(|c| c.to_string()).collect(),
        code: shipment.as_ref().map(|(_, volume, path)| CodeRef {
            volume: volume.clone(),
            path: path.clone(),
            extra: Default::default(),
        }),
        telemetry_layout,
        extra: Default::default(),
    };

    // What only the control plane can refuse (what its executor can never place, the
    // secrets' share of the environment…), asked before anything is pulled, shipped or made:
    // refused here, it prints as the same refusal from `POST /v1/runs` would. The code is not
    // sent yet, so it is not named.
    let asked = CreateRun {
        code: None,
        ..request.clone()
    };
    cp.validate_run(&asked)
        .await
        .map_err(|e| RunError::api("place the run", e))?;

    Ok(Plan {
        project,
        sizing,
        shipment,
        new_volumes,
        request,
    })
}

/// The line that says what is shipped (`14 files, 38.2 KB → …`), and its warnings.
fn announce(plan: &Plan, sink: &mut dyn EventSink) {
    if let Some((s, volume, path)) = &plan.shipment {
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
            .map(|(s, volume, path)| ShipmentSummary {
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

fn read_bytes(path: &Path) -> Result<Vec<u8>, RunError> {
    std::fs::read(path).map_err(|source| RunError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A telemetry layout's text, once it reads as a layout: refused before anything is created
/// rather than stored with the run and found wrong when its telemetry is plotted.
fn layout_text(path: &Path, bytes: Vec<u8>) -> Result<String, RunError> {
    let refused = |message: String| RunError::LayoutFile {
        path: path.to_path_buf(),
        message,
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        refused(format!(
            "it is not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    match crate::telemetry::Layout::parse(&text) {
        Ok(_) => Ok(text),
        Err(crate::telemetry::LayoutError(message)) => Err(refused(message)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<EnvPair> {
        pairs
            .iter()
            .map(|(k, v)| EnvPair {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect()
    }

    fn named(command: &str, pairs: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
        volumes_named(command, &env(pairs))
            .into_iter()
            .map(|v| (v.name, v.env))
            .collect()
    }

    #[test]
    fn an_env_value_names_a_volume_as_the_command_does() {
        let own = |n: &str| (n.to_string(), None);
        let by = |n: &str, k: &str| (n.to_string(), Some(k.to_string()));
        assert_eq!(
            named("python train.py", &[("CKPT_DIR", "/mnt/ckpt-vol/ckpt")]),
            [by("ckpt-vol", "CKPT_DIR")]
        );
        // Named by both: the command's, once.
        assert_eq!(
            named(
                "ls /mnt/data && python train.py",
                &[
                    ("DATA", "/mnt/data/v1"),
                    ("OUT", "/mnt/out"),
                    ("B", "/mnt/out/x")
                ]
            ),
            [own("data"), by("out", "OUT")]
        );
        // Not a path that starts with /mnt/, or a name the shell builds: nothing.
        assert_eq!(
            named(
                "true",
                &[("A", "/data/mnt/x"), ("B", "/mnt/$V"), ("C", "x")]
            ),
            []
        );
    }
}
