//! What this machine offers: its cores, and its GPUs (found with `nvidia-smi`, or declared
//! with `DIVERGENT_EMULATE_GPUS`).

use div_api::{Catalogue, SkuOffer};

use crate::GpuSource;
use crate::rules::{self, SkuPrice};

/// The error returned when the GPU inventory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error(
        "`{0}` is not a GPU inventory; write it like `h100:8` or `h100:8,h200:2` (b300, h200, h100)"
    )]
    Emulate(String),
}

/// The GPUs of one SKU.
#[derive(Debug, Clone)]
pub(crate) struct GpuGroup {
    pub(crate) sku: SkuPrice,
    /// `CUDA_VISIBLE_DEVICES` indices (for emulated GPUs, 0..count).
    pub(crate) indices: Vec<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct Inventory {
    pub(crate) host_cores: u32,
    pub(crate) gpus: Vec<GpuGroup>,
    pub(crate) emulated: bool,
    /// Prices that replace the catalogue's, by SKU name, in cents an hour (Slurm's
    /// `[prices]`); empty locally.
    pub(crate) prices: std::collections::BTreeMap<String, i64>,
}

/// Parses `h100:8,h200:2`.
pub(crate) fn parse_emulated(text: &str) -> Result<Vec<GpuGroup>, InventoryError> {
    let bad = || InventoryError::Emulate(text.to_owned());
    let mut groups: Vec<GpuGroup> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, count) = part.split_once(':').ok_or_else(bad)?;
        let sku = rules::sku(name.trim()).filter(|s| s.gpu).ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        if count == 0 || count > 1024 || groups.iter().any(|g| g.sku.name == sku.name) {
            return Err(bad());
        }
        groups.push(GpuGroup {
            sku,
            indices: (0..count).collect(),
        });
    }
    if groups.is_empty() {
        return Err(bad());
    }
    Ok(groups)
}

/// Maps `nvidia-smi`'s names (`NVIDIA H100 80GB HBM3`) to SKUs, by index.
pub(crate) fn parse_nvidia_smi(text: &str) -> Vec<GpuGroup> {
    let mut groups: Vec<GpuGroup> = Vec::new();
    for (index, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let upper = line.to_ascii_uppercase();
        let Some(sku) = ["B300", "H200", "H100"]
            .iter()
            .find(|k| upper.contains(*k))
            .and_then(|k| rules::sku(k))
        else {
            continue;
        };
        match groups.iter_mut().find(|g| g.sku.name == sku.name) {
            Some(g) => g.indices.push(index as u32),
            None => groups.push(GpuGroup {
                sku,
                indices: vec![index as u32],
            }),
        }
    }
    groups
}

impl Inventory {
    pub(crate) fn load(source: &GpuSource) -> Result<Inventory, InventoryError> {
        let host_cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let (gpus, emulated) = match source {
            GpuSource::Emulate(text) => (parse_emulated(text)?, true),
            GpuSource::Detect => {
                let out = std::process::Command::new("nvidia-smi")
                    .args(["--query-gpu=name", "--format=csv,noheader"])
                    .stdin(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .output();
                match out {
                    Ok(out) if out.status.success() => (
                        parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)),
                        false,
                    ),
                    _ => (Vec::new(), false),
                }
            }
        };
        Ok(Inventory {
            host_cores,
            gpus,
            emulated,
            prices: Default::default(),
        })
    }

    /// The SKUs this machine takes, GPUs first then `cpu`.
    pub(crate) fn accepted(&self) -> Vec<String> {
        rules::skus()
            .into_iter()
            .filter(|s| !s.gpu || self.group(s.name).is_some())
            .map(|s| s.name.to_owned())
            .collect()
    }

    /// `sku` at this control plane's price.
    pub(crate) fn priced(&self, mut sku: SkuPrice) -> SkuPrice {
        if let Some(cents) = self.prices.get(sku.name) {
            sku.cents_per_hour = *cents;
        }
        sku
    }

    pub(crate) fn group(&self, sku: &str) -> Option<&GpuGroup> {
        self.gpus.iter().find(|g| g.sku.name == sku)
    }

    pub(crate) fn catalogue(&self) -> Catalogue {
        let standard = rules::catalogue();
        let skus = rules::skus()
            .into_iter()
            .filter(|s| !s.gpu || self.group(s.name).is_some())
            .map(|s| self.priced(s))
            .map(|s| SkuOffer {
                name: s.name.to_owned(),
                cents_per_hour: s.cents_per_hour,
                cores_per_unit: s.cores_per_unit,
                memory_gib_per_unit: s.memory_gib_per_unit,
                capacity: Some(if s.gpu {
                    self.group(s.name).map_or(0, |g| g.indices.len() as u32)
                } else {
                    self.host_cores
                }),
                emulated: s.gpu && self.emulated,
                extra: Default::default(),
            })
            .collect();
        Catalogue {
            skus,
            extra_core_cents_per_hour: standard.extra_core_cents_per_hour,
            extra_gib_cents_per_hour: standard.extra_gib_cents_per_hour,
            max_cores: standard.max_cores.min(self.host_cores),
            max_memory_gib: standard.max_memory_gib,
            max_run_seconds: standard.max_run_seconds,
            extra: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expect: &str) {
        let got = match parse_emulated(text) {
            Ok(groups) => groups
                .iter()
                .map(|g| format!("{}x{}", g.sku.name, g.indices.len()))
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => e.to_string(),
        };
        assert_eq!(got, expect, "{text}");
    }

    #[test]
    fn emulated_inventory() {
        check("h100:8", "h100x8");
        check("h100:8,h200:2", "h100x8 h200x2");
        check(" H100:1 , b300:4 ", "h100x1 b300x4");
        check(
            "cpu:2",
            "`cpu:2` is not a GPU inventory; write it like `h100:8` or `h100:8,h200:2` (b300, h200, h100)",
        );
        check(
            "h100",
            "`h100` is not a GPU inventory; write it like `h100:8` or `h100:8,h200:2` (b300, h200, h100)",
        );
        check(
            "h100:0",
            "`h100:0` is not a GPU inventory; write it like `h100:8` or `h100:8,h200:2` (b300, h200, h100)",
        );
        check(
            "h100:1,h100:2",
            "`h100:1,h100:2` is not a GPU inventory; write it like `h100:8` or `h100:8,h200:2` (b300, h200, h100)",
        );
        check(
            "",
            "`` is not a GPU inventory; write it like `h100:8` or `h100:8,h200:2` (b300, h200, h100)",
        );
    }

    #[test]
    fn nvidia_smi_names() {
        let groups = parse_nvidia_smi(
            "NVIDIA H100 80GB HBM3\nNVIDIA H200\nNVIDIA H100 80GB HBM3\nTesla T4\n",
        );
        let got: Vec<String> = groups
            .iter()
            .map(|g| format!("{}{:?}", g.sku.name, g.indices))
            .collect();
        assert_eq!(got, ["h100[0, 2]", "h200[1]"]);
    }
}
