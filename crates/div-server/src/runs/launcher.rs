//! The launcher: prepares a run's directory (workspace, `/tmp`, volume mount points), writes
//! the supervisor's `spec.json` (command line in its sandbox, environment, limits, checks)
//! and hands the run to the [`Executor`](crate::executor::Executor), recording where it went.

use std::fs;
use std::path::{Path, PathBuf};

use div_api::RunStatus;

use crate::disk_pool::{DISK_POOL, refill_pool};
use crate::executor::{Launch, StartError};
use crate::images::{self, RunImage, RunImageError};
use crate::rules;
use crate::server::Server;
use crate::settings::Settings;
use crate::store::{RunInternal, RunRecord, StoreError};
use div_runtime::clock::{self, now_ms};
use div_runtime::phases;
use div_runtime::sandbox::{self, SandboxInput};
use div_runtime::supervisor::{self, RunSpec};
use div_runtime::workspace::Overlay;

/// Why a run could not start: the words go into its reason (`the run could not start: …`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("unknown SKU")]
    UnknownSku,
    #[error(transparent)]
    Image(#[from] RunImageError),
    #[error("the image {0} needs the sandbox (bubblewrap), which is missing or turned off here")]
    NeedsSandbox(String),
    #[error(
        "the image {reference} ({digest}) is no longer in the image cache (pruned after the run was placed); place the run again to pull it"
    )]
    Pruned { reference: String, digest: String },
    /// The image's `WorkingDir` cannot be made a directory (its own words).
    #[error(transparent)]
    WorkingDir(#[from] div_runtime::image_tree::WorkingDirError),
    #[error(transparent)]
    Start(#[from] StartError),
    /// The GPUs or the driver cannot be given as the run needs them (div-runtime's words).
    #[error(transparent)]
    Gpu(#[from] div_runtime::gpu::GpuError),
}

/// Starts `record` on `cores` and `gpus`, with a disk of its own of `disk` bytes where it
/// gets one (`scratch`), and records it as running; an error says why it could not start.
pub(crate) fn launch(
    server: &Server,
    record: &mut RunRecord,
    cores: &[usize],
    gpus: &[u32],
    disk: Option<u64>,
) -> Result<(), LaunchError> {
    let began = phases::now_us();
    let dir = server.home.run_dir(&record.run.id);
    let (spec, secrets) = prepare(server, record, &dir, cores, gpus, disk)?;
    supervisor::write_json_atomic(&dir.join("spec.json"), &spec)?;
    let _ = fs::remove_file(dir.join(phases::FILE));
    phases::mark_at(&dir, "launch", began);
    phases::mark(&dir, "spec");
    for left in [
        "end.json",
        "stop",
        div_runtime::decision::FILE,
        crate::executor::slurm::STARTED_FILE,
        crate::org::STOP_FILE,
        supervisor::ABANDONED_FILE,
        supervisor::UNSENT_FILE,
    ] {
        let _ = fs::remove_file(dir.join(left));
    }
    // Recorded as launched before the supervisor starts: a server killed between the start
    // and the record below finds, on its restart, a launched run whose supervisor it does not
    // know yet (the executor finds it by the run's lock, or its job file), never a queued run
    // that it would start a second time over the first. A run that waits in its executor's
    // own queue (Slurm's) stays queued, and is billed nothing, until that says it started
    // (`scheduler::check_running`).
    let queues = server.executor.queues();
    record.internal = RunInternal {
        handle: None,
        cores: cores.to_vec(),
        gpus: gpus.to_vec(),
        started_ms: (!queues).then_some(spec.started_ms),
        launched: true,
        grace_seconds: Some(spec.stop_grace_seconds),
        max_seconds: Some(spec.max_seconds),
        disk_bytes: spec
            .disk
            .as_ref()
            .filter(|d| d.own_filesystem)
            .map(|d| d.bytes),
    };
    if queues {
        record.run.status = RunStatus::Queued;
        record.run.started_at = None;
    } else {
        record.run.status = RunStatus::Running;
        record.run.started_at = Some(clock::rfc3339(spec.started_ms));
    }
    server.store.update_run(record)?;
    // The member's account on a cluster that charges by one; a member revoked meanwhile has
    // none, and its run goes to the cluster's default.
    let member = record
        .run
        .placed_by
        .clone()
        .unwrap_or_else(|| crate::members::OWNER.to_owned());
    let account = crate::members::slurm_account(&server.store, &member)?;
    let handle = server.executor.start(&Launch {
        run_dir: &dir,
        run: &record.run,
        secrets: &secrets,
        exited: &server.kick,
        member: &member,
        account: account.as_deref(),
    });
    phases::mark(&dir, "started");
    match handle {
        Ok(handle) => {
            record.internal.handle = Some(handle);
            Ok(server.store.update_run(record)?)
        }
        Err(e) => {
            // Nothing started: the record goes back to what the caller holds it as (not
            // launched, so the scheduler may try it again).
            record.internal = RunInternal::default();
            record.run.status = RunStatus::Queued;
            record.run.started_at = None;
            Err(e.into())
        }
    }
}

/// Makes the run's directories and says how its supervisor is to run it, and with which
/// secrets.
fn prepare(
    server: &Server,
    record: &RunRecord,
    dir: &Path,
    cores: &[usize],
    gpus: &[u32],
    disk: Option<u64>,
) -> Result<(RunSpec, Vec<(String, String)>), LaunchError> {
    let run = &record.run;
    fs::create_dir_all(dir)?;
    let (workspace, overlay) = workspace(server, run, dir)?;
    let places = places(server, dir)?;
    let sku = rules::sku(&run.sku).ok_or(LaunchError::UnknownSku)?;
    // A settings file that cannot be read is said on the server's log; the defaults hold.
    let settings = Settings::read(&server.home).unwrap_or_else(|e| {
        server.warn_once(&e.to_string());
        Settings::default()
    });
    let shared = server.inventory.shared(sku.gpu, run.cores, run.memory_gib);
    let image = images::read_run_image(dir)?;
    let mut first_lines = first_lines(server, run, &sku, shared, image.as_ref())?;
    let real_gpus = sku.gpu && !server.inventory.emulated;
    let (env, secrets_at) = environment(
        server,
        run,
        image.as_ref(),
        gpus,
        real_gpus,
        &mut first_lines,
    )?;
    let secrets = server.store.secret_values()?;
    let command = run_command(run, image.as_ref(), &env, &mut first_lines)?;
    // Where a root server can mount for runs (the overlay `/workspace`), the supervisor also
    // lays the `python` shim over `/usr/local/bin` itself, for this machine's own system
    // (an unprivileged server's runs get it from bubblewrap's arguments).
    let python_shim = (server.sandboxed
        && server.overlay
        && image.is_none()
        && rustix::process::geteuid().is_root())
    .then(|| sandbox::python_shim_folder(&server.home))
    .flatten();
    let gpu = gpu_plan(server, dir, image.as_ref(), real_gpus.then_some(gpus))?;
    first_lines.extend(gpu.iter().flat_map(|g| g.notes.iter().cloned()));
    let argv = argv(
        server,
        run,
        dir,
        &Sandboxed {
            command: &command,
            workspace: &workspace,
            places: &places,
            image: image.as_ref(),
            gpu: gpu.as_ref(),
            shim_by_supervisor: python_shim.is_some(),
        },
    );
    let spec = RunSpec {
        run_id: run.id.clone(),
        run_name: run.name.clone(),
        argv,
        cwd: if run.code.is_some() {
            workspace.clone()
        } else {
            PathBuf::from("/")
        },
        env,
        secrets_at: Some(secrets_at),
        secrets_file: None,
        first_lines,
        cores: cores.to_vec(),
        memory_bytes: u64::from(if shared {
            run.memory_gib.min(server.inventory.host_memory_gib)
        } else {
            run.memory_gib
        }) << 30,
        cgroups: server.cgroups.clone(),
        cents_per_hour: run.cents_per_hour,
        max_spend_cents: run.max_spend_cents,
        max_seconds: settings.max_run_seconds(),
        stop_grace_seconds: run
            .env
            .iter()
            .rev()
            .find(|e| e.key == rules::STOP_GRACE_ENV)
            .and_then(|e| rules::parse_stop_grace(&e.value).ok())
            .unwrap_or(settings.stop_grace_seconds()),
        started_ms: now_ms(),
        checks: run.checks.clone(),
        result_path: places.tmp.join("divergent/result.json"),
        telemetry_path: places.tmp.join("divergent/telemetry.jsonl"),
        mnt_dir: server.sandboxed.then(|| places.mnt.clone()),
        volumes: places.volumes.iter().map(|(n, _)| n.clone()).collect(),
        workspace,
        overlay,
        python_shim,
        init: server.init.clone(),
        node: None,
        tasks: Some(rules::run_tasks(run.cores)),
        disk: run_disk(server, &settings, disk, dir),
    };
    Ok((spec, secrets))
}

/// The command the run's system runs (`image_command` in an image), and, for a run that
/// shipped nothing, its image's `WorkingDir` made where the image lacks it (said in
/// `first_lines`); one that cannot be a directory refuses the start.
fn run_command(
    run: &div_api::Run,
    image: Option<&RunImage>,
    env: &[(String, String)],
    first_lines: &mut Vec<String>,
) -> Result<String, LaunchError> {
    let command = match image {
        Some(image) => {
            let path = env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map_or("", |(_, v)| v.as_str());
            image_command(image, &run.entrypoint, &run.command, path, first_lines)
        }
        None => run.command.clone(),
    };
    // A run that shipped nothing starts in the image's `WorkingDir`; one the image lacks is
    // made for the run (docs/runtime.md), one that cannot be a directory refuses the start.
    if let Some(image) = image.filter(|_| run.code.is_none()) {
        let dir = image.working_dir.as_deref().unwrap_or("/");
        let made = div_runtime::image_tree::working_dir_args(&image.rootfs, dir)?;
        if made != div_runtime::image_tree::WorkingDirArgs::default() {
            first_lines.push(format!(
                "div: the image has no {}, its WorkingDir: made for this run (empty, writable, gone when it ends), as docker does",
                dir.escape_debug()
            ));
        }
    }
    Ok(command)
}

/// The run's `/workspace`: an overlay over its committed code (mounted by the supervisor, in
/// the run's own mount namespace) where the server found that works, else a copy of it (see
/// `workspace`), else (nothing shipped) an empty folder.
fn workspace(
    server: &Server,
    run: &div_api::Run,
    dir: &Path,
) -> Result<(PathBuf, Option<Overlay>), LaunchError> {
    let workspace = dir.join("workspace");
    let _ = fs::remove_dir_all(&workspace);
    let Some(code) = &run.code else {
        fs::create_dir_all(&workspace)?;
        return Ok((workspace, None));
    };
    let committed = server.home.volume_dir(&code.volume).join(&code.path);
    let overlay = server
        .overlay
        .then(|| Overlay::for_run(dir, &committed))
        .flatten();
    match &overlay {
        Some(layers) => {
            layers.prepare()?;
            fs::create_dir_all(&workspace)?;
        }
        None => div_runtime::workspace::copy_tree(&committed, &workspace)?,
    }
    Ok((workspace, overlay))
}

/// The run's other places in its directory: its `/tmp`, its `/mnt` with a mount point for
/// each volume, the cache every run shares.
struct Places {
    tmp: PathBuf,
    mnt: PathBuf,
    /// Each volume's name and its host directory.
    volumes: Vec<(String, PathBuf)>,
    cache: PathBuf,
}

fn places(server: &Server, dir: &Path) -> Result<Places, LaunchError> {
    let tmp = dir.join("tmp");
    fs::create_dir_all(tmp.join("divergent"))?;
    let mnt = dir.join("mnt");
    fs::create_dir_all(&mnt)?;
    let volumes: Vec<(String, PathBuf)> = server
        .store
        .volumes()?
        .into_iter()
        .map(|v| {
            let path = server.home.volume_dir(&v.name);
            (v.name, path)
        })
        .collect();
    for (name, host) in &volumes {
        fs::create_dir_all(mnt.join(name))?;
        fs::create_dir_all(host)?;
        // Each volume's `code/` (where code snapshots go) is made before the run starts, so
        // the sandbox binds it read-only: a run that made it itself could write every
        // snapshot a commit put there later, and, through their files, every later tree that
        // links them (`escape::a_run_cannot_make_code_in_a_volume_and_wait_for_a_snapshot_to_land_in_it`).
        // `mkdir` never follows a link: one there is left, not bound, and refuses commits.
        match fs::create_dir(host.join("code")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The download cache every run shares (pip's and uv's): see docs/reliability.md.
    let cache = server.home.join("cache");
    for tool in ["pip", "uv"] {
        fs::create_dir_all(cache.join(tool))?;
    }
    Ok(Places {
        tmp,
        mnt,
        volumes,
        cache,
    })
}

/// The lines written at the top of the run's log: emulated GPUs, the image or the host
/// standing in for it, no sandbox. An image the run cannot use refuses its start.
fn first_lines(
    server: &Server,
    run: &div_api::Run,
    sku: &rules::SkuPrice,
    shared: bool,
    image: Option<&RunImage>,
) -> Result<Vec<String>, LaunchError> {
    let mut first_lines = Vec::new();
    let inventory = &server.inventory;
    if sku.gpu && inventory.emulated {
        let mut line = format!(
            "div: emulated {} ×{} (DIVERGENT_EMULATE_GPUS): this run has no GPU",
            sku.label, run.gpus
        );
        if shared {
            line.push_str(&format!(
                "; its {} cores and {} GiB are emulated too: it shares this machine's {} cores and {} GiB with every other run",
                run.cores, run.memory_gib, inventory.host_cores, inventory.host_memory_gib
            ));
        }
        first_lines.push(line);
    }
    match image {
        // No image: the default one, unnamed, which this machine's system stands in for (the
        // server's setting `DIVERGENT_DEFAULT_IMAGE=host`); the first line says so.
        None => first_lines.push(images::host_stands_in_line(&run.image)),
        Some(image) => {
            if !server.sandboxed {
                return Err(LaunchError::NeedsSandbox(image.reference.clone()));
            }
            if !image.rootfs.is_dir() {
                return Err(LaunchError::Pruned {
                    reference: image.reference.clone(),
                    digest: image.digest.clone(),
                });
            }
            first_lines.push(format!("div: image {} ({})", image.reference, image.digest));
        }
    }
    if !server.sandboxed {
        first_lines.push(
            "div: no sandbox (bubblewrap is missing or turned off): this run sees and can write this machine's files; /workspace and /tmp/divergent are directories under the state directory, and no volume is at /mnt".to_owned(),
        );
    }
    Ok(first_lines)
}

/// The run's environment, later entries win: a sane base, the image's `Env`, then
/// runtime.md's table in order; and where the secrets go in it (never into spec.json: the
/// executor hands them to the supervisor, see `RunSpec::secrets_at`). An image's entry no
/// process could be given is left out, and said in `first_lines`.
fn environment(
    server: &Server,
    run: &div_api::Run,
    image: Option<&RunImage>,
    gpus: &[u32],
    real_gpus: bool,
    first_lines: &mut Vec<String>,
) -> Result<(Vec<(String, String)>, usize), LaunchError> {
    let (in_tmp, in_cache) = if server.sandboxed {
        (PathBuf::from("/tmp"), PathBuf::from(sandbox::CACHE_MOUNT))
    } else {
        let dir = server.home.run_dir(&run.id);
        (dir.join("tmp"), server.home.join("cache"))
    };
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    for kv in image.map_or(&[][..], |i| &i.env) {
        // An image is as untrusted as a run: an entry no process could be given (a NUL, a
        // value over the kernel's limit, a name that is not one) is left out, and said.
        let (k, v) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
        let problem = if div_spec::is_env_key(k) {
            sandbox::env_value_problem("image's environment variable", k, v)
        } else {
            Some(format!(
                "the image's Env entry `{}` has no valid name",
                k.escape_debug()
            ))
        };
        match problem {
            None => env.push((k.to_owned(), v.to_owned())),
            Some(problem) => first_lines.push(format!("div: left out: {problem}")),
        }
    }
    env.extend([
        ("HOME".into(), in_tmp.display().to_string()),
        ("PIP_BREAK_SYSTEM_PACKAGES".into(), "1".into()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        (
            "PIP_CACHE_DIR".into(),
            in_cache.join("pip").display().to_string(),
        ),
        (
            "UV_CACHE_DIR".into(),
            in_cache.join("uv").display().to_string(),
        ),
    ]);
    let secrets_at = env.len();
    env.extend(run.env.iter().map(|e| (e.key.clone(), e.value.clone())));
    env.extend([
        ("DIVERGENT_RUN_ID".into(), run.id.clone()),
        ("DIVERGENT_RUN_NAME".into(), run.name.clone()),
        (
            "DIVERGENT_RESULT_PATH".into(),
            in_tmp.join("divergent/result.json").display().to_string(),
        ),
        (
            "DIVERGENT_TELEMETRY_PATH".into(),
            in_tmp
                .join("divergent/telemetry.jsonl")
                .display()
                .to_string(),
        ),
    ]);
    // An eval run's own rows, last: they win over an `--env` of the same name.
    if let Some(m) = &run.model {
        env.extend([
            ("DIVERGENT_MODEL".into(), m.name.clone()),
            (
                "DIVERGENT_MODEL_VERSION_ID".into(),
                format!("v{}", m.version),
            ),
            ("DIVERGENT_MODEL_PATH".into(), m.path.clone()),
            ("DIVERGENT_MODEL_DIGEST".into(), m.digest.clone()),
            ("DIVERGENT_EVALUATION".into(), m.evaluation.clone()),
        ]);
    }
    if real_gpus {
        // In the sandbox the run has its own GPUs alone, numbered from 0 (docs/gpus.md).
        env.extend(div_runtime::gpu::cuda_env(gpus, server.sandboxed));
    }
    Ok((env, secrets_at))
}

/// A sandboxed run's real GPUs (`gpus`) and this machine's driver as it starts, read from
/// the driver (`div_runtime::gpu`, docs/gpus.md; its own files in `dir/gpu`); `None` for any
/// other run (a Slurm node binds its own GPUs, `executor::slurm::node`).
fn gpu_plan(
    server: &Server,
    dir: &Path,
    image: Option<&RunImage>,
    gpus: Option<&[u32]>,
) -> Result<Option<div_runtime::gpu::GpuPlan>, div_runtime::gpu::GpuError> {
    let Some(gpus) = gpus.filter(|_| server.sandboxed && !server.executor.queues()) else {
        return Ok(None);
    };
    div_runtime::gpu::GpuPlan::resolve(
        &div_runtime::gpu::HostPaths::host(),
        gpus,
        image.map(|i| i.rootfs.as_path()),
        &dir.join("gpu"),
    )
    .map(Some)
}

/// What a sandboxed run's command line is built from, beside the run.
struct Sandboxed<'a> {
    /// The command as the run's system runs it (`image_command`).
    command: &'a str,
    workspace: &'a Path,
    places: &'a Places,
    image: Option<&'a RunImage>,
    /// Its real GPUs and the driver, as the sandbox gives them (none when emulated).
    gpu: Option<&'a div_runtime::gpu::GpuPlan>,
    shim_by_supervisor: bool,
}

/// The supervisor's command for the run: bubblewrap's (its command in the image, from the
/// image's working directory when it shipped nothing), or the direct one unsandboxed.
fn argv(server: &Server, run: &div_api::Run, dir: &Path, s: &Sandboxed<'_>) -> Vec<String> {
    if !server.sandboxed {
        return sandbox::direct_argv(&run.command, &dir.join("bin"), server.init.as_deref());
    }
    // A run that shipped nothing (`--no-upload`) runs "the image as it is" and starts in its
    // working directory (the image's `WorkingDir`; `/` for this machine's own system).
    let shipped = run.code.is_some();
    let start_dir = match s.image {
        Some(image) if !shipped => image.working_dir.clone().unwrap_or_else(|| "/".to_owned()),
        _ if shipped => "/workspace".to_owned(),
        _ => "/".to_owned(),
    };
    let command = s.command;
    sandbox::bwrap_argv(&SandboxInput {
        home: &server.home,
        workspace: s.workspace,
        tmp: &s.places.tmp,
        mnt: &s.places.mnt,
        volumes: &s.places.volumes,
        cache: &s.places.cache,
        gpu: s.gpu,
        command,
        chdir: &start_dir,
        image: s.image.map(RunImage::root).as_ref(),
        shim_by_supervisor: s.shim_by_supervisor,
        init: server.init.as_deref(),
    })
}

/// The run's disk: a filesystem of its own of `disk` bytes (a root server on this machine,
/// given by the scheduler; its image taken ready from the pool where one of that size is
/// there), else measured against the size it would have had (a soft limit); not bounded on
/// Slurm's nodes.
fn run_disk(
    server: &Server,
    settings: &Settings,
    disk: Option<u64>,
    dir: &Path,
) -> Option<div_runtime::scratch::Disk> {
    if !server.sandboxed || server.executor.queues() {
        return None;
    }
    let size = div_runtime::scratch::space(&server.home).map_or(u64::MAX, |(size, _)| size);
    let wanted = div_runtime::scratch::wanted(settings.run_disk_gib, size);
    Some(match disk {
        Some(bytes) if server.scratch => {
            let pool = server.home.join(DISK_POOL);
            let ready = div_runtime::scratch::take_from_pool(&pool, bytes, dir);
            refill_pool(pool, wanted);
            div_runtime::scratch::Disk {
                bytes,
                own_filesystem: true,
                ready,
            }
        }
        _ => div_runtime::scratch::Disk {
            bytes: wanted,
            own_filesystem: false,
            ready: false,
        },
    })
}

/// The command as an image runs it, `path` the run's `PATH` (the image's, under div's rows),
/// looked up in the image's tree: a `.py` entrypoint runs with `python -u …` where the image
/// has `python`; where it has only `python3`, with `python3 -u …`, said in `first_lines`; where
/// it has neither (or the command is the user's own), the command ends with a last line that
/// says so, rather than the shell's bare `not found`.
fn image_command(
    image: &RunImage,
    entrypoint: &str,
    command: &str,
    path: &str,
    first_lines: &mut Vec<String>,
) -> String {
    let python = entrypoint
        .split("::")
        .next()
        .is_some_and(|file| file.ends_with(".py"));
    if !python {
        return command.to_owned();
    }
    let has = |name| div_runtime::image_tree::has_program(&image.rootfs, path, name);
    if has("python") {
        return command.to_owned();
    }
    // What div made of a `.py` entrypoint (div_spec::Entrypoint::command), never a command
    // the user wrote, is what is given `python3` instead.
    let made_by_div = !entrypoint.contains(char::is_whitespace);
    if made_by_div
        && let Some(rest) = command.strip_prefix("python -u ")
        && has("python3")
    {
        first_lines.push(format!(
            "div: the image {} has no `python` on its PATH, only `python3`: the entrypoint {} runs as `python3 -u {}`",
            image.reference.escape_debug(),
            entrypoint.escape_debug(),
            rest.replace('\n', " ")
        ));
        return format!("python3 -u {rest}");
    }
    let hint = if has("python3") {
        "it has `python3`: write that in the command"
    } else {
        "name an image with Python (e.g. --image python:3.12-slim)"
    };
    format!(
        "if ! command -v python >/dev/null 2>&1; then echo 'div: the image {} has no `python` on its PATH, and the entrypoint {} is Python: {hint}' >&2; exit 127; fi\n{command}",
        image.reference.replace('\'', ""),
        entrypoint.replace('\'', "")
    )
}
