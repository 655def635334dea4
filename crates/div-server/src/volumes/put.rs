//! A tree put into a volume's root (`div storage put`), as `cp` would: what the volume lacks
//! written, what it holds replaced, never through a link nor over a folder.

use std::fs;

use div_api::CommittedTree;

use super::Volumes;
use super::beneath::{holds, place};
use super::blobs::source;
use super::error::CommitError;
use super::paths::{Sources, committed_tree, on_disk, staging};
use crate::rules;

/// A tree committed at `""` (what `div storage put` sends) is put into the volume's root as
/// `cp` would: each path the volume lacks is written, each it holds is replaced (a file a run
/// edited, or a link a run left there: the link itself, never what it points to), and one it
/// holds with the same content is left as it is. A folder where the tree has a file, and a
/// file or a link where the tree needs a folder, refuse the whole commit, 409, naming the
/// path, before anything is written: a put never writes through a link, and never replaces a
/// folder. Paths that are not UTF-8 come escaped ([`div_ship::encode_path`]).
///
/// Everything is written beside the volume first (in its blob folder, which no run sees),
/// then each file is renamed into place beneath folders opened one at a time without
/// following links, so a run that swaps a folder for a link meanwhile gets the put refused,
/// never written through.
pub(super) fn add_to_root(
    vols: &Volumes<'_>,
    volume: &str,
    entries: &[div_api::TreeEntry],
    sources: &Sources,
) -> Result<(bool, CommittedTree), CommitError> {
    let root = vols.home.volume_dir(volume);
    let refuse = |path: &str, why: &str| CommitError::PutRefused {
        volume: volume.to_owned(),
        path: path.to_owned(),
        why: why.to_owned(),
    };
    let mut write = Vec::new();
    for entry in entries {
        let parts: Vec<&str> = entry.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            match fs::symlink_metadata(root.join(on_disk(&above)?)) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(refuse(
                        &above,
                        "is a link (a run may have left it), where the put has a folder; a put never writes through a link",
                    ));
                }
                Ok(m) if !m.is_dir() => {
                    return Err(refuse(
                        &above,
                        "is a file, where the put has a folder; a put replaces files, never a file with a folder",
                    ));
                }
                _ => {}
            }
        }
        match fs::symlink_metadata(root.join(on_disk(&entry.path)?)) {
            Err(_) => write.push(entry.clone()),
            Ok(m) if m.is_dir() => {
                return Err(refuse(
                    &entry.path,
                    "is a folder, where the put has a file; a put replaces files, never a folder",
                ));
            }
            Ok(_) if holds(&root, entry) => {}
            Ok(_) => write.push(entry.clone()),
        }
    }
    // A committed tree (a code snapshot, `code/<id>`) never changes: what a run was given
    // stays what that id names. Writing into one is refused, whole, naming it.
    let mut committed_at: std::collections::HashMap<String, bool> = Default::default();
    for entry in &write {
        let parts: Vec<&str> = entry.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            let is_tree = match committed_at.get(&above) {
                Some(known) => *known,
                None => {
                    let known = vols.store.tree(volume, &above)?.is_some();
                    committed_at.insert(above.clone(), known);
                    known
                }
            };
            if is_tree {
                return Err(refuse(
                    &entry.path,
                    &format!(
                        "is in the committed tree `{}`, which never changes (runs were given it by its id); put it under another `--to`",
                        div_ship::display_path(&above)
                    ),
                ));
            }
        }
    }
    let committed = committed_tree(volume, "", entries, None);
    if write.is_empty() {
        return Ok((false, committed));
    }
    let tmp = staging(vols, volume, &root, "put")?;
    let placed = rules::materialise(&write, |h| source(vols, volume, sources, h), &tmp)
        .map_err(|e| CommitError::Written(div_api::error_chain(&e)))
        .and_then(|()| {
            for entry in &write {
                place(&root, &tmp, &entry.path).map_err(|e| match e.raw_os_error() {
                    Some(libc::ELOOP | libc::ENOTDIR | libc::EISDIR | libc::ENOTEMPTY) => refuse(
                        &entry.path,
                        "changed while the put was written (a folder on its way became a link or a file, or the file a folder); nothing more was written",
                    ),
                    _ => CommitError::from(e),
                })?;
            }
            Ok(())
        });
    let _ = fs::remove_dir_all(&tmp);
    placed?;
    Ok((true, committed))
}
