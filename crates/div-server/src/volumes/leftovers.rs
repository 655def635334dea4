//! What an earlier server left in the volumes' folders on its way in or out, removed when a
//! server starts (docs/reliability.md, "Nothing left behind").
//!
//! - **Folders on their way** (`volumes::unique_name`'s `PREFIX-PID-MS-N`): a staged tree
//!   (`stage-…`), a root put or a commit being written (`put-…`), a snapshot being removed
//!   (`removed-…`), in the volume's blob folder or beside its files under `.tmp-`. Each
//!   belonged to the server that made it, in its memory (a stage's id and what it still
//!   wants; a put's place), so no later server can finish one: all are removed, whatever
//!   their age. A client whose stage went with its server gets 404 for it and sends the tree
//!   the other way, which is what happens to it on any restart (docs/api.md).
//! - **Partial uploads** (`blobs/<volume>/partial/<hash>`): a client resumes one from the
//!   bytes the server holds, across a restart too, so only those not written to for
//!   [`PARTIAL_KEPT`] are removed; one written to since goes on from where it stopped.
//!
//! Listed before the server answers anything (so nothing of its own is among them) and
//! removed on a blocking thread meanwhile (a stage of a big tree takes a while to remove).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::home::Home;

/// How long a partial upload is kept, since it was last written to, by a server that starts.
pub(crate) const PARTIAL_KEPT: Duration = Duration::from_secs(60 * 60);

/// The prefixes of `paths::unique_name`'s folders on their way in or out.
const ON_THE_WAY: [&str; 3] = ["stage", "put", "removed"];

/// What a server that starts removes: each path, and whether it is a folder.
#[derive(Debug, Default)]
pub(crate) struct Leftovers(Vec<(PathBuf, bool)>);

impl Leftovers {
    /// What earlier servers left under `home`, as of `now`.
    pub(crate) fn list(home: &Home, now: SystemTime) -> Leftovers {
        let mut found = Vec::new();
        for blobs in subfolders(&home.join("blobs")) {
            for (path, name, dir) in entries(&blobs) {
                if dir && on_the_way(&name) {
                    found.push((path, true));
                }
            }
            for (path, _, dir) in entries(&blobs.join("partial")) {
                let idle = fs::symlink_metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|written| now.duration_since(written).ok());
                if !dir && idle.is_some_and(|idle| idle > PARTIAL_KEPT) {
                    found.push((path, false));
                }
            }
        }
        for root in subfolders(&home.join("volumes")) {
            for (path, name, dir) in entries(&root) {
                if dir && name.strip_prefix(".tmp-").is_some_and(on_the_way) {
                    found.push((path, true));
                }
            }
        }
        Leftovers(found)
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Removes each (a folder whole; a link in its place is removed, never followed).
    pub(crate) fn remove(self) {
        for (path, dir) in self.0 {
            let removed = if dir {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            if let Err(e) = removed
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), "could not remove what an earlier server left: {e}");
            }
        }
    }
}

/// Whether `name` is one of `paths::unique_name`'s on the way in or out:
/// `PREFIX-PID-MS-N`, each of the last three a number.
fn on_the_way(name: &str) -> bool {
    let mut parts = name.split('-');
    parts.next().is_some_and(|p| ON_THE_WAY.contains(&p)) && {
        let numbers: Vec<&str> = parts.collect();
        numbers.len() == 3
            && numbers
                .iter()
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
}

/// The folders directly in `dir` (not links to one).
fn subfolders(dir: &Path) -> Vec<PathBuf> {
    entries(dir)
        .into_iter()
        .filter_map(|(path, _, is_dir)| is_dir.then_some(path))
        .collect()
}

/// What `dir` holds: each entry's path, its name (entries not named in UTF-8 are none of
/// ours) and whether it is a folder (a link is not).
fn entries(dir: &Path) -> Vec<(PathBuf, String, bool)> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    read.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            Some((e.path(), name, is_dir))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::on_the_way;

    #[test]
    fn only_the_servers_own_names_are_on_the_way() {
        for ours in ["stage-12-1700000000000-0", "put-1-2-3", "removed-4-5-66"] {
            assert!(on_the_way(ours), "{ours}");
        }
        for theirs in [
            "stage",
            "stage-1-2",
            "stage-1-2-3-4",
            "stage-a-2-3",
            "stage-1--3",
            "partial",
            "put",
            "other-1-2-3",
            "0123456789abcdef",
        ] {
            assert!(!on_the_way(theirs), "{theirs}");
        }
    }
}
