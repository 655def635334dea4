//! Validation of a run as placed (`POST /v1/runs`): everything refused before it is queued,
//! each with a message that says what was wrong and what would be right.

use div_api::CreateRun;

use super::error::CreateRunError;
use crate::rules::{self, Sizing, SkuPrice};
use crate::server::Server;

/// A run that may be queued: its SKU, its size and price, and its checks in canonical form.
#[derive(Debug)]
pub(crate) struct Valid {
    pub(crate) sku: SkuPrice,
    pub(crate) sizing: Sizing,
    /// The GPUs it takes (0 for a CPU SKU, whatever it asked).
    pub(crate) gpus: u32,
    pub(crate) checks: Vec<String>,
    /// For an eval run, the model version its reference names now.
    pub(crate) model: Option<crate::store::VersionRow>,
}

/// Checks `request` against this machine and div's rules.
pub(crate) fn validate(server: &Server, request: &CreateRun) -> Result<Valid, CreateRunError> {
    names(request)?;
    let (sku, sizing, gpus) = machine(server, request)?;
    rest(server, request)?;
    let checks = request
        .checks
        .iter()
        .map(|c| rules::parse_check(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CreateRunError::Check(e.to_string()))?;
    server
        .executor
        .check(&crate::executor::Placement {
            sku: sku.name,
            gpus,
            cores: sizing.cores,
            memory_gib: sizing.memory_gib,
        })
        .map_err(|e| CreateRunError::Unplaceable(e.to_string()))?;
    // An eval run's model: its reference resolved to a version now, before anything is
    // placed, so a push during the run does not change what it evaluates.
    let model = request
        .model
        .as_deref()
        .map(|reference| crate::models::resolve(&server.volumes(), reference))
        .transpose()?;
    Ok(Valid {
        sku,
        sizing,
        gpus,
        checks,
        model,
    })
}

/// The run against this machine: its SKU offered here, its size within the machine (or
/// shared, as a CPU run on a GPU machine may be), its GPUs there.
fn machine(
    server: &Server,
    request: &CreateRun,
) -> Result<(SkuPrice, Sizing, u32), CreateRunError> {
    let accepted = server.inventory.accepted();
    let sku = rules::sku(&request.sku)
        .filter(|s| accepted.iter().any(|a| a == s.name))
        .ok_or_else(|| CreateRunError::UnknownSku {
            sku: request.sku.clone(),
            accepted: accepted.iter().map(|a| (*a).to_owned()).collect(),
        })?;
    let sku = server.inventory.priced(sku);
    let sizing = rules::size(&sku, request.gpus, request.cpu, request.memory_gib)
        .map_err(|e| CreateRunError::Size(e.to_string()))?;
    let gpus = if sku.gpu { request.gpus } else { 0 };
    if let Some(group) = server.inventory.group(sku.name) {
        let have = group.indices.len() as u32;
        if gpus > have {
            return Err(CreateRunError::TooManyGpus {
                have,
                label: sku.label.to_owned(),
                asked: gpus,
            });
        }
    }
    let host = server.inventory.host_cores;
    let shared = server
        .inventory
        .shared(sku.gpu, sizing.cores, sizing.memory_gib);
    if sizing.cores > host && !shared {
        return Err(CreateRunError::TooManyCores {
            host,
            asked: sizing.cores,
        });
    }
    let memory = server.inventory.host_memory_gib;
    if sizing.memory_gib > memory && !shared {
        return Err(CreateRunError::TooMuchMemory {
            host: memory,
            asked: sizing.memory_gib,
        });
    }
    Ok((sku, sizing, gpus))
}

/// The rest of the run: its image's name (and, with `--pull never`, the cache), its ceiling,
/// its environment with the secrets, its code.
fn rest(server: &Server, request: &CreateRun) -> Result<(), CreateRunError> {
    // An image named in a form no registry takes is refused now, not after the code is
    // shipped (whether a registry has it is known only by pulling, which comes next).
    if let Some(image) = &request.image {
        crate::images::reference(image)?;
    }
    // `--pull never` with the image not cached is known now, before anything is shipped.
    server
        .images
        .refuse_uncached(request.image.as_deref(), request.pull)?;
    if let Some(cents) = request.max_spend_cents
        && cents <= 0
    {
        return Err(CreateRunError::MaxSpend(cents));
    }
    if let Some(e) = request
        .env
        .iter()
        .find_map(|e| div_spec::check_env_name(&e.key).err())
    {
        return Err(CreateRunError::EnvName(e.to_string()));
    }
    if let Some(problem) = request.env.iter().find_map(|e| {
        div_runtime::sandbox::env_value_problem("environment variable", &e.key, &e.value)
    }) {
        return Err(CreateRunError::Env(problem));
    }
    if let Some(e) = request
        .env
        .iter()
        .rev()
        .find(|e| e.key == rules::STOP_GRACE_ENV)
    {
        rules::parse_stop_grace(&e.value).map_err(|e| CreateRunError::Env(e.to_string()))?;
    }
    // The run's own variables and every secret go into its environment together (an
    // `--env` of a secret's name replaces it).
    let secrets = server.store.secret_values()?;
    div_spec::check_env_total(
        "the run's --env variables and the secrets",
        secrets.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(
            request
                .env
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str())),
        ),
    )
    .map_err(|e| CreateRunError::Env(e.to_string()))?;
    code_is_there(server, request)
}

/// The run's code, where it names some, is in its volume: checked again when the run is
/// recorded, under the volume's commit lock (retention may have removed it since).
pub(crate) fn code_is_there(server: &Server, request: &CreateRun) -> Result<(), CreateRunError> {
    if let Some(code) = &request.code {
        let dir = server.home.volume_dir(&code.volume).join(&code.path);
        if server.store.volume(&code.volume)?.is_none() || !dir.is_dir() {
            return Err(CreateRunError::NoCode {
                volume: code.volume.clone(),
                path: code.path.clone(),
            });
        }
    }
    Ok(())
}

/// The names a run gives, each held to its rule (div-spec's), first: the names `div` would
/// send (its project is a slug of the folder's name, its `--name` checked, its code in
/// `<project>-code` at `code/<id>`). Anything else comes from another client and is refused
/// with the rule before anything is looked up by it (a code volume named `../..` is never
/// looked for on disk). Runs stored before this rule keep their names: they are read by id
/// or name as ever (docs/api.md, "Names").
fn names(request: &CreateRun) -> Result<(), CreateRunError> {
    if request.project.trim().is_empty() {
        return Err(CreateRunError::NoProject);
    }
    rules::check_project_name(&request.project).map_err(|e| CreateRunError::Name(e.to_string()))?;
    if let Some(name) = &request.name {
        rules::check_run_name(name).map_err(|e| CreateRunError::Name(e.to_string()))?;
    }
    if let Some(code) = &request.code {
        rules::check_volume_name(&code.volume).map_err(|e| CreateRunError::Name(e.to_string()))?;
        if !div_spec::is_volume_path(&code.path) {
            return Err(CreateRunError::CodePath(code.path.clone()));
        }
    }
    Ok(())
}
