//! The adapter to div-spec, div-pricing and div-ship: the few rules div-server borrows from
//! them (SKUs and sizing, charging, checks, volume names, tree paths), in the shapes the server
//! needs (API models in, API models out).

use std::path::{Path, PathBuf};

use div_api::TreeEntry;
use div_pricing::{Catalogue, SizeRequest};
use div_spec::{Check, MemoryGib, Sku, VolumeName};

pub(crate) use div_spec::MAX_RUN_SECONDS;

/// One SKU's price and share, from the standard catalogue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkuPrice {
    pub(crate) sku: Sku,
    pub(crate) name: &'static str,
    pub(crate) label: &'static str,
    pub(crate) cents_per_hour: i64,
    pub(crate) cores_per_unit: u32,
    pub(crate) memory_gib_per_unit: u32,
    pub(crate) gpu: bool,
}

pub(crate) fn catalogue() -> Catalogue {
    Catalogue::standard()
}

/// Every SKU of the catalogue, in its order.
pub(crate) fn skus() -> Vec<SkuPrice> {
    catalogue()
        .skus
        .iter()
        .map(|p| SkuPrice {
            sku: p.sku,
            name: p.sku.name(),
            label: p.sku.label(),
            cents_per_hour: p.cents_per_hour,
            cores_per_unit: p.cores_per_unit,
            memory_gib_per_unit: p.memory_gib_per_unit,
            gpu: p.sku.is_gpu(),
        })
        .collect()
}

/// The SKU named `name` (case-insensitive).
pub(crate) fn sku(name: &str) -> Option<SkuPrice> {
    let sku: Sku = name.parse().ok()?;
    skus().into_iter().find(|s| s.sku == sku)
}

/// A container's size and price.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizing {
    pub(crate) cores: u32,
    pub(crate) memory_gib: u32,
    pub(crate) cents_per_hour: i64,
}

/// Sizes a container (div-pricing's rules), or says why it cannot be had.
pub(crate) fn size(
    sku: &SkuPrice,
    gpus: u32,
    cpu: Option<u32>,
    memory: Option<u32>,
) -> Result<Sizing, div_pricing::SizingError> {
    // The price is the one given (the catalogue's, or the control plane's own, e.g. Slurm's
    // `[prices]`).
    let mut priced = catalogue();
    if let Some(p) = priced.skus.iter_mut().find(|p| p.sku == sku.sku) {
        p.cents_per_hour = sku.cents_per_hour;
    }
    let sizing = priced.size(&SizeRequest {
        sku: sku.sku,
        gpus,
        cpu,
        memory: memory.map(MemoryGib::new),
    })?;
    Ok(Sizing {
        cores: sizing.cores,
        memory_gib: sizing.memory_gib,
        cents_per_hour: sizing.rate.cents_per_hour(),
    })
}

pub(crate) use div_runtime::rules::{charge, run_tasks};

pub(crate) use div_spec::{DEFAULT_STOP_GRACE_SECONDS, MAX_STOP_GRACE_SECONDS, STOP_GRACE_ENV};

/// A run's `DIVERGENT_STOP_GRACE`, or why it is not one (div-spec's, which the client checks
/// too).
pub(crate) fn parse_stop_grace(value: &str) -> Result<u64, div_spec::EnvError> {
    div_spec::parse_stop_grace(value)
}

/// A check in its canonical form, or why it is not one.
pub(crate) fn parse_check(typed: &str) -> Result<String, div_spec::CheckError> {
    typed.parse::<Check>().map(|c| c.to_string())
}

/// A volume's name, or div-spec's rule for one (what was wrong and what would be right).
pub(crate) fn check_volume_name(name: &str) -> Result<(), div_spec::VolumeNameError> {
    name.parse::<VolumeName>().map(drop)
}

/// A project's name as a client gives it (div-spec's rule: a slug exactly, as `div` sends),
/// or the rule, with the slug that would be one.
pub(crate) fn check_project_name(name: &str) -> Result<(), div_spec::ProjectNameError> {
    div_spec::check_project_name(name)
}

/// A run's name (div-spec's rule, which `div --name` checks too), or the rule.
pub(crate) fn check_run_name(name: &str) -> Result<(), div_spec::RunNameError> {
    div_spec::check_run_name(name)
}

/// Every `/mnt/<name>` literally in `command` or in the value of one of `env`
/// (`CKPT_DIR=/mnt/ckpt-vol/ckpt`), each once.
pub(crate) fn volumes_named(command: &str, env: &[div_api::EnvVar]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for text in std::iter::once(command).chain(env.iter().map(|e| e.value.as_str())) {
        for name in div_spec::volumes_named(text) {
            if !found.iter().any(|f| f == name.as_str()) {
                found.push(name.as_str().to_owned());
            }
        }
    }
    found
}

/// Refuses a tree whose paths would write outside it (div-ship's rules).
pub(crate) fn validate_entries(entries: &[TreeEntry]) -> Result<(), div_ship::MaterialiseError> {
    div_ship::validate_entries(entries)
}

/// Writes a committed code tree's `entries` into `dir`, which exists, each file a hard link
/// to its blob or, executable, to the blob's executable twin (div-ship's `link_into`):
/// nothing ever writes to either.
pub(crate) fn link_into(
    entries: &[TreeEntry],
    blob_path: impl Fn(&str) -> PathBuf + Sync,
    twin_path: impl Fn(&str) -> PathBuf + Sync,
    dir: &Path,
) -> Result<(), div_ship::MaterialiseError> {
    div_ship::link_into(entries, blob_path, twin_path, dir)
}

/// Writes the tree into `dest`, all or nothing (div-ship's `materialise`).
pub(crate) fn materialise(
    entries: &[TreeEntry],
    blob_path: impl Fn(&str) -> PathBuf + Sync,
    dest: &Path,
) -> Result<(), div_ship::MaterialiseError> {
    div_ship::materialise(entries, blob_path, dest)
}
