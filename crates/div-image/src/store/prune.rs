//! [`ImageStore::prune`]: images removed (all not kept, or those unused since an instant),
//! then what no remaining image needs: layer stores, blobs, unfinished work.

use std::collections::HashSet;
use std::fs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::disk;
use crate::layers;
use crate::reference::Digest;
use crate::store::error::{StoreError, store_io};
use crate::store::{ImageStore, blocking};

/// What [`ImageStore::prune`] removes.
#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    /// Images to keep whatever else is said (those in use by runs).
    pub keep: Vec<Digest>,
    /// Remove only images last used before this instant; `None` removes every image not
    /// kept.
    pub unused_since: Option<SystemTime>,
}

/// What [`ImageStore::prune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// The images removed.
    pub images: Vec<Digest>,
    /// How many blobs were removed (no remaining image needed them).
    pub blobs: u64,
    /// How many layers were removed from the layer store (no remaining image links them).
    pub layers: u64,
    /// Bytes freed, as measured before removal.
    pub bytes: u64,
}

/// What the images that remain need: their blobs and their layers.
#[derive(Default)]
struct Needed {
    blobs: HashSet<Digest>,
    layers: HashSet<Digest>,
}

impl ImageStore {
    /// Removes images (all not kept, or those unused since an instant), then every blob no
    /// remaining image needs, and unfinished work in `tmp`. Waits for pulls under way.
    pub async fn prune(&self, options: &PruneOptions) -> Result<PruneReport, StoreError> {
        let _lock = self
            .lock(true)
            .await
            .map_err(store_io(self.root.join("lock")))?;
        let this = self.clone();
        let options = options.clone();
        blocking(move || this.prune_locked(&options)).await
    }

    fn prune_locked(&self, options: &PruneOptions) -> Result<PruneReport, StoreError> {
        let mut report = PruneReport::default();
        let needed = self.prune_images(options, &mut report)?;
        self.prune_layers(&needed.layers, &mut report)?;
        self.prune_blobs(&needed.blobs, &mut report)?;
        let tmp = self.tmp();
        if let Ok(rd) = fs::read_dir(&tmp) {
            for e in rd.flatten() {
                report.bytes += disk::tree_size(&e.path());
                disk::remove_tree(&e.path()).map_err(store_io(e.path()))?;
            }
        }
        Ok(report)
    }

    /// Removes the images `options` do not keep; returns what the others need.
    fn prune_images(
        &self,
        options: &PruneOptions,
        report: &mut PruneReport,
    ) -> Result<Needed, StoreError> {
        let keep: HashSet<&Digest> = options.keep.iter().collect();
        let mut needed = Needed::default();
        for (dir, r) in self.records().map_err(store_io(self.root.join("images")))? {
            let old = options
                .unused_since
                .is_none_or(|t| UNIX_EPOCH + Duration::from_secs(r.last_used) < t);
            if keep.contains(&r.manifest) || !old {
                needed.blobs.extend(r.blobs().cloned());
                needed.layers.extend(r.diff_ids.iter().cloned());
                continue;
            }
            // Its own blocks: the files it shares with the layer store go with the store's
            // last link, below, if no remaining image needs the layer.
            report.bytes += r.own_bytes.unwrap_or(r.unpacked_bytes);
            disk::remove_tree(&dir).map_err(store_io(&dir))?;
            report.images.push(r.manifest.clone());
        }
        Ok(needed)
    }

    /// Removes every layer store whose diff_id is not `needed`.
    fn prune_layers(
        &self,
        needed: &HashSet<Digest>,
        report: &mut PruneReport,
    ) -> Result<(), StoreError> {
        let stored = self
            .stored_layers()
            .map_err(store_io(self.root.join("layers")))?;
        for (diff_id, dir) in stored {
            if diff_id.is_some_and(|d| needed.contains(&d)) {
                continue;
            }
            report.bytes += layers::disk_bytes(&dir);
            disk::remove_tree(&dir).map_err(store_io(&dir))?;
            report.layers += 1;
        }
        Ok(())
    }

    /// Removes every blob whose digest is not `needed`.
    fn prune_blobs(
        &self,
        needed: &HashSet<Digest>,
        report: &mut PruneReport,
    ) -> Result<(), StoreError> {
        for algo in ["sha256", "sha512"] {
            let dir = self.root.join("blobs").join(algo);
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd {
                let e = e.map_err(store_io(&dir))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let needed_here = format!("{algo}:{name}")
                    .parse::<Digest>()
                    .is_ok_and(|d| needed.contains(&d));
                if !needed_here {
                    report.bytes += e.metadata().map_or(0, |m| m.len());
                    fs::remove_file(e.path()).map_err(store_io(e.path()))?;
                    report.blobs += 1;
                }
            }
        }
        Ok(())
    }
}
