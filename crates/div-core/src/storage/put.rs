//! `div storage put`: a local file or folder hashed and sent as `div run` ships its code
//! (`upload.rs`), committed at the volume's root.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use div_api::{ControlPlane, ErrorKind};
use div_ship::{EntryKind, HashStats, Manifest, Shipment, Source, TreeEntry};
use div_spec::VolumeName;

use super::place::VolumePath;
use crate::error::RunError;
use crate::event::EventSink;

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
        None,
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
pub(crate) fn local_tree(local: &Path) -> Result<(Shipment, Vec<String>), RunError> {
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
