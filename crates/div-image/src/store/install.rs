//! A pulled image installed: unpacked into a private folder under `tmp/`, its record
//! written beside its tree, its new layers moved into the layer store, then the folder
//! renamed into `images/` whole. Whatever goes wrong, the folder goes: nothing half
//! unpacked is left in the cache.

use std::fs;
use std::path::{Path, PathBuf};

use crate::disk;
use crate::layers;
use crate::manifest::{Descriptor, ImageConfig};
use crate::progress::{Progress, ProgressSink};
use crate::reference::{Digest, ImageRef};
use crate::store::apply::Layer;
use crate::store::error::{EnsureError, io_at};
use crate::store::records::Record;
use crate::store::{Image, ImageSource, ImageStore, blocking, unique, unix_now};

/// An image whose blobs are all in `blobs/`, ready to unpack.
pub(super) struct Pulled {
    pub(super) digest: Digest,
    pub(super) config_digest: Digest,
    pub(super) config: ImageConfig,
    pub(super) descriptors: Vec<Descriptor>,
    pub(super) layers: Vec<Layer>,
    /// Bytes its pull downloaded.
    pub(super) downloaded: u64,
}

impl ImageStore {
    /// Unpacks a pulled image into a private directory, then moves it into place whole (its
    /// new layers into the layer store first). Whatever goes wrong, the directory goes:
    /// nothing half unpacked is left in the cache.
    pub(super) async fn install(
        &self,
        reference: &ImageRef,
        pulled: Pulled,
        progress: &dyn ProgressSink,
    ) -> Result<Image, EnsureError> {
        let Pulled {
            digest,
            config_digest,
            config,
            descriptors,
            layers,
            downloaded,
        } = pulled;
        let work = self
            .tmp()
            .join(format!("unpack-{}-{}", digest.hex(), unique()));
        let diff_ids: Vec<Digest> = layers.iter().map(|l| l.diff_id.clone()).collect();
        let unpacked = match self
            .apply_layers(reference, &digest, &work, layers, progress)
            .await
        {
            Ok(unpacked) => unpacked,
            Err(e) => {
                let _ = blocking({
                    let work = work.clone();
                    move || disk::remove_tree(&work)
                })
                .await;
                return Err(e);
            }
        };
        let now = unix_now();
        let record = Record {
            manifest: digest.clone(),
            config_digest,
            references: vec![reference.to_string()],
            platform: config.platform.clone(),
            config: config.clone(),
            layers: descriptors,
            unpacked_bytes: unpacked.sizes.total,
            unpacked_at: now,
            last_used: now,
            added: unpacked.added,
            resolved: [(reference.to_string(), now)].into_iter().collect(),
            downloaded_bytes: Some(downloaded),
            diff_ids,
            own_bytes: Some(unpacked.sizes.own),
        };
        let dir = self.image_dir(&digest);
        if let Some(theirs) = self.move_into_place(&work, &dir, &record, unpacked.fresh)? {
            // Another pull of the same image won the race; use its tree.
            return self.use_record(&dir, theirs, reference, ImageSource::Checked);
        }
        if reference.digest().is_none() {
            self.untag_others(&digest, &reference.to_string())?;
        }
        let rootfs = dir.join("rootfs");
        progress.event(&Progress::Ready {
            manifest: digest.clone(),
            rootfs: rootfs.clone(),
        });
        Ok(Image {
            reference: reference.clone(),
            digest,
            rootfs,
            config,
            source: ImageSource::Pulled,
        })
    }

    /// Writes `record` into `work`, moves the layers it unpacked anew (`fresh`) into the
    /// layer store, and renames `work` to `dir`. Where another pull of the same image put
    /// its tree there first, `work` goes and that pull's record is returned.
    fn move_into_place(
        &self,
        work: &Path,
        dir: &Path,
        record: &Record,
        fresh: Vec<(Digest, PathBuf)>,
    ) -> Result<Option<Record>, EnsureError> {
        let json = serde_json::to_vec_pretty(record).expect("a record serialises");
        if let Err(e) = fs::write(work.join("image.json"), json) {
            let _ = disk::remove_tree(work);
            return Err(io_at(work)(e));
        }
        self.publish_layers(fresh);
        match fs::rename(work, dir) {
            Ok(()) => Ok(None),
            Err(e) => {
                let _ = disk::remove_tree(work);
                match self.read_record(dir) {
                    Some(theirs) => Ok(Some(theirs)),
                    None => Err(io_at(dir)(e)),
                }
            }
        }
    }

    /// Moves the layers an image unpacked anew into the layer store, where the next image
    /// of the same layer links them. One another pull put there meanwhile stays, and this
    /// copy goes (the image keeps its own files: correct, only not shared).
    fn publish_layers(&self, fresh: Vec<(Digest, PathBuf)>) {
        for (diff_id, store) in fresh {
            let dest = layers::layer_dir(&self.root, &diff_id);
            if let Err(e) = fs::rename(&store, &dest) {
                if layers::load(&dest).is_none() {
                    tracing::warn!(layer = %diff_id, error = %e, "a layer could not join the layer store; it is not shared");
                }
                let _ = disk::remove_tree(&store);
            }
        }
    }
}
