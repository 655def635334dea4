//! The server's staged trees (`volumes::stage`), in memory: at most [`MAX_STAGES`], by
//! volume and id, each with what its packs have written so far.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use div_api::TreeEntry;

/// A blob of a pack, as `div_api::parse_pack` reads it: its hash and its bytes.
pub(crate) type PackBlobRef<'b> = (&'b str, &'b [u8]);

/// The most stages kept at once, across volumes.
pub(crate) const MAX_STAGES: usize = 16;

/// The server's stages, by volume and id.
#[derive(Default, Debug)]
pub(crate) struct Stages(Mutex<HashMap<(String, String), Arc<Stage>>>);

/// One staged tree.
#[derive(Debug)]
pub(crate) struct Stage {
    /// Where the tree goes in its volume, and its digest.
    pub(super) path: String,
    pub(super) digest: String,
    /// Its entries, sorted by path.
    pub(super) entries: Vec<TreeEntry>,
    /// Where it is written, in the volume's blob folder (no run sees it).
    pub(super) dir: PathBuf,
    pub(super) made_ms: u64,
    /// The folders of the tree made so far (paths in it), so that no pack makes one again.
    pub(super) made: Mutex<std::collections::HashSet<PathBuf>>,
    pub(super) state: Mutex<State>,
}

#[derive(Default, Debug)]
pub(super) struct State {
    /// For each blob the volume lacked when the stage was made, the plain (not executable)
    /// files of the tree that are it and are not written yet: indices into `entries`.
    pub(super) wanted: HashMap<String, Vec<usize>>,
    /// Each file written into the tree, by its index, and whether it is the first of its
    /// blob (its home, once committed).
    pub(super) written: Vec<(usize, bool)>,
    /// Packs writing into the tree now.
    pub(super) writing: usize,
    /// Committed or let go: no pack writes into it any more.
    pub(super) closed: bool,
}

impl Stages {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Stage>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stage `id` of `volume`, if the server holds it.
    pub(super) fn get(&self, volume: &str, id: &str) -> Option<Arc<Stage>> {
        self.lock()
            .get(&(volume.to_owned(), id.to_owned()))
            .map(Arc::clone)
    }
}

impl Stage {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
