//! The catalogue and container sizing.

use std::fmt;

use div_spec::{MemoryGib, Money, Sku, UnknownSku, format_duration};
use serde::{Deserialize, Serialize};

use crate::Rate;

/// One SKU's price and what comes with each unit of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuPrice {
    /// The SKU.
    pub sku: Sku,
    /// Price per unit (per GPU; per container for `cpu`), in cents an hour.
    pub cents_per_hour: i64,
    /// Cores that come with each unit.
    pub cores_per_unit: u32,
    /// GiB that come with each unit.
    pub memory_gib_per_unit: u32,
}

/// Prices and limits: what a client needs to size and price a run before anything is made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalogue {
    /// Every SKU offered.
    pub skus: Vec<SkuPrice>,
    /// Each core past what comes with the SKU, in cents an hour.
    pub extra_core_cents_per_hour: i64,
    /// Each GiB past what comes with the SKU, in cents an hour.
    pub extra_gib_cents_per_hour: i64,
    /// The most cores one container takes.
    pub max_cores: u32,
    /// The most memory one container takes, in GiB.
    pub max_memory_gib: u32,
    /// The longest a run is given, in seconds.
    pub max_run_seconds: u64,
}

/// What was asked: `--gpu`, `--gpus`, `--cpu`, `--memory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeRequest {
    /// `--gpu`.
    pub sku: Sku,
    /// `--gpus` (1 when not given).
    pub gpus: u32,
    /// `--cpu`, in cores.
    pub cpu: Option<u32>,
    /// `--memory`.
    pub memory: Option<MemoryGib>,
}

/// The container a run gets, and what it costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizing {
    /// The SKU.
    pub sku: Sku,
    /// GPUs; 0 for the `cpu` SKU.
    pub gpus: u32,
    /// Cores the container gets.
    pub cores: u32,
    /// GiB the container gets.
    pub memory_gib: u32,
    /// Cores that come with the SKU at this count.
    pub included_cores: u32,
    /// GiB that come with the SKU at this count.
    pub included_memory_gib: u32,
    /// What it costs an hour.
    pub rate: Rate,
}

/// The error returned by [`Catalogue::size`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizingError {
    /// The catalogue does not offer the SKU.
    #[error(transparent)]
    NotOffered(UnknownSku),
    /// `--gpus 0` on a GPU SKU.
    #[error(
        "`--gpus 0` asks for no GPUs; `--gpu {sku}` takes at least 1, and `--gpu cpu` runs without one"
    )]
    NoGpus { sku: &'static str },
    /// `--gpus` on the cpu SKU.
    #[error(
        "`--gpus {gpus}` counts GPUs, and the cpu SKU has none; ask for cores with `--cpu {gpus}`"
    )]
    GpusOnCpu { gpus: u32 },
    /// `--cpu 0`.
    #[error("`--cpu 0` asks for no cores; a container has at least 1")]
    NoCores,
    /// `--cpu` past the limit.
    #[error("`--cpu {asked}` is more than one container takes; the most is {max} cores")]
    TooManyCores { asked: u32, max: u32 },
    /// `--memory` past the limit.
    #[error("`--memory {asked}G` is more than one container takes; the most is {max} GiB")]
    TooMuchMemory { asked: u32, max: u32 },
    /// The SKU's own share past the limits.
    #[error(
        "`--gpus {gpus}` of {sku} comes with {cores} cores and {memory_gib} GiB; the most one container takes is {max_cores} cores and {max_memory_gib} GiB, so at most `--gpus {max_gpus}`"
    )]
    ShareTooLarge {
        gpus: u32,
        sku: &'static str,
        cores: u64,
        memory_gib: u64,
        max_cores: u32,
        max_memory_gib: u32,
        max_gpus: u64,
    },
}

impl Catalogue {
    /// div-run.md's catalogue: b300 $8.95, h200 $5.95, h100 $4.95 per GPU an hour, cpu $0.30;
    /// 1 core and 8 GiB per GPU, 1 core and 2 GiB with cpu; $0.17 per extra core and $0.03
    /// per extra GiB an hour; 64 cores and 336 GiB at most; 24 hours.
    pub fn standard() -> Catalogue {
        let gpu = |sku, cents_per_hour| SkuPrice {
            sku,
            cents_per_hour,
            cores_per_unit: 1,
            memory_gib_per_unit: 8,
        };
        Catalogue {
            skus: vec![
                gpu(Sku::B300, 895),
                gpu(Sku::H200, 595),
                gpu(Sku::H100, 495),
                SkuPrice {
                    sku: Sku::Cpu,
                    cents_per_hour: 30,
                    cores_per_unit: 1,
                    memory_gib_per_unit: 2,
                },
            ],
            extra_core_cents_per_hour: 17,
            extra_gib_cents_per_hour: 3,
            max_cores: 64,
            max_memory_gib: 336,
            max_run_seconds: div_spec::MAX_RUN_SECONDS,
        }
    }

    /// The price of `sku`, if offered.
    pub fn price(&self, sku: Sku) -> Option<&SkuPrice> {
        self.skus.iter().find(|p| p.sku == sku)
    }

    /// The container a request gets and its rate. Cores and memory asked below what comes
    /// with the SKU get what comes with it (at the same price); past the limits is refused.
    pub fn size(&self, request: &SizeRequest) -> Result<Sizing, SizingError> {
        let sku = request.sku;
        let Some(price) = self.price(sku) else {
            let names: Vec<&str> = self.skus.iter().map(|p| p.sku.name()).collect();
            return Err(SizingError::NotOffered(UnknownSku::with_accepted(
                sku.name(),
                &names,
            )));
        };
        let (gpus, units) = if sku.is_gpu() {
            if request.gpus == 0 {
                return Err(SizingError::NoGpus { sku: sku.name() });
            }
            (request.gpus, request.gpus)
        } else {
            if request.gpus > 1 {
                return Err(SizingError::GpusOnCpu { gpus: request.gpus });
            }
            (0, 1)
        };
        let share_cores = u64::from(units) * u64::from(price.cores_per_unit);
        let share_memory = u64::from(units) * u64::from(price.memory_gib_per_unit);
        if share_cores > u64::from(self.max_cores) || share_memory > u64::from(self.max_memory_gib)
        {
            let by_cores = u64::from(self.max_cores) / u64::from(price.cores_per_unit.max(1));
            let by_memory =
                u64::from(self.max_memory_gib) / u64::from(price.memory_gib_per_unit.max(1));
            return Err(SizingError::ShareTooLarge {
                gpus,
                sku: sku.name(),
                cores: share_cores,
                memory_gib: share_memory,
                max_cores: self.max_cores,
                max_memory_gib: self.max_memory_gib,
                max_gpus: by_cores.min(by_memory),
            });
        }
        // Both shares fit in u32: they are at most the u32 limits just checked.
        let included_cores = u32::try_from(share_cores).unwrap_or(u32::MAX);
        let included_memory_gib = u32::try_from(share_memory).unwrap_or(u32::MAX);
        if request.cpu == Some(0) {
            return Err(SizingError::NoCores);
        }
        if let Some(asked) = request.cpu
            && asked > self.max_cores
        {
            return Err(SizingError::TooManyCores {
                asked,
                max: self.max_cores,
            });
        }
        if let Some(asked) = request.memory
            && asked.gib() > self.max_memory_gib
        {
            return Err(SizingError::TooMuchMemory {
                asked: asked.gib(),
                max: self.max_memory_gib,
            });
        }
        let cores = request.cpu.unwrap_or(0).max(included_cores);
        let memory_gib = request
            .memory
            .map_or(0, MemoryGib::gib)
            .max(included_memory_gib);
        let cents = i64::from(units) * price.cents_per_hour
            + i64::from(cores - included_cores) * self.extra_core_cents_per_hour
            + i64::from(memory_gib - included_memory_gib) * self.extra_gib_cents_per_hour;
        Ok(Sizing {
            sku,
            gpus,
            cores,
            memory_gib,
            included_cores,
            included_memory_gib,
            rate: Rate::from_cents_per_hour(cents),
        })
    }
}

impl Sizing {
    /// The hardware as the header prints it: `H100`, `8× H100`, `CPU`, and the cores and
    /// memory each shown when they differ from what comes with the SKU:
    /// `H100 · 8 cores · 64 GiB`, `8× H100 · 16 cores`.
    pub fn label(&self) -> String {
        let mut label = if self.gpus > 1 {
            format!("{}× {}", self.gpus, self.sku.label())
        } else {
            self.sku.label().to_owned()
        };
        if self.cores != self.included_cores {
            let noun = if self.cores == 1 { "core" } else { "cores" };
            label.push_str(&format!(" · {} {noun}", self.cores));
        }
        if self.memory_gib != self.included_memory_gib {
            label.push_str(&format!(" · {} GiB", self.memory_gib));
        }
        label
    }
}

impl fmt::Display for Sizing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The line printed before a run's log:
/// `run-k4t9  H100  $4.95/h  $5.00 buys 1h 0m` or
/// `run-k4t9  H100 · 8 cores · 64 GiB  $7.82/h  no ceiling`.
///
/// A ceiling that buys more than the 24 hours a run is given says so:
/// `$500.00 buys 101h 0m; runs stop at 24h`.
pub fn header_line(run_name: &str, sizing: &Sizing, ceiling: Option<Money>) -> String {
    let tail = match ceiling {
        None => "no ceiling".to_owned(),
        Some(ceiling) => {
            let buys = sizing.rate.ceiling_buys(ceiling);
            if buys == u64::MAX {
                format!("{ceiling} buys as long as a run is given")
            } else if buys > div_spec::MAX_RUN_SECONDS {
                format!("{ceiling} buys {}; runs stop at 24h", format_duration(buys))
            } else {
                format!("{ceiling} buys {}", format_duration(buys))
            }
        }
    };
    format!("{run_name}  {}  {}  {tail}", sizing.label(), sizing.rate)
}
