//! Admission: one pass over the queue, in order, giving each run that fits the cores, GPUs
//! and disk it gets (and, when asked, starting it through the launcher), and saying why each
//! of the rest waits. The scheduler runs it on every tick.

use std::collections::{BTreeSet, HashMap};

use div_api::{RunQueue, RunStatus};

use crate::rules;
use crate::runs::launcher;
use crate::server::Server;
use crate::store::{RunRecord, StoreError};
use div_runtime::clock;

/// Goes through the queue in order, giving each run that fits its cores and GPUs (and, with
/// `launch`, starting it); returns whether any run changed and why each of the rest waits.
pub(super) fn admit(
    server: &Server,
    running: &[RunRecord],
    queued: Vec<RunRecord>,
    launch: bool,
) -> Result<(bool, HashMap<String, RunQueue>), StoreError> {
    let mut changed = false;
    let disks = server.scratch && launch && !queued.is_empty();
    let mut pass = Pass::new(server, running, disks);
    // Why each run still queued after this pass waits, in order.
    let mut waiting: HashMap<String, RunQueue> = Default::default();
    let mut ahead: u32 = 0;
    let mut wait = |record: &RunRecord, reason: String, ahead: &mut u32| {
        waiting.insert(
            record.run.id.clone(),
            RunQueue {
                reason,
                ahead: *ahead,
                extra: Default::default(),
            },
        );
        *ahead += 1;
    };
    for mut record in queued {
        // Strictly in order: a run that does not fit holds the ones behind it.
        let (cores, gpus) = match pass.room(&record, ahead) {
            Ok(room) => room,
            Err(Waits(reason)) => {
                wait(&record, reason, &mut ahead);
                continue;
            }
        };
        if !launch {
            pass.hold(&record.run.sku, cores, gpus);
            continue;
        }
        changed = true;
        let disk = match pass.disk() {
            Ok(disk) => disk,
            Err(Waits(reason)) => {
                wait(&record, reason, &mut ahead);
                continue;
            }
        };
        match launcher::launch(server, &mut record, &cores, &gpus, disk) {
            Ok(()) => pass.hold(&record.run.sku, cores, gpus),
            Err(e) => {
                record.run.status = RunStatus::Failed;
                record.run.reason = Some(format!("the run could not start: {e}"));
                record.run.ended_at = Some(clock::now_rfc3339());
                server.store.update_run(&record)?;
            }
        }
    }
    Ok((changed, waiting))
}

/// Why a run waits, as the queue says it (`waiting for 2 cores, 1 run ahead`).
struct Waits(String);

/// What a pass of the queue has given out so far: the cores and GPUs held by the runs going
/// and those it started, and, where runs get disks of their own, what their disks take.
struct Pass<'s> {
    server: &'s Server,
    busy_cores: BTreeSet<usize>,
    busy_gpus: BTreeSet<(String, u32)>,
    disks: Disks,
}

/// The disk a pass can give runs (`scratch`): the filesystem's size and free space, what the
/// disks of the runs going are promised and have not filled yet, and what a run wants.
#[derive(Default)]
struct Disks {
    size: u64,
    free: u64,
    promised: u64,
    wanted: u64,
}

impl<'s> Pass<'s> {
    fn new(server: &'s Server, running: &[RunRecord], disks: bool) -> Pass<'s> {
        let mut busy_cores = BTreeSet::new();
        let mut busy_gpus = BTreeSet::new();
        for r in running {
            busy_cores.extend(r.internal.cores.iter().copied());
            busy_gpus.extend(r.internal.gpus.iter().map(|g| (r.run.sku.clone(), *g)));
        }
        // The disks of runs going that they have not filled yet are promised to them: a new
        // run's disk comes out of what is free past that and the reserve (`scratch`).
        let disks = if disks {
            let (size, free) = div_runtime::scratch::space(&server.home).unwrap_or((0, 0));
            let promised = running
                .iter()
                .filter_map(|r| {
                    let given = r.internal.disk_bytes?;
                    let dir = server.home.run_dir(&r.run.id);
                    Some(given.saturating_sub(div_runtime::scratch::allocated(&dir)))
                })
                .sum();
            let settings = crate::settings::Settings::read(&server.home).unwrap_or_default();
            Disks {
                size,
                free,
                promised,
                wanted: div_runtime::scratch::wanted(settings.run_disk_gib, size),
            }
        } else {
            Disks::default()
        };
        Pass {
            server,
            busy_cores,
            busy_gpus,
            disks,
        }
    }

    /// The cores and GPUs `record` gets now, or why it waits (`ahead` runs wait before it).
    fn room(&self, record: &RunRecord, ahead: u32) -> Result<(Vec<usize>, Vec<u32>), Waits> {
        let inventory = &self.server.inventory;
        let run = &record.run;
        let free_cores: Vec<usize> = (0..inventory.host_cores as usize)
            .filter(|c| !self.busy_cores.contains(c))
            .collect();
        // A run that shares the machine (emulated past it) holds no core of its own.
        let gpu_sku = rules::sku(&run.sku).is_some_and(|s| s.gpu);
        let need_cores = if inventory.shared(gpu_sku, run.cores, run.memory_gib) {
            0
        } else {
            run.cores as usize
        };
        let free_gpus: Vec<u32> = inventory
            .group(&run.sku)
            .map(|g| {
                g.indices
                    .iter()
                    .copied()
                    .filter(|i| !self.busy_gpus.contains(&(run.sku.clone(), *i)))
                    .collect()
            })
            .unwrap_or_default();
        let need_gpus = run.gpus as usize;
        if ahead > 0 || free_cores.len() < need_cores || free_gpus.len() < need_gpus {
            return Err(Waits(wait_reason(
                &run.sku,
                (free_cores.len() < need_cores).then_some(need_cores),
                (free_gpus.len() < need_gpus).then_some(need_gpus),
                ahead,
            )));
        }
        Ok((
            free_cores[..need_cores].to_vec(),
            free_gpus[..need_gpus].to_vec(),
        ))
    }

    /// Holds `cores` and `gpus` (of `sku`) for a run this pass started or counts as going.
    fn hold(&mut self, sku: &str, cores: Vec<usize>, gpus: Vec<u32>) {
        self.busy_cores.extend(cores);
        self.busy_gpus
            .extend(gpus.into_iter().map(|g| (sku.to_owned(), g)));
    }

    /// A run's own disk, where runs get one: what the filesystem can back past the disks
    /// promised to the runs going and the control plane's reserve (then promised to it);
    /// `None` where runs get none, or where the filesystem is too small for any even with no
    /// other run going (it runs without one, its places measured instead); else why it waits.
    fn disk(&mut self) -> Result<Option<u64>, Waits> {
        if !self.server.scratch {
            return Ok(None);
        }
        let d = &mut self.disks;
        match div_runtime::scratch::allowance(d.wanted, d.size, d.free, d.promised) {
            Some(bytes) => {
                d.promised = d.promised.saturating_add(bytes);
                Ok(Some(bytes))
            }
            None if d.promised == 0 => Ok(None),
            None => Err(Waits(format!(
                "waiting for disk: {} free past the control plane's reserve and the disks of the runs going",
                div_spec::format_bytes(
                    d.free
                        .saturating_sub(div_runtime::scratch::reserve(d.size))
                        .saturating_sub(d.promised)
                )
            ))),
        }
    }
}

/// Why a queued run waits: `waiting for 2 cores, 1 run ahead`, `waiting for 8 H100s and 8
/// cores`, `waiting its turn, 2 runs ahead` (it would fit, but runs start in order).
pub(super) fn wait_reason(
    sku: &str,
    cores: Option<usize>,
    gpus: Option<usize>,
    ahead: u32,
) -> String {
    let plural = |n: usize, one: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    let mut lacking = Vec::new();
    if let Some(n) = gpus {
        let label = rules::sku(sku).map_or(sku.to_owned(), |s| s.label.to_owned());
        lacking.push(plural(n, &label));
    }
    if let Some(n) = cores {
        lacking.push(plural(n, "core"));
    }
    let mut reason = if lacking.is_empty() {
        "waiting its turn".to_owned()
    } else {
        format!("waiting for {}", lacking.join(" and "))
    };
    if ahead > 0 {
        reason.push_str(&format!(", {}", plural(ahead as usize, "run")));
        reason.push_str(" ahead");
    }
    reason
}
