//! [`Home`]: the state directory and where each thing lives in it. The ground every service
//! stands on, with the store: a service that needs a run's or a volume's folder takes a
//! `&Home`, never the whole server.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// The volume models' versions are kept in.
pub(crate) const MODELS_VOLUME: &str = "div-models";

/// The control plane's state directory (`DIVERGENT_HOME`, 0700), read as paths.
#[derive(Debug, Clone)]
pub(crate) struct Home(PathBuf);

impl Home {
    pub(crate) fn new(root: PathBuf) -> Home {
        Home(root)
    }
    /// A run's directory: its spec, log, end and what its supervisor keeps.
    pub(crate) fn run_dir(&self, id: &str) -> PathBuf {
        self.0.join("runs").join(id)
    }
    /// Every run's directory is beneath this one.
    pub(crate) fn runs(&self) -> PathBuf {
        self.0.join("runs")
    }
    /// A volume's files, as runs see them at `/mnt/<name>`.
    pub(crate) fn volume_dir(&self, name: &str) -> PathBuf {
        self.0.join("volumes").join(name)
    }
    /// Makes a volume's folder (or finds it made). The models' volume gets its `code/` with
    /// it, however it is made (a push, or a command naming `/mnt/div-models`): runs see
    /// `code/` read-only only once it is there, so no run may be the one to make it, and
    /// write a tree a later push would take for a model's version.
    pub(crate) fn make_volume_dir(&self, name: &str) -> std::io::Result<()> {
        let dir = self.volume_dir(name);
        if name == MODELS_VOLUME {
            std::fs::create_dir_all(dir.join("code"))
        } else {
            std::fs::create_dir_all(dir)
        }
    }
    /// A volume's blobs, kept where no run sees them.
    pub(crate) fn blob_dir(&self, volume: &str) -> PathBuf {
        self.0.join("blobs").join(volume)
    }
    /// The blob `hash` of `volume`.
    pub(crate) fn blob_path(&self, volume: &str, hash: &str) -> PathBuf {
        self.blob_dir(volume).join(hash)
    }
    /// A partial upload of the blob `hash` of `volume`.
    pub(crate) fn partial_path(&self, volume: &str, hash: &str) -> PathBuf {
        self.blob_dir(volume).join("partial").join(hash)
    }
}

/// A home reads as its path (`home.join("settings.json")`).
impl Deref for Home {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Home {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}
