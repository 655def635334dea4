//! Turning a manifest back into a directory (the server side), and checking one first.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::manifest::{EntryKind, TreeEntry, resolve_link};
use crate::name::decode_path;
use crate::name::on_disk;

/// The longest file name Linux file systems take, in bytes.
const NAME_MAX: usize = 255;
/// The longest path Linux takes, in bytes.
const PATH_MAX: usize = 4095;

/// The error returned by [`materialise()`] and [`validate_entries()`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MaterialiseError {
    #[error("path `{}` is not relative", crate::name::display_path(.path))]
    AbsolutePath { path: String },
    #[error("path `{}` has an empty, `.` or `..` component", crate::name::display_path(.path))]
    BadComponent { path: String },
    #[error("path `{}` is not a valid name on Linux", crate::name::display_path(.path))]
    InvalidName { path: String },
    #[error("path `{}` is listed twice", crate::name::display_path(.path))]
    Duplicate { path: String },
    #[error("path `{}` goes through the symlink `{link}`", crate::name::display_path(.path))]
    ThroughSymlink { path: String, link: String },
    #[error("path `{}` is under `{file}`, which is a file", crate::name::display_path(.path))]
    UnderFile { path: String, file: String },
    #[error("symlink `{}` points outside the tree (`{target}`)", crate::name::display_path(.path))]
    LinkEscapes { path: String, target: String },
    #[error("entry `{}` is a {kind} but {problem}", crate::name::display_path(.path))]
    Inconsistent {
        path: String,
        kind: &'static str,
        problem: &'static str,
    },
    #[error("destination `{dest}` already exists")]
    DestinationExists { dest: PathBuf },
    #[error("blob `{hash}` for `{}` has {found} bytes, expected {expected}", crate::name::display_path(.path))]
    BlobSize {
        path: String,
        hash: String,
        expected: u64,
        found: u64,
    },
    #[error("cannot write `{}`", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Checks that `entries` describe a tree that can be written safely under a directory: relative
/// paths with no empty, `.` or `..` component, valid Linux names (no NUL, at most 255 bytes per
/// name and 4095 per path), each path once, nothing under a symlink or a file, files with a
/// lowercase blake3 hex hash, symlinks with a target that stays inside the tree once resolved.
pub fn validate_entries(entries: &[TreeEntry]) -> Result<(), MaterialiseError> {
    let mut kinds: HashMap<&str, EntryKind> = HashMap::with_capacity(entries.len());
    for entry in entries {
        validate_path(&entry.path)?;
        if kinds.insert(entry.path.as_str(), entry.kind).is_some() {
            return Err(MaterialiseError::Duplicate {
                path: entry.path.clone(),
            });
        }
        validate_kind(entry)?;
    }
    for entry in entries {
        let mut end = 0;
        while let Some(slash) = entry.path[end..].find('/') {
            let ancestor = &entry.path[..end + slash];
            match kinds.get(ancestor) {
                Some(EntryKind::Symlink) => {
                    return Err(MaterialiseError::ThroughSymlink {
                        path: entry.path.clone(),
                        link: ancestor.to_owned(),
                    });
                }
                Some(EntryKind::File) => {
                    return Err(MaterialiseError::UnderFile {
                        path: entry.path.clone(),
                        file: ancestor.to_owned(),
                    });
                }
                None => {}
            }
            end += slash + 1;
        }
    }
    let targets: HashMap<&str, &str> = entries
        .iter()
        .filter_map(|e| Some((e.path.as_str(), e.target.as_deref()?)))
        .collect();
    let lookup = |p: &str| targets.get(p).copied();
    for entry in entries.iter().filter(|e| e.kind == EntryKind::Symlink) {
        let target = entry.target.as_deref().unwrap_or_default();
        if resolve_link(&entry.path, target, &lookup).is_err() {
            return Err(MaterialiseError::LinkEscapes {
                path: entry.path.clone(),
                target: target.to_owned(),
            });
        }
    }
    Ok(())
}

fn validate_path(path: &str) -> Result<(), MaterialiseError> {
    if path.starts_with('/') {
        return Err(MaterialiseError::AbsolutePath {
            path: path.to_owned(),
        });
    }
    // The bytes it stands for (a name that is not UTF-8 is escaped, see `encode_path`); a NUL
    // that is not such an escape is no valid name.
    let Some(bytes) = decode_path(path) else {
        return Err(MaterialiseError::InvalidName {
            path: path.to_owned(),
        });
    };
    if bytes.len() > PATH_MAX {
        return Err(MaterialiseError::InvalidName {
            path: path.to_owned(),
        });
    }
    for component in path.split('/') {
        if matches!(component, "" | "." | "..") {
            return Err(MaterialiseError::BadComponent {
                path: path.to_owned(),
            });
        }
    }
    for component in bytes.split(|&b| b == b'/') {
        if component.len() > NAME_MAX {
            return Err(MaterialiseError::InvalidName {
                path: path.to_owned(),
            });
        }
    }
    Ok(())
}

fn validate_kind(entry: &TreeEntry) -> Result<(), MaterialiseError> {
    let problem = match entry.kind {
        EntryKind::File => match entry.hash.as_deref() {
            _ if entry.target.is_some() => Some("has a link target"),
            Some(hash) if is_hash(hash) => None,
            Some(_) => Some("its hash is not 64 lowercase hex digits"),
            None => Some("has no hash"),
        },
        EntryKind::Symlink => match entry.target.as_deref() {
            _ if entry.hash.is_some() || entry.executable || entry.size != 0 => {
                Some("has file content")
            }
            Some(target) if decode_path(target).is_none_or(|t| t.len() > PATH_MAX) => {
                Some("its target is not a valid path")
            }
            Some(_) => None,
            None => Some("has no target"),
        },
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(MaterialiseError::Inconsistent {
            path: entry.path.clone(),
            kind: match entry.kind {
                EntryKind::File => "file",
                EntryKind::Symlink => "symlink",
            },
            problem,
        }),
    }
}

/// Whether `hash` is a blake3 hash as the manifest writes it: 64 lowercase hex digits.
pub(crate) fn is_hash(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Writes the tree `entries` describe at `dest`, which must not exist yet: each file copied from
/// `blob_path(hash)` (with `std::fs::copy`, so `copy_file_range` on Linux) with its executable
/// bit, each symlink created as is. Entries are [validated](validate_entries) first. The tree is
/// written into a temporary sibling of `dest` and renamed into place, so `dest` either does not
/// exist or is complete; on failure the temporary directory is removed.
pub fn materialise(
    entries: &[TreeEntry],
    blob_path: impl Fn(&str) -> PathBuf + Sync,
    dest: &Path,
) -> Result<(), MaterialiseError> {
    materialise_with(entries, &blob_path, dest, Files::Copied)
}

/// [`materialise`], but each file is a hard link to its blob rather than a copy, so a content
/// shipped in many trees is stored once. Only for trees that nothing ever writes to
/// (committed code: the blob and every tree holding it are one file). An executable file,
/// whose mode its blob cannot also have for the trees that hold it as a plain file, is a
/// link to the blob's executable twin, [`executable_blob`] beside it, made from the blob the
/// first time a tree needs it. A link that cannot be made (another file system), or a twin
/// that cannot, is a copy.
pub fn materialise_linked(
    entries: &[TreeEntry],
    blob_path: impl Fn(&str) -> PathBuf + Sync,
    dest: &Path,
) -> Result<(), MaterialiseError> {
    materialise_with(entries, &blob_path, dest, Files::Linked)
}

/// Writes `entries` into the folder `root`, which exists (a staged commit's, part written
/// already; what is there is left as it is, and a folder there already is taken as it is):
/// each file a hard link, as [`materialise_linked`] makes them, to the blob at
/// `blob_path(hash)`, or, executable, to the executable twin at `twin_path(hash)`, made from
/// the blob the first time one is needed. The caller has [validated](validate_entries) the
/// whole tree `entries` are part of.
pub fn link_into(
    entries: &[TreeEntry],
    blob_path: impl Fn(&str) -> PathBuf + Sync,
    twin_path: impl Fn(&str) -> PathBuf + Sync,
    root: &Path,
) -> Result<(), MaterialiseError> {
    let sources = Sources {
        blob: &blob_path,
        twin: Some(&twin_path),
    };
    write_tree(entries, &sources, root, Files::Linked)
}

/// Where a tree's files come from: each blob by its hash, and, where given, each blob's
/// executable twin (else beside the blob, [`executable_blob`]).
#[derive(Clone, Copy)]
struct Sources<'a> {
    blob: &'a (dyn Fn(&str) -> PathBuf + Sync),
    twin: Option<&'a (dyn Fn(&str) -> PathBuf + Sync)>,
}

/// How files get into a materialised tree.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Files {
    Copied,
    Linked,
}

fn materialise_with(
    entries: &[TreeEntry],
    blob_path: &(dyn Fn(&str) -> PathBuf + Sync),
    dest: &Path,
    files: Files,
) -> Result<(), MaterialiseError> {
    validate_entries(entries)?;
    if fs::symlink_metadata(dest).is_ok() {
        return Err(MaterialiseError::DestinationExists {
            dest: dest.to_owned(),
        });
    }
    let tmp = temporary_sibling(dest);
    fs::create_dir(&tmp).map_err(|source| MaterialiseError::Io {
        path: tmp.clone(),
        source,
    })?;
    let sources = Sources {
        blob: blob_path,
        twin: None,
    };
    match write_tree(entries, &sources, &tmp, files) {
        Ok(()) => fs::rename(&tmp, dest).map_err(|source| {
            let _ = fs::remove_dir_all(&tmp);
            MaterialiseError::Io {
                path: dest.to_owned(),
                source,
            }
        }),
        Err(err) => {
            let _ = fs::remove_dir_all(&tmp);
            Err(err)
        }
    }
}

fn temporary_sibling(dest: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unique = format!(
        ".{name}.partial-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    dest.with_file_name(unique)
}

/// What the name of a blob's executable twin adds to the blob's ([`executable_blob`]).
pub const EXECUTABLE_TWIN_SUFFIX: &str = ".x";

/// Where the executable twin of the blob at `blob` lives: beside it, its name with
/// [`EXECUTABLE_TWIN_SUFFIX`] added. The same bytes with mode `0755`, which
/// [`materialise_linked`] links executable files to; whoever lets the blob go lets its twin
/// go with it.
pub fn executable_blob(blob: &Path) -> PathBuf {
    let mut name = blob.file_name().unwrap_or_default().to_owned();
    name.push(EXECUTABLE_TWIN_SUFFIX);
    blob.with_file_name(name)
}

/// Makes `twin`, the executable twin of `blob` ([`executable_blob`]): the blob's bytes copied
/// into a file with no name in the same folder, given mode `0755`, then named, never over
/// anything (one made meanwhile by another commit is as good).
fn make_executable_twin(blob: &Path, twin: &Path) -> io::Result<()> {
    let (Some(folder), Some(name)) = (twin.parent(), twin.file_name()) else {
        return Err(io::ErrorKind::InvalidInput.into());
    };
    let mut from = fs::File::from(rustix::fs::open(
        blob,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?);
    let dir = rustix::fs::open(
        folder,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut to = fs::File::from(rustix::fs::openat(
        &dir,
        ".",
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(0o600),
    )?);
    io::copy(&mut from, &mut to)?;
    rustix::fs::fchmod(&to, rustix::fs::Mode::from_raw_mode(0o755))?;
    match name_unnamed_file(&to, &dir, name) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Names `file`, made with `O_TMPFILE` and so without a name, as `name` in the folder `dir`,
/// with `linkat(2)`, which never names over anything (`EEXIST` when something is there). By
/// the descriptor itself where the process may (`AT_EMPTY_PATH` wants `CAP_DAC_READ_SEARCH`
/// before Linux 6.10), else through `/proc/self/fd`, as `open(2)` shows; which works is learnt
/// once.
pub fn name_unnamed_file(
    file: &fs::File,
    dir: &rustix::fd::OwnedFd,
    name: &std::ffi::OsStr,
) -> rustix::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::AtomicBool;
    static BY_PROC: AtomicBool = AtomicBool::new(false);
    if !BY_PROC.load(Ordering::Relaxed) {
        match rustix::fs::linkat(file, "", dir, name, rustix::fs::AtFlags::EMPTY_PATH) {
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::PERM) => {}
            done => return done,
        }
    }
    let named = rustix::fs::linkat(
        rustix::fs::CWD,
        format!("/proc/self/fd/{}", file.as_raw_fd()),
        dir,
        name,
        rustix::fs::AtFlags::SYMLINK_FOLLOW,
    );
    if named.is_ok() {
        BY_PROC.store(true, Ordering::Relaxed);
    }
    named
}

/// Links the blob at `blob` in as `name` in the folder `dir`, by its name beneath its folder,
/// held open in `held` for the next blob of the same folder.
fn link_blob(
    held: &mut Option<(PathBuf, rustix::fd::OwnedFd)>,
    blob: &Path,
    dir: &rustix::fd::OwnedFd,
    name: &std::ffi::OsStr,
) -> rustix::io::Result<()> {
    let (Some(folder), Some(blob_name)) = (blob.parent(), blob.file_name()) else {
        return rustix::fs::linkat(
            rustix::fs::CWD,
            blob,
            dir,
            name,
            rustix::fs::AtFlags::empty(),
        );
    };
    if held.as_ref().is_none_or(|(open, _)| open != folder) {
        let fd = rustix::fs::open(
            folder,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        *held = Some((folder.to_owned(), fd));
    }
    let Some((_, blobs)) = held.as_ref() else {
        unreachable!("opened just above")
    };
    rustix::fs::linkat(blobs, blob_name, dir, name, rustix::fs::AtFlags::empty())
}

/// An I/O error at `path`, for `map_err`.
fn io_err(path: &Path) -> impl FnOnce(io::Error) -> MaterialiseError + use<> {
    let path = path.to_owned();
    move |source| MaterialiseError::Io { path, source }
}

/// Below this many files a tree is written by one thread.
const FILES_PER_THREAD: usize = 4096;

/// Writes `files` (sorted, all plain files) into the tree at `root`.
fn write_files(
    files: &[&TreeEntry],
    sources: &Sources<'_>,
    root: &Path,
    how: Files,
) -> Result<(), MaterialiseError> {
    // The folder the last file went into, held open: entries are sorted, so a folder's files
    // come together, and each is linked, looked at and given its mode by name beneath it,
    // rather than by a path the kernel walks again from the top each time.
    let mut folder: Option<(PathBuf, rustix::fd::OwnedFd)> = None;
    // Likewise the blobs' folder (most often one for all): each blob is linked by its name
    // beneath it, not by a path walked from the top.
    let mut blobs: Option<(PathBuf, rustix::fd::OwnedFd)> = None;
    for &entry in files {
        let path = root.join(on_disk(&entry.path));
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(MaterialiseError::BadComponent {
                path: entry.path.clone(),
            });
        };
        if folder.as_ref().is_none_or(|(open, _)| open != parent) {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
            let fd = rustix::fs::open(
                parent,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| io_err(parent)(e.into()))?;
            folder = Some((parent.to_owned(), fd));
        }
        let Some((_, dir)) = &folder else {
            unreachable!("opened just above")
        };
        let hash = entry.hash.as_deref().expect("validated: a file has a hash");
        let blob = (sources.blob)(hash);
        let mode = if entry.executable { 0o755 } else { 0o644 };
        let linked = how == Files::Linked
            && if entry.executable {
                let twin = sources
                    .twin
                    .map_or_else(|| executable_blob(&blob), |twin| twin(hash));
                match link_blob(&mut blobs, &twin, dir, name) {
                    Err(rustix::io::Errno::NOENT) => make_executable_twin(&blob, &twin)
                        .and_then(|()| link_blob(&mut blobs, &twin, dir, name).map_err(Into::into))
                        .is_ok(),
                    linked => linked.is_ok(),
                }
            } else {
                link_blob(&mut blobs, &blob, dir, name).is_ok()
            };
        let copied = if linked {
            let stat = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| io_err(&path)(e.into()))?;
            // The blob is shared by every tree that holds it: its mode is set only where it
            // is not already the one wanted.
            if stat.st_mode & 0o7777 != mode {
                rustix::fs::chmodat(
                    dir,
                    name,
                    rustix::fs::Mode::from_raw_mode(mode),
                    rustix::fs::AtFlags::empty(),
                )
                .map_err(|e| io_err(&path)(e.into()))?;
            }
            u64::try_from(stat.st_size).unwrap_or(0)
        } else {
            let copied = fs::copy(&blob, &path).map_err(io_err(&blob))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(io_err(&path))?;
            copied
        };
        if copied != entry.size {
            return Err(MaterialiseError::BlobSize {
                path: entry.path.clone(),
                hash: hash.to_owned(),
                expected: entry.size,
                found: copied,
            });
        }
    }
    Ok(())
}

fn write_tree(
    entries: &[TreeEntry],
    sources: &Sources<'_>,
    root: &Path,
    how: Files,
) -> Result<(), MaterialiseError> {
    // Files first, links last: validation already refused paths under a link, so no write
    // can go through one, whatever the order.
    let (files, links): (Vec<_>, Vec<_>) = entries.iter().partition(|e| e.kind == EntryKind::File);
    // A big tree's files are written by several threads, each a run of consecutive entries
    // (a folder two runs share is made by whichever comes first: `create_dir_all` takes
    // one already there).
    let threads = crate::cores::cores()
        .min(4)
        .min(files.len() / FILES_PER_THREAD)
        .max(1);
    if threads == 1 {
        write_files(&files, sources, root, how)?;
    } else {
        let chunk = files.len().div_ceil(threads);
        let results: Vec<Result<(), MaterialiseError>> = std::thread::scope(|scope| {
            let workers: Vec<_> = files
                .chunks(chunk)
                .map(|part| scope.spawn(move || write_files(part, sources, root, how)))
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a writing thread does not panic"))
                .collect()
        });
        for result in results {
            result?;
        }
    }
    for entry in links {
        let path = root.join(on_disk(&entry.path));
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let target = entry
            .target
            .as_deref()
            .expect("validated: a symlink has a target");
        std::os::unix::fs::symlink(on_disk(target), &path).map_err(io_err(&path))?;
    }
    Ok(())
}
