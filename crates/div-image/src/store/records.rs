//! Each cached image's record (`images/ALGO/HEX/image.json`): read, listed, found for a
//! reference, updated when a pull returns it; and the layer stores listed.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use crate::manifest::{Descriptor, ImageConfig};
use crate::platform::Platform;
use crate::reference::{Digest, ImageRef};
use crate::store::error::{EnsureError, io_at};
use crate::store::{Image, ImageSource, ImageStore, unix_now, write_atomic};

/// What the cache knows of one image, as `image.json` holds it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Record {
    pub(super) manifest: Digest,
    pub(super) config_digest: Digest,
    pub(super) references: Vec<String>,
    pub(super) platform: Platform,
    pub(super) config: ImageConfig,
    pub(super) layers: Vec<Descriptor>,
    pub(super) unpacked_bytes: u64,
    pub(super) unpacked_at: u64,
    pub(super) last_used: u64,
    /// Empty mount points the store added (`proc`, `dev`, `sys`, `tmp`).
    pub(super) added: Vec<String>,
    /// Unix seconds at which each reference last resolved at the registry to this image.
    #[serde(default)]
    pub(super) resolved: BTreeMap<String, u64>,
    /// The bytes the pull that made it downloaded.
    #[serde(default)]
    pub(super) downloaded_bytes: Option<u64>,
    /// Its layers' diff_ids, in order: the layer stores it links (empty in a record older
    /// than the layer store, whose tree links none).
    #[serde(default)]
    pub(super) diff_ids: Vec<Digest>,
    /// What its tree alone takes on disk: its directories and links, and any file no layer
    /// store shares (`None` in a record older than the layer store: all of
    /// `unpacked_bytes`).
    #[serde(default)]
    pub(super) own_bytes: Option<u64>,
}

impl Record {
    /// The blobs it needs: its manifest, its config, its layers.
    pub(super) fn blobs(&self) -> impl Iterator<Item = &Digest> {
        [&self.manifest, &self.config_digest]
            .into_iter()
            .chain(self.layers.iter().map(|l| &l.digest))
    }

    /// Writes it as `dir/image.json`, through a temporary file in `tmp`.
    pub(super) fn write(&self, dir: &Path, tmp: &Path) -> Result<(), EnsureError> {
        let json = serde_json::to_vec_pretty(self).expect("a record serialises");
        write_atomic(&dir.join("image.json"), tmp, &json).map_err(io_at(dir))
    }
}

impl ImageStore {
    pub(super) fn read_record(&self, dir: &Path) -> Option<Record> {
        let text = fs::read(dir.join("image.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Every image's folder and record, by manifest digest.
    pub(super) fn records(&self) -> io::Result<Vec<(PathBuf, Record)>> {
        let mut out = Vec::new();
        for algo in ["sha256", "sha512"] {
            let dir = self.root.join("images").join(algo);
            let rd = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for e in rd {
                let p = e?.path();
                if let Some(r) = self.read_record(&p) {
                    out.push((p, r));
                }
            }
        }
        out.sort_by(|a, b| a.1.manifest.cmp(&b.1.manifest));
        Ok(out)
    }

    /// Every layer in the layer store: its diff_id (`None` for a folder that names none)
    /// and its folder.
    pub(super) fn stored_layers(&self) -> io::Result<Vec<(Option<Digest>, PathBuf)>> {
        let mut out = Vec::new();
        for algo in ["sha256", "sha512"] {
            let dir = self.root.join("layers").join(algo);
            let rd = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for e in rd {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                out.push((format!("{algo}:{name}").parse().ok(), e.path()));
            }
        }
        Ok(out)
    }

    /// Updates a record's references and last use; returns the image. `source` says how it
    /// was found: where the registry was asked (`Pulled`, `Checked`), the reference is
    /// recorded as resolved now, and a tag is taken from every other image that had it (a
    /// tag that moved names the new image only).
    pub(super) fn use_record(
        &self,
        dir: &Path,
        mut record: Record,
        reference: &ImageRef,
        source: ImageSource,
    ) -> Result<Image, EnsureError> {
        let name = reference.to_string();
        if !record.references.contains(&name) {
            record.references.push(name.clone());
        }
        record.last_used = unix_now();
        let source = match source {
            // A digest reference never moves: when it "resolved" says nothing.
            ImageSource::Cached { .. } => ImageSource::Cached {
                resolved_at: record
                    .resolved
                    .get(&name)
                    .filter(|_| reference.digest().is_none())
                    .map(|t| UNIX_EPOCH + Duration::from_secs(*t)),
            },
            asked => {
                record.resolved.insert(name.clone(), unix_now());
                if reference.digest().is_none() {
                    self.untag_others(&record.manifest, &name)?;
                }
                asked
            }
        };
        record.write(dir, &self.tmp())?;
        Ok(Image {
            reference: reference.clone(),
            digest: record.manifest,
            rootfs: dir.join("rootfs"),
            config: record.config,
            source,
        })
    }

    /// Takes the tag `name` from every image but `keep`: it resolved to `keep` at the
    /// registry, so it names that image alone from now on.
    pub(super) fn untag_others(&self, keep: &Digest, name: &str) -> Result<(), EnsureError> {
        let records = self.records().map_err(io_at(self.root.join("images")))?;
        for (dir, mut other) in records {
            if &other.manifest == keep || !other.references.iter().any(|r| r == name) {
                continue;
            }
            other.references.retain(|r| r != name);
            other.resolved.remove(name);
            other.write(&dir, &self.tmp())?;
        }
        Ok(())
    }

    /// The cached image for `reference` on `platform`, if any.
    pub(super) fn cached(
        &self,
        reference: &ImageRef,
        platform: &Platform,
    ) -> Result<Option<(PathBuf, Record)>, EnsureError> {
        if let Some(d) = reference.digest() {
            let dir = self.image_dir(d);
            // A manifest's digest: its platform is checked where it is used. An index's
            // digest is found below, among the references pulled.
            if let Some(r) = self.read_record(&dir) {
                return Ok(Some((dir, r)));
            }
        }
        let name = reference.to_string();
        let records = self.records().map_err(io_at(self.root.join("images")))?;
        Ok(records
            .into_iter()
            .filter(|(_, r)| r.references.contains(&name) && platform.matches(&r.platform))
            .max_by_key(|(_, r)| r.last_used))
    }

    /// Whether the cache has an image for `reference` on `platform`, as `PullPolicy::Never`
    /// would find it (reads the records; no network, no lock).
    pub fn has(&self, reference: &ImageRef, platform: &Platform) -> bool {
        self.cached(reference, platform).is_ok_and(|c| c.is_some())
    }
}
