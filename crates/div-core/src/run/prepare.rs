//! Everything `div run` checks before anything is created: the words typed, what will be
//! shipped (listed on a thread of its own while the catalogue is read), the catalogue's SKUs,
//! sizes and the org's limit, the volumes to make, and the control plane's own answer to
//! whether it would place the run. The answer is a [`Plan`].

use std::path::Path;

use div_api::{ApiError, Catalogue, CodeRef, ControlPlane, CreateRun, EnvVar};
use div_pricing::{SizeRequest, Sizing};
use div_ship::{ShipOptions, Shipment};
use div_spec::{Entrypoint, EnvPair, Money, Sku, UnknownSku, VolumeName};

use super::options::{NewVolume, RunOptions, volumes_named};
use crate::error::RunError;
use crate::event::{Event, EventSink, Step};
use crate::project::{Project, resolve_project};

/// How many bytes of the small files it hashes the listing keeps for the upload, which then
/// sends them without reading them again (a cold ship of 57,000 small files read each twice):
/// freed once the code is sent.
const KEEP_FOR_UPLOAD: u64 = 256 << 20;

/// Everything checked and ready to create.
pub(crate) struct Plan {
    pub(crate) project: Project,
    pub(crate) sizing: Sizing,
    /// The shipment, the volume it goes to, the path there, and its tree's digest (taken
    /// with the code id, in one pass over the entries).
    pub(crate) shipment: Option<(Shipment, String, String, String)>,
    pub(crate) new_volumes: Vec<NewVolume>,
    pub(crate) request: CreateRun,
}

/// The shipped set: being listed on a thread of its own, or listed already.
enum Listing {
    Thread(tokio::sync::oneshot::Receiver<Result<Shipment, div_ship::ShipError>>),
    Done(Result<Shipment, div_ship::ShipError>),
}

/// What the words typed name, checked with nothing else at hand.
struct Typed {
    entrypoint: Entrypoint,
    project: Project,
    /// Where the code goes: `--volume`, or `<project>-code`.
    volume: String,
}

/// Checks everything typed, lists what will be shipped, reads the catalogue, and asks the
/// control plane whether it would place the run: in that order, creating nothing.
pub(crate) async fn prepare(
    cp: &dyn ControlPlane,
    options: &RunOptions,
    sink: &mut dyn EventSink,
) -> Result<Plan, RunError> {
    let typed = check_typed(options)?;
    let mut telemetry_layout = match &options.telemetry {
        Some(path) => Some(layout_text(path, read_bytes(path)?)?),
        None => None,
    };

    sink.event(Event::Step(Step::Validated));

    let (listed, api_catalogue) = list_while_reading_catalogue(cp, options, sink).await;
    let shipment = match listed {
        Some(shipment) => Some(checked_shipment(
            shipment?,
            &typed.entrypoint,
            &options.dir,
            &mut telemetry_layout,
        )?),
        None => None,
    };

    sink.event(Event::Step(Step::Listed));

    // What needs the control plane's catalogue: reads only.
    let api_catalogue = api_catalogue.map_err(|e| RunError::api("read the catalogue", e))?;
    let sku = offered_sku(options, &api_catalogue)?;
    if let Some(name) = &options.name {
        check_name_free(cp, name).await?;
    }
    let catalogue = api_catalogue.pricing();
    let sizing = catalogue.size(&SizeRequest {
        sku,
        gpus: options.gpus,
        cpu: options.cpu,
        memory: options.memory,
    })?;
    let new_volumes = new_volumes(cp, typed.entrypoint.command(), &options.env).await?;

    let shipment = shipment.map(|s| {
        let digests = s.manifest.digests();
        let path = format!("code/{}", &digests.id[..8]);
        (s, typed.volume.clone(), path, digests.tree)
    });
    let request = create_run(options, &typed, sku, &sizing, &shipment, telemetry_layout);

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
        project: typed.project,
        sizing,
        shipment,
        new_volumes,
        request,
    })
}

/// What needs nothing but the words typed: the entrypoint, the project, the code's volume,
/// the run's name, the environment together and the grace the run sets for itself.
fn check_typed(options: &RunOptions) -> Result<Typed, RunError> {
    if options.command.is_empty() && options.args.is_empty() {
        return Err(RunError::NoEntrypoint);
    }
    let entrypoint = Entrypoint::from_parts(&options.command, &options.args)?;
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
    Ok(Typed {
        entrypoint,
        project,
        volume,
    })
}

/// What will be shipped (`None` with `--no-upload`), listed on a thread of its own while the
/// catalogue is read; both answers as they came.
async fn list_while_reading_catalogue(
    cp: &dyn ControlPlane,
    options: &RunOptions,
    sink: &mut dyn EventSink,
) -> (
    Option<Result<Shipment, div_ship::ShipError>>,
    Result<Catalogue, ApiError>,
) {
    let listing = if options.no_upload {
        None
    } else {
        Some(start_listing(options, sink))
    };
    let catalogue = cp.catalogue();
    match listing {
        Some(Listing::Thread(rx)) => {
            let (listed, catalogue) = tokio::join!(rx, catalogue);
            let listed = listed.expect("the listing thread does not panic");
            (Some(listed), catalogue)
        }
        Some(Listing::Done(listed)) => (Some(listed), catalogue.await),
        None => (None, catalogue.await),
    }
}

/// The listing of what is shipped, started on a thread of its own (said to the sink, which
/// can watch the files hashed); listed here and now when no thread is to be had.
fn start_listing(options: &RunOptions, sink: &mut dyn EventSink) -> Listing {
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
    match listed {
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
    }
}

/// The shipment, once its entrypoint is found in it as typed; a shipped `telemetry.toml` is
/// the layout when none was given.
fn checked_shipment(
    shipment: Shipment,
    entrypoint: &Entrypoint,
    dir: &Path,
    telemetry_layout: &mut Option<String>,
) -> Result<Shipment, RunError> {
    crate::pyscan::shipped::check_shipped(entrypoint, &shipment, dir)?;
    if telemetry_layout.is_none() && shipment.contains("telemetry.toml") {
        let bytes = shipment
            .read("telemetry.toml")
            .map_err(|source| RunError::Read {
                path: shipment.local_path("telemetry.toml"),
                source,
            })?;
        *telemetry_layout = Some(layout_text(&shipment.local_path("telemetry.toml"), bytes)?);
    }
    Ok(shipment)
}

/// The SKU typed, once the catalogue offers it and has the GPUs asked for; refused first when
/// the org's usage limit is reached.
fn offered_sku(options: &RunOptions, api_catalogue: &Catalogue) -> Result<Sku, RunError> {
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
    Ok(sku)
}

/// Refuses a `--name` a run already has.
async fn check_name_free(cp: &dyn ControlPlane, name: &str) -> Result<(), RunError> {
    match cp.get_run(name).await {
        Ok(_) => Err(RunError::NameTaken(name.to_owned())),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(RunError::api("look for a run of that name", e)),
    }
}

/// The volumes the command (or an `--env` value) names that do not exist yet.
async fn new_volumes(
    cp: &dyn ControlPlane,
    command: &str,
    env: &[EnvPair],
) -> Result<Vec<NewVolume>, RunError> {
    let named = volumes_named(command, env);
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let existing = cp
        .list_volumes()
        .await
        .map_err(|e| RunError::api("list the volumes", e))?;
    Ok(named
        .into_iter()
        .filter(|n| !existing.iter().any(|v| v.name == n.name))
        .collect())
}

/// The request that places the run, as everything checked says.
fn create_run(
    options: &RunOptions,
    typed: &Typed,
    sku: Sku,
    sizing: &Sizing,
    shipment: &Option<(Shipment, String, String, String)>,
    telemetry_layout: Option<String>,
) -> CreateRun {
    CreateRun {
        project: typed.project.slug.clone(),
        name: options.name.clone(),
        entrypoint: typed.entrypoint.typed().to_string(),
        command: typed.entrypoint.command().to_string(),
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
        code: shipment.as_ref().map(|(_, volume, path, _)| CodeRef {
            volume: volume.clone(),
            path: path.clone(),
            extra: Default::default(),
        }),
        telemetry_layout,
        model: options.model.as_ref().map(ToString::to_string),
        extra: Default::default(),
    }
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
