//! `div storage ls`: the volumes, or what is under a place in one.

use div_api::{ControlPlane, Volume, VolumeEntry};

use super::place::{VolumePath, list};
use crate::error::RunError;

/// Where a [`storage_ls`] looked.
#[derive(Debug, Clone)]
pub enum Listing {
    /// Every volume.
    Volumes(Vec<Volume>),
    /// What is under a path in a volume.
    Entries {
        volume: String,
        path: String,
        entries: Vec<VolumeEntry>,
    },
}

/// List the volumes (`None`), or what is under a place in one: everything below it when
/// `recursive`, else only what is directly in it, each folder with the total size of the
/// files under it.
pub async fn storage_ls(
    cp: &dyn ControlPlane,
    at: Option<&VolumePath>,
    recursive: bool,
) -> Result<Listing, RunError> {
    let Some(at) = at else {
        let volumes = cp
            .list_volumes()
            .await
            .map_err(|e| RunError::api("list the volumes", e))?;
        return Ok(Listing::Volumes(volumes));
    };
    let entries = list(cp, at).await?;
    let entries = if recursive {
        entries
    } else {
        one_level(entries, &at.path)
    };
    Ok(Listing::Entries {
        volume: at.volume.clone(),
        path: at.path.clone(),
        entries,
    })
}

/// What is directly in `path` (`""`: the volume's root), from everything under it: deeper
/// entries folded into the folder they are in, whose `size` becomes the total of the files
/// under it. A `path` naming a file keeps that file. Sorted by path.
fn one_level(entries: Vec<VolumeEntry>, path: &str) -> Vec<VolumeEntry> {
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    };
    let mut level: std::collections::BTreeMap<String, VolumeEntry> = Default::default();
    for entry in entries {
        let Some(rel) = entry.path.strip_prefix(&prefix).filter(|r| !r.is_empty()) else {
            // The path itself (a file asked for by name), or outside it.
            if entry.path == path {
                level.insert(entry.path.clone(), entry);
            }
            continue;
        };
        match rel.split_once('/') {
            None => {
                let kept = level
                    .entry(entry.path.clone())
                    .or_insert_with(|| VolumeEntry {
                        size: 0,
                        ..entry.clone()
                    });
                if entry.kind != "dir" {
                    *kept = entry;
                }
            }
            Some((folder, _)) => {
                let folder_path = format!("{prefix}{folder}");
                let kept = level
                    .entry(folder_path.clone())
                    .or_insert_with(|| VolumeEntry {
                        path: folder_path,
                        kind: "dir".into(),
                        size: 0,
                        executable: false,
                        target: None,
                        extra: Default::default(),
                    });
                if entry.kind == "file" {
                    kept.size = kept.size.saturating_add(entry.size);
                }
            }
        }
    }
    level.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::one_level;
    use div_api::VolumeEntry;

    fn entry(path: &str, kind: &str, size: u64) -> VolumeEntry {
        VolumeEntry {
            path: path.into(),
            kind: kind.into(),
            size,
            executable: false,
            target: None,
            extra: Default::default(),
        }
    }

    fn shown(entries: &[VolumeEntry]) -> Vec<(String, String, u64)> {
        entries
            .iter()
            .map(|e| (e.path.clone(), e.kind.clone(), e.size))
            .collect()
    }

    fn tree() -> Vec<VolumeEntry> {
        vec![
            entry("code", "dir", 0),
            entry("code/9f31", "dir", 0),
            entry("code/9f31/train.py", "file", 120),
            entry("code/9f31/data/x.csv", "file", 1000),
            entry("code/a1b2/train.py", "file", 130),
            entry("models/base.bin", "file", 5000),
            entry("notes.txt", "file", 7),
            entry("latest", "symlink", 0),
        ]
    }

    #[test]
    fn the_root_shows_its_own_entries_with_folder_totals() {
        assert_eq!(
            shown(&one_level(tree(), "")),
            [
                ("code".into(), "dir".into(), 1250),
                ("latest".into(), "symlink".into(), 0),
                ("models".into(), "dir".into(), 5000),
                ("notes.txt".into(), "file".into(), 7),
            ]
        );
    }

    #[test]
    fn a_folder_shows_what_is_directly_in_it() {
        let under: Vec<VolumeEntry> = tree()
            .into_iter()
            .filter(|e| e.path.starts_with("code/"))
            .collect();
        assert_eq!(
            shown(&one_level(under, "code")),
            [
                ("code/9f31".into(), "dir".into(), 1120),
                ("code/a1b2".into(), "dir".into(), 130),
            ]
        );
    }

    #[test]
    fn a_file_asked_for_by_name_is_itself() {
        let file = vec![entry("notes.txt", "file", 7)];
        assert_eq!(
            shown(&one_level(file, "notes.txt")),
            [("notes.txt".into(), "file".into(), 7)]
        );
    }
}
