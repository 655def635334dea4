//! `div storage`: put a local file or folder into a volume, get files back, list, remove.
//!
//! A put is the code upload's machinery — hashes, "which blobs do you lack", resumable blob
//! uploads, one commit — applied to any folder: only what the volume lacks is sent, and a put
//! that was interrupted sends only the rest when run again. Its tree is committed at the
//! volume's root (`""`), which writes each file as `cp` would: new paths are added, a file the
//! volume holds is replaced (the same content is left as it is), and a folder is never
//! replaced by a file, nor a link or a file written through.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use div_api::{ControlPlane, ErrorKind, Volume, VolumeEntry};
use div_ship::{EntryKind, HashStats, Manifest, Shipment, Source, TreeEntry};
use div_spec::VolumeName;
use tokio::io::AsyncWriteExt;

use crate::error::RunError;
use crate::event::EventSink;

/// `NAME[/PATH]`: a volume and a place in it (`""` for its root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumePath {
    pub volume: String,
    pub path: String,
}

impl std::str::FromStr for VolumePath {
    type Err = RunError;
    /// `data`, `data/`, `data/train/part-0.csv`; refuses a bad volume name and paths with
    /// empty, `.` or `..` parts.
    fn from_str(typed: &str) -> Result<VolumePath, RunError> {
        let (volume, path) = typed.split_once('/').unwrap_or((typed, ""));
        volume
            .parse::<VolumeName>()
            .map_err(|e| RunError::VolumePath {
                typed: typed.to_string(),
                message: e.to_string(),
            })?;
        Ok(VolumePath {
            volume: volume.to_string(),
            path: inner_path(typed, path)?,
        })
    }
}

/// A relative path inside a volume, `/`-separated, trailing `/` dropped.
fn inner_path(typed: &str, path: &str) -> Result<String, RunError> {
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Ok(String::new());
    }
    if !div_spec::is_volume_path(path) {
        return Err(RunError::VolumePath {
            typed: typed.to_string(),
            message: "a path inside a volume has no empty, `.` or `..` parts".into(),
        });
    }
    Ok(path.to_string())
}

/// What `storage_put` was asked.
#[derive(Debug, Clone)]
pub struct PutOptions {
    /// The volume; made when it does not exist.
    pub volume: String,
    /// The local file or folder.
    pub local: PathBuf,
    /// Where in the volume it goes (`--to`); `None` for the root. A folder's contents go
    /// there; a file goes there under its own name.
    pub to: Option<String>,
}

/// What a put did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutSummary {
    pub volume: String,
    /// Where it went (`""` for the root).
    pub to: String,
    pub files: u64,
    pub bytes: u64,
    /// Whether the volume was made by this put.
    pub created_volume: bool,
    /// Files left out (links), for people.
    pub warnings: Vec<String>,
}

/// Put a local file or folder into a volume, making the volume when needed. Sends only what
/// the volume lacks, resuming partial uploads; emits the upload's events (for a progress bar).
/// An empty folder makes an empty volume (or leaves the one there as it is).
pub async fn storage_put(
    cp: &dyn ControlPlane,
    options: &PutOptions,
    sink: &mut dyn EventSink,
) -> Result<PutSummary, RunError> {
    // The volume's name first: a bad one is named as such, not blamed on `--to`.
    options
        .volume
        .parse::<VolumeName>()
        .map_err(|e| RunError::Volume {
            name: options.volume.clone(),
            message: e.to_string(),
        })?;
    let target: VolumePath = format!("{}/{}", options.volume, options.to.as_deref().unwrap_or(""))
        .parse()
        .map_err(|_| RunError::VolumePath {
            typed: options.to.clone().unwrap_or_default(),
            message:
                "`--to` is a relative path inside the volume, with no empty, `.` or `..` parts"
                    .into(),
        })?;
    let (shipment, warnings) = local_tree(&options.local)?;
    let existed = cp
        .list_volumes()
        .await
        .map_err(|e| RunError::api("list the volumes", e))?
        .iter()
        .any(|v| v.name == options.volume);
    if shipment.manifest.entries.is_empty() {
        // Nothing to send: an empty volume, made if it is not there (a folder in a volume
        // exists only by its files, so `--to` adds nothing).
        if !existed {
            cp.create_volume(&options.volume)
                .await
                .map_err(|e| RunError::api(crate::upload::STORAGE_PUT.make, e))?;
        }
        return Ok(PutSummary {
            volume: options.volume.clone(),
            to: target.path,
            files: 0,
            bytes: 0,
            created_volume: !existed,
            warnings,
        });
    }
    let put = crate::upload::upload(
        cp,
        &shipment,
        &options.volume,
        ("", &target.path),
        &crate::upload::STORAGE_PUT,
        sink,
    )
    .await;
    match put {
        Err(RunError::Api { source, .. }) if source.kind() == ErrorKind::Conflict => {
            let path = source
                .details()
                .get("path")
                .and_then(|p| p.as_str())
                .unwrap_or(&target.path)
                .to_string();
            return Err(RunError::PutConflict {
                volume: options.volume.clone(),
                message: if source
                    .message()
                    .contains(&format!("`{}`", div_ship::display_path(&path)))
                {
                    source.message().to_owned()
                } else {
                    format!(
                        "`{}` in volume `{}` is in the way of the put: {}",
                        div_ship::display_path(&path),
                        options.volume,
                        source.message()
                    )
                },
                path,
            });
        }
        other => other?,
    }
    Ok(PutSummary {
        volume: options.volume.clone(),
        to: target.path,
        files: shipment.files(),
        bytes: shipment.bytes(),
        created_volume: !existed,
        warnings,
    })
}

/// Every file under `local` (or `local` itself, named by its file name), hashed. Only `.git`
/// folders are left out; links are left out with a warning (a volume holds data, and a link's
/// target on this machine means nothing there), and so are FIFOs, sockets and devices, which
/// hold no data to send (reading a FIFO would wait forever).
///
/// `local` itself is followed when it is a link (the user named it), and must then be a
/// regular file or a folder: anything else is refused at once, before the control plane is
/// asked anything.
fn local_tree(local: &Path) -> Result<(Shipment, Vec<String>), RunError> {
    let read = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RunError::Read { path, source }
    };
    let meta = std::fs::metadata(local).map_err(read(local))?;
    if !meta.is_dir() && !meta.is_file() {
        return Err(RunError::NotAFileOrFolder {
            path: local.to_path_buf(),
            kind: special_kind(&meta.file_type()),
        });
    }
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    let mut warnings = Vec::new();
    let root = if meta.is_dir() {
        let mut stack = vec![(local.to_path_buf(), String::new())];
        while let Some((dir, rel)) = stack.pop() {
            for entry in std::fs::read_dir(&dir).map_err(read(&dir))? {
                let entry = entry.map_err(read(&dir))?;
                // A name that is not UTF-8 is escaped as `div run` ships it
                // (`div_ship::encode_path`), never made lossy.
                let name = div_ship::encode_path(entry.file_name().as_bytes()).into_owned();
                let rel = if rel.is_empty() {
                    name.clone()
                } else {
                    format!("{rel}/{name}")
                };
                let kind = entry.file_type().map_err(read(&entry.path()))?;
                let shown = div_ship::display_path(&rel);
                if kind.is_dir() {
                    if name != ".git" {
                        stack.push((entry.path(), rel));
                    }
                } else if kind.is_file() {
                    files.push((rel, entry.path()));
                } else if kind.is_symlink() {
                    warnings.push(format!("`{shown}` is a link, and was left out"));
                } else {
                    warnings.push(format!(
                        "`{shown}` is {}, not a file, and was left out",
                        special_kind(&kind)
                    ));
                }
            }
        }
        local.to_path_buf()
    } else {
        let name = local
            .file_name()
            .map(|n| div_ship::encode_path(n.as_bytes()).into_owned())
            .unwrap_or_default();
        files.push((name, local.to_path_buf()));
        local.parent().unwrap_or(Path::new(".")).to_path_buf()
    };
    // An empty folder (or one of links only) is an empty tree: the put makes the volume and
    // sends nothing.
    let mut entries = Vec::with_capacity(files.len());
    for (rel, path) in &files {
        let meta = std::fs::metadata(path).map_err(read(path))?;
        // Changed since it was listed: never open what could block (a FIFO) or never end.
        if !meta.is_file() {
            return Err(RunError::NotAFileOrFolder {
                path: path.clone(),
                kind: special_kind(&meta.file_type()),
            });
        }
        let hash = div_ship::hash_file(path).map_err(read(path))?;
        use std::os::unix::fs::PermissionsExt;
        entries.push(TreeEntry {
            path: rel.clone(),
            kind: EntryKind::File,
            executable: meta.permissions().mode() & 0o100 != 0,
            size: meta.len(),
            hash: Some(hash),
            target: None,
        });
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    // Paths are relative to `root`, where the upload plan reads them; the prefix is added
    // when the tree is committed.
    let shipment = Shipment {
        root,
        source: Source::Walk,
        manifest: Manifest { entries },
        warnings: Vec::new(),
        stats: HashStats::default(),
        kept: Default::default(),
    };
    Ok((shipment, warnings))
}

/// What a file that is neither a regular file nor a folder is, for people.
fn special_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else if kind.is_symlink() {
        "a link"
    } else {
        "not a regular file"
    }
}

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

async fn list(cp: &dyn ControlPlane, at: &VolumePath) -> Result<Vec<VolumeEntry>, RunError> {
    match cp.list_tree(&at.volume, &at.path).await {
        Ok(entries) => Ok(entries),
        Err(e) if e.is_not_found() => {
            let volumes = cp
                .list_volumes()
                .await
                .map_err(|e| RunError::api("list the volumes", e))?;
            if volumes.iter().any(|v| v.name == at.volume) {
                Err(RunError::NotInVolume {
                    volume: at.volume.clone(),
                    path: at.path.clone(),
                })
            } else {
                Err(RunError::VolumeNotFound(at.volume.clone()))
            }
        }
        Err(e) => Err(RunError::api("list the volume", e)),
    }
}

/// What a get wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetSummary {
    pub files: u64,
    pub bytes: u64,
    /// Where it went: the file, or the folder the tree was written into.
    pub dest: PathBuf,
}

/// Read a file or a tree out of a volume into `dest`. A file goes to `dest` (or into it, when
/// `dest` is a folder); a tree's contents go into the folder `dest`, made when needed. Nothing
/// local is overwritten: a path that exists refuses the get before anything is written.
pub async fn storage_get(
    cp: &dyn ControlPlane,
    from: &VolumePath,
    dest: &Path,
) -> Result<GetSummary, RunError> {
    let entries = list(cp, from).await?;
    let single_file = entries.len() == 1
        && entries[0].path == from.path
        && entries[0].kind != "dir"
        && !from.path.is_empty();
    // (path in volume, local path, entry)
    let mut plan: Vec<(String, PathBuf, &VolumeEntry)> = Vec::new();
    let root_dest;
    // The volume's paths as names on this machine: a name that is not UTF-8 comes escaped
    // (`div_ship::encode_path`) and is written as its bytes; an escape that is not one is
    // left out.
    let local_name = |path: &str| div_ship::fs_path(path).map(std::borrow::Cow::into_owned);
    if single_file {
        let name = from.path.rsplit('/').next().unwrap_or(&from.path);
        let name = local_name(name).ok_or_else(|| RunError::NotInVolume {
            volume: from.volume.clone(),
            path: from.path.clone(),
        })?;
        root_dest = if dest.is_dir() {
            dest.join(name)
        } else {
            dest.to_path_buf()
        };
        plan.push((from.path.clone(), root_dest.clone(), &entries[0]));
    } else {
        root_dest = dest.to_path_buf();
        let strip = if from.path.is_empty() {
            String::new()
        } else {
            format!("{}/", from.path)
        };
        for entry in &entries {
            let Some(rel) = entry.path.strip_prefix(&strip) else {
                continue;
            };
            if !div_spec::is_volume_path(&rel.replace('\0', "%")) {
                continue;
            }
            let Some(rel) = local_name(rel).filter(|r| {
                !r.as_os_str().is_empty()
                    && r.components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)))
            }) else {
                continue;
            };
            plan.push((entry.path.clone(), dest.join(rel), entry));
        }
    }
    for (_, local, entry) in &plan {
        if entry.kind != "dir" && std::fs::symlink_metadata(local).is_ok() {
            return Err(RunError::WouldOverwrite {
                path: local.clone(),
            });
        }
    }
    // Nothing is written through a link: not one already in the destination (`dest/data ->
    // /etc`), nor one the volume itself holds (`data -> /etc` then `data/passwd`). Checked
    // for the whole plan before anything is written, and again for each path as it is.
    let links: Vec<&Path> = plan
        .iter()
        .filter(|(_, _, e)| e.kind == "symlink")
        .map(|(_, local, _)| local.as_path())
        .collect();
    for (_, local, entry) in &plan {
        let inner = if single_file { None } else { Some(&root_dest) };
        folders_inside(inner, local, entry.kind == "dir", false)?;
        if let Some(link) = links
            .iter()
            .find(|l| local.starts_with(l) && local.as_path() != **l)
        {
            return Err(RunError::ThroughLink {
                path: local.clone(),
                link: link.to_path_buf(),
            });
        }
    }
    let write = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RunError::Write { path, source }
    };
    if !single_file {
        std::fs::create_dir_all(&root_dest).map_err(write(&root_dest))?;
    }
    let (mut files, mut bytes) = (0, 0);
    for (in_volume, local, entry) in plan {
        if single_file {
            if let Some(parent) = local.parent() {
                std::fs::create_dir_all(parent).map_err(write(parent))?;
            }
        } else {
            folders_inside(Some(&root_dest), &local, entry.kind == "dir", true)?;
        }
        match entry.kind.as_str() {
            "dir" => {}
            "symlink" => {
                if let Some(target) = entry.target.as_deref().and_then(local_name) {
                    std::os::unix::fs::symlink(target, &local).map_err(write(&local))?;
                }
            }
            _ => {
                let mut partial_name = std::ffi::OsString::from(".");
                partial_name.push(local.file_name().unwrap_or_default());
                partial_name.push(".div-partial");
                let partial = local.with_file_name(partial_name);
                // A leftover (or planted) partial goes; removing a link never follows it,
                // and `create_new` never opens through one.
                if std::fs::symlink_metadata(&partial).is_ok() {
                    std::fs::remove_file(&partial).map_err(write(&partial))?;
                }
                let mut file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&partial)
                    .await
                    .map_err(write(&partial))?;
                let got = cp
                    .read_file(&from.volume, &in_volume, &mut file)
                    .await
                    .map_err(|e| RunError::api("read the file", e));
                let got = match got {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = std::fs::remove_file(&partial);
                        return Err(e);
                    }
                };
                file.flush().await.map_err(write(&partial))?;
                drop(file);
                if entry.executable {
                    use std::os::unix::fs::PermissionsExt;
                    let _ =
                        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755));
                }
                std::fs::rename(&partial, &local).map_err(write(&local))?;
                files += 1;
                bytes += got;
            }
        }
    }
    Ok(GetSummary {
        files,
        bytes,
        dest: root_dest,
    })
}

/// Checks that every folder between `root` and `local` (and `local` itself when `is_dir`) is
/// a real folder, never a link nor a file; with `make`, makes the missing ones, one level at
/// a time (never `create_dir_all`, which follows links). `root` itself is the user's: `None`
/// (a single file's destination) checks nothing.
fn folders_inside(
    root: Option<&PathBuf>,
    local: &Path,
    is_dir: bool,
    make: bool,
) -> Result<(), RunError> {
    let Some(root) = root else {
        return Ok(());
    };
    let Ok(rel) = local.strip_prefix(root) else {
        return Ok(());
    };
    let mut parts: Vec<_> = rel.components().collect();
    if !is_dir {
        parts.pop();
    }
    let mut here = root.clone();
    for part in parts {
        here.push(part);
        match std::fs::symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_dir() => {}
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(RunError::ThroughLink {
                    path: local.to_path_buf(),
                    link: here,
                });
            }
            Ok(_) => return Err(RunError::WouldOverwrite { path: here }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if make {
                    std::fs::create_dir(&here).map_err(|source| RunError::Write {
                        path: here.clone(),
                        source,
                    })?;
                }
            }
            Err(source) => return Err(RunError::Write { path: here, source }),
        }
    }
    Ok(())
}

/// Remove a volume and everything in it.
pub async fn storage_rm(cp: &dyn ControlPlane, volume: &str) -> Result<(), RunError> {
    cp.delete_volume(volume).await.map_err(|e| {
        if e.is_not_found() {
            RunError::VolumeNotFound(volume.to_string())
        } else {
            RunError::api("remove the volume", e)
        }
    })
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
