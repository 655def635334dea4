//! `div storage get`: a file or a tree read out of a volume, written without overwriting
//! anything or writing through a link.

use std::path::{Path, PathBuf};

use div_api::{ControlPlane, VolumeEntry};
use tokio::io::AsyncWriteExt;

use super::place::{VolumePath, list};
use crate::error::RunError;

/// What a get wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetSummary {
    pub files: u64,
    pub bytes: u64,
    /// Where it went: the file, or the folder the tree was written into.
    pub dest: PathBuf,
}

/// Where a get writes each entry.
struct GetPlan<'e> {
    /// One file asked for by name, written at `root` (its folders made as the user's would
    /// be); otherwise a tree, written into the folder `root` through real folders only.
    single_file: bool,
    /// The file, or the folder the tree goes into.
    root: PathBuf,
    /// Each entry's path in the volume, where it goes, and the entry.
    entries: Vec<(String, PathBuf, &'e VolumeEntry)>,
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
    let plan = plan_get(from, dest, &entries)?;
    check_plan(&plan)?;
    if !plan.single_file {
        std::fs::create_dir_all(&plan.root).map_err(write(&plan.root))?;
    }
    let (mut files, mut bytes) = (0, 0);
    for (in_volume, local, entry) in &plan.entries {
        if plan.single_file {
            if let Some(parent) = local.parent() {
                std::fs::create_dir_all(parent).map_err(write(parent))?;
            }
        } else {
            folders_inside(Some(&plan.root), local, entry.kind == "dir", true)?;
        }
        match entry.kind.as_str() {
            "dir" => {}
            "symlink" => {
                if let Some(target) = entry.target.as_deref().and_then(local_name) {
                    std::os::unix::fs::symlink(target, local).map_err(write(local))?;
                }
            }
            _ => {
                bytes += get_file(cp, &from.volume, in_volume, local, entry.executable).await?;
                files += 1;
            }
        }
    }
    Ok(GetSummary {
        files,
        bytes,
        dest: plan.root,
    })
}

/// A volume's path as a name on this machine: a name that is not UTF-8 comes escaped
/// (`div_ship::encode_path`) and is written as its bytes; an escape that is not one is `None`,
/// left out.
fn local_name(path: &str) -> Option<PathBuf> {
    div_ship::fs_path(path).map(std::borrow::Cow::into_owned)
}

/// What failing to write `path` says.
fn write(path: &Path) -> impl FnOnce(std::io::Error) -> RunError {
    let path = path.to_path_buf();
    move |source| RunError::Write { path, source }
}

/// Where each of `entries` (everything under `from`) goes: one file asked for by name to
/// `dest`, or into it when it is a folder; a tree's entries into `dest`, each at its path
/// below `from`, leaving out any that could not be a path inside `dest`.
fn plan_get<'e>(
    from: &VolumePath,
    dest: &Path,
    entries: &'e [VolumeEntry],
) -> Result<GetPlan<'e>, RunError> {
    let single_file = entries.len() == 1
        && entries[0].path == from.path
        && entries[0].kind != "dir"
        && !from.path.is_empty();
    if single_file {
        let name = from.path.rsplit('/').next().unwrap_or(&from.path);
        let name = local_name(name).ok_or_else(|| RunError::NotInVolume {
            volume: from.volume.clone(),
            path: from.path.clone(),
        })?;
        let root = if dest.is_dir() {
            dest.join(name)
        } else {
            dest.to_path_buf()
        };
        return Ok(GetPlan {
            single_file,
            entries: vec![(from.path.clone(), root.clone(), &entries[0])],
            root,
        });
    }
    let strip = if from.path.is_empty() {
        String::new()
    } else {
        format!("{}/", from.path)
    };
    let mut planned = Vec::new();
    for entry in entries {
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
        planned.push((entry.path.clone(), dest.join(rel), entry));
    }
    Ok(GetPlan {
        single_file,
        root: dest.to_path_buf(),
        entries: planned,
    })
}

/// Refuses a plan that would overwrite a path that exists, or write through a link: not one
/// already in the destination (`dest/data -> /etc`), nor one the volume itself holds (`data
/// -> /etc` then `data/passwd`). Checked for the whole plan before anything is written, and
/// again for each path as it is.
fn check_plan(plan: &GetPlan<'_>) -> Result<(), RunError> {
    for (_, local, entry) in &plan.entries {
        if entry.kind != "dir" && std::fs::symlink_metadata(local).is_ok() {
            return Err(RunError::WouldOverwrite {
                path: local.clone(),
            });
        }
    }
    let links: Vec<&Path> = plan
        .entries
        .iter()
        .filter(|(_, _, e)| e.kind == "symlink")
        .map(|(_, local, _)| local.as_path())
        .collect();
    for (_, local, entry) in &plan.entries {
        let inner = if plan.single_file {
            None
        } else {
            Some(&plan.root)
        };
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
    Ok(())
}

/// Reads the file at `in_volume` into `local`, through a partial file beside it (never
/// opened through a link) renamed into place once whole; returns its bytes.
async fn get_file(
    cp: &dyn ControlPlane,
    volume: &str,
    in_volume: &str,
    local: &Path,
    executable: bool,
) -> Result<u64, RunError> {
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
        .read_file(volume, in_volume, &mut file)
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
    if executable {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755));
    }
    std::fs::rename(&partial, local).map_err(write(local))?;
    Ok(got)
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
