//! Applying layers to a root filesystem: in order, with whiteouts, never outside the root.
//!
//! The rules (docs/images.md says why each holds):
//! - An entry's path is cleaned lexically (`/a/../../b` is `b`: `..` stops at the root).
//! - Its parent directories are resolved inside the root: a symlink among them is followed
//!   as if the root were `/`, so `lib -> /usr/lib` puts `lib/x` at `usr/lib/x` and nothing
//!   lands outside. The entry's own name is never followed.
//! - `.wh.NAME` removes `NAME` from lower layers; `.wh..wh..opq` empties its directory of
//!   what lower layers put there. Either is recognised by name, whatever the entry's type (a
//!   whiteout arriving as a hard link is still a whiteout). Neither removes what the same
//!   layer added. A whiteout whose parent path goes through a symlink is ignored.
//! - A directory entry where a directory already is keeps the directory and its contents.
//! - Device nodes and FIFOs are skipped; ownership is set where the process may (root), and
//!   failed chowns are ignored otherwise.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use crate::manifest::Compression;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";
const MAX_LINKS: u32 = 255;

/// What applying one layer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Entries read from the tar stream.
    pub entries: u64,
    /// Whiteouts (plain and opaque) applied.
    pub whiteouts: u64,
    /// Device nodes and FIFOs skipped.
    pub skipped_devices: u64,
    /// Whiteouts ignored because their parent path went through a symlink.
    pub skipped_whiteouts: u64,
}

/// The error returned by [`Unpacker::apply`].
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The tar stream (or its compression) is broken.
    #[error("the layer is not a readable tar stream")]
    Tar(#[source] io::Error),
    /// An entry could not be written.
    #[error("cannot write `{path}` from the layer")]
    Write {
        /// The entry's path inside the image.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An entry is malformed (a hard link to nothing, too many symlinks…).
    #[error("the layer's entry `{path}` is invalid: {why}")]
    Invalid {
        /// The entry's path inside the image.
        path: String,
        /// What was wrong.
        why: String,
    },
}

/// Applies layers, in order, to one root directory.
#[derive(Debug)]
pub struct Unpacker {
    root: PathBuf,
    /// Final mode and mtime of each directory, applied last (a read-only directory would
    /// stop later layers from writing into it when not root).
    dirs: BTreeMap<PathBuf, (u32, u64)>,
    /// Paths known to be real directories (not symlinks): resolving skips their `lstat`.
    known: HashSet<PathBuf>,
}

fn display(rel: &Path) -> String {
    format!("/{}", rel.display())
}

/// The components of an archive path, `..` resolved lexically and clamped at the root.
fn clean(path: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n.to_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn join(parts: &[OsString]) -> PathBuf {
    parts.iter().collect()
}

fn lstat(p: &Path) -> Option<fs::Metadata> {
    fs::symlink_metadata(p).ok()
}

/// Removes whatever is at `p` without following a symlink there.
fn remove_any(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            make_writable_tree(p);
            fs::remove_dir_all(p)
        }
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Gives the owner rwx on every directory below `p` so that it can be removed when not root.
fn make_writable_tree(p: &Path) {
    if let Some(m) = lstat(p)
        && m.is_dir()
    {
        let mode = m.permissions().mode();
        if mode & 0o700 != 0o700 {
            let _ = fs::set_permissions(p, fs::Permissions::from_mode(mode | 0o700));
        }
        if let Ok(rd) = fs::read_dir(p) {
            for e in rd.flatten() {
                make_writable_tree(&e.path());
            }
        }
    }
}

/// Sets owner and group, ignoring a refusal (not root, or an id outside the user namespace).
fn chown(p: &Path, uid: u64, gid: u64) -> io::Result<()> {
    let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
        return Ok(());
    };
    match std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
        Ok(()) => Ok(()),
        Err(e)
            if e.kind() == io::ErrorKind::PermissionDenied
                || e.kind() == io::ErrorKind::InvalidInput
                || e.raw_os_error() == Some(1) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Wraps a layer blob in its decompressor.
pub(crate) fn decompress<'r>(
    reader: impl Read + 'r,
    compression: Compression,
) -> io::Result<Box<dyn Read + 'r>> {
    Ok(match compression {
        Compression::None => Box::new(reader),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(reader)),
        Compression::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(reader)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?,
        ),
    })
}

impl Unpacker {
    /// Starts unpacking into `root`, an existing empty directory.
    pub fn new(root: impl Into<PathBuf>) -> Unpacker {
        Unpacker {
            root: root.into(),
            dirs: BTreeMap::new(),
            known: HashSet::new(),
        }
    }

    fn resolve(&mut self, parts: &[OsString], name: &str) -> Result<(PathBuf, bool), UnpackError> {
        resolve_in_root(&self.root, parts, Some(&mut self.known)).map_err(|e| match e {
            Resolve::Loop => UnpackError::Invalid {
                path: name.to_owned(),
                why: "its parent directories go through more than 255 symlinks".to_owned(),
            },
            Resolve::Io(source) => UnpackError::Write {
                path: name.to_owned(),
                source,
            },
        })
    }

    /// Removes whatever is at `rel`, forgetting directories known below it.
    fn remove_at(&mut self, rel: &Path) -> io::Result<()> {
        let full = self.root.join(rel);
        if lstat(&full).is_some_and(|m| m.is_dir()) {
            self.known.retain(|k| !k.starts_with(rel));
        }
        remove_any(&full)
    }

    /// Applies one layer's tar stream (already decompressed).
    pub fn apply(&mut self, reader: impl Read) -> Result<LayerStats, UnpackError> {
        let mut archive = tar::Archive::new(reader);
        let mut stats = LayerStats::default();
        // Paths this layer wrote, and their ancestors: whiteouts spare them.
        let mut touched: HashSet<PathBuf> = HashSet::new();
        for entry in archive.entries().map_err(UnpackError::Tar)? {
            let mut entry = entry.map_err(UnpackError::Tar)?;
            stats.entries += 1;
            let raw = entry.path_bytes().into_owned();
            let name = String::from_utf8_lossy(&raw).into_owned();
            let parts = clean(Path::new(OsStr::from_bytes(&raw)));
            let Some((file, parent)) = parts.split_last() else {
                // The root itself: only its mode and time matter.
                if entry.header().entry_type().is_dir() {
                    let mode = entry.header().mode().unwrap_or(0o755);
                    let mtime = entry.header().mtime().unwrap_or(0);
                    self.dirs.insert(PathBuf::new(), (mode & 0o7777, mtime));
                }
                continue;
            };
            let file_str = file.to_string_lossy();
            if let Some(hidden) = file_str.strip_prefix(WHITEOUT_PREFIX) {
                let (dir, via_symlink) = self.resolve(parent, &name)?;
                if via_symlink {
                    tracing::warn!(entry = %name, "whiteout through a symlink ignored");
                    stats.skipped_whiteouts += 1;
                    continue;
                }
                stats.whiteouts += 1;
                let write = |source| UnpackError::Write {
                    path: name.clone(),
                    source,
                };
                if file_str == OPAQUE {
                    let full = self.root.join(&dir);
                    if lstat(&full).is_some_and(|m| m.is_dir()) {
                        self.remove_lower_children(&dir, &touched).map_err(write)?;
                    }
                } else if !hidden.is_empty() && hidden != "." && hidden != ".." {
                    self.remove_lower(&dir.join(hidden), &touched)
                        .map_err(write)?;
                }
                continue;
            }
            let (dir, _) = self.resolve(parent, &name)?;
            let rel = dir.join(file);
            let dest = self.root.join(&rel);
            let write = |source| UnpackError::Write {
                path: display(&rel),
                source,
            };
            if !dir.as_os_str().is_empty() {
                let full = self.root.join(&dir);
                if !lstat(&full).is_some_and(|m| m.is_dir()) {
                    fs::create_dir_all(&full).map_err(|source| UnpackError::Write {
                        path: display(&dir),
                        source,
                    })?;
                    let mut p = dir.clone();
                    while !p.as_os_str().is_empty() && self.known.insert(p.clone()) {
                        p.pop();
                    }
                }
            }
            let mut p = rel.clone();
            loop {
                if !touched.insert(p.clone()) {
                    break;
                }
                if !p.pop() {
                    break;
                }
            }
            let header = entry.header();
            let mode = header.mode().unwrap_or(0o644) & 0o7777;
            let uid = header.uid().unwrap_or(0);
            let gid = header.gid().unwrap_or(0);
            let mtime = header.mtime().unwrap_or(0);
            let kind = header.entry_type();
            use tar::EntryType as T;
            match kind {
                T::Directory => {
                    let existing = lstat(&dest);
                    if !existing.as_ref().is_some_and(|m| m.is_dir()) {
                        self.remove_at(&rel).map_err(write)?;
                        fs::create_dir(&dest).map_err(write)?;
                    }
                    chown(&dest, uid, gid).map_err(write)?;
                    fs::set_permissions(&dest, fs::Permissions::from_mode(mode | 0o700))
                        .map_err(write)?;
                    self.known.insert(rel.clone());
                    self.dirs.insert(rel, (mode, mtime));
                }
                T::Regular | T::Continuous | T::GNUSparse => {
                    self.remove_at(&rel).map_err(write)?;
                    self.dirs.remove(&rel);
                    let mut f = fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&dest)
                        .map_err(write)?;
                    io::copy(&mut entry, &mut f).map_err(UnpackError::Tar)?;
                    chown(&dest, uid, gid).map_err(write)?;
                    f.set_permissions(fs::Permissions::from_mode(mode))
                        .map_err(write)?;
                    drop(f);
                    let t = filetime::FileTime::from_unix_time(mtime as i64, 0);
                    filetime::set_symlink_file_times(&dest, t, t).map_err(write)?;
                }
                T::Symlink => {
                    let target = entry
                        .link_name_bytes()
                        .map(|b| b.into_owned())
                        .unwrap_or_default();
                    self.remove_at(&rel).map_err(write)?;
                    self.dirs.remove(&rel);
                    std::os::unix::fs::symlink(OsStr::from_bytes(&target), &dest).map_err(write)?;
                    chown(&dest, uid, gid).map_err(write)?;
                    let t = filetime::FileTime::from_unix_time(mtime as i64, 0);
                    filetime::set_symlink_file_times(&dest, t, t).map_err(write)?;
                }
                T::Link => {
                    let target = entry
                        .link_name_bytes()
                        .map(|b| b.into_owned())
                        .unwrap_or_default();
                    let tparts = clean(Path::new(OsStr::from_bytes(&target)));
                    let Some((tfile, tparent)) = tparts.split_last() else {
                        return Err(UnpackError::Invalid {
                            path: display(&rel),
                            why: "a hard link to the root".to_owned(),
                        });
                    };
                    let (tdir, _) = self.resolve(tparent, &name)?;
                    let source = self.root.join(tdir.join(tfile));
                    match lstat(&source) {
                        None => {
                            return Err(UnpackError::Invalid {
                                path: display(&rel),
                                why: format!(
                                    "a hard link to `{}`, which no earlier entry created",
                                    String::from_utf8_lossy(&target)
                                ),
                            });
                        }
                        Some(m) if m.is_dir() => {
                            return Err(UnpackError::Invalid {
                                path: display(&rel),
                                why: "a hard link to a directory".to_owned(),
                            });
                        }
                        Some(_) => {}
                    }
                    if source == dest {
                        continue;
                    }
                    self.remove_at(&rel).map_err(write)?;
                    self.dirs.remove(&rel);
                    fs::hard_link(&source, &dest).map_err(write)?;
                }
                T::Char | T::Block | T::Fifo => {
                    stats.skipped_devices += 1;
                }
                _ => {
                    tracing::debug!(entry = %name, ?kind, "tar entry type skipped");
                }
            }
        }
        Ok(stats)
    }

    /// Removes `rel` unless this layer wrote it; where this layer wrote inside it, removes
    /// only what lower layers left there.
    fn remove_lower(&mut self, rel: &Path, touched: &HashSet<PathBuf>) -> io::Result<()> {
        let full = self.root.join(rel);
        let Some(meta) = lstat(&full) else {
            return Ok(());
        };
        if !touched.contains(rel) {
            self.dirs.retain(|k, _| !k.starts_with(rel));
            return self.remove_at(rel);
        }
        if meta.is_dir() {
            self.remove_lower_children(rel, touched)?;
        }
        Ok(())
    }

    fn remove_lower_children(&mut self, rel: &Path, touched: &HashSet<PathBuf>) -> io::Result<()> {
        let full = self.root.join(rel);
        let mut names: Vec<OsString> = fs::read_dir(&full)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for n in names {
            self.remove_lower(&rel.join(n), touched)?;
        }
        Ok(())
    }

    /// Sets directories' final modes and times, deepest first. Call once after the last layer.
    pub fn finish(self) -> Result<(), UnpackError> {
        for (rel, (mode, mtime)) in self.dirs.iter().rev() {
            let full = self.root.join(rel);
            // Only a directory that is still a directory (never through a symlink).
            if !lstat(&full).is_some_and(|m| m.is_dir()) {
                continue;
            }
            let write = |source| UnpackError::Write {
                path: display(rel),
                source,
            };
            fs::set_permissions(&full, fs::Permissions::from_mode(*mode)).map_err(write)?;
            let t = filetime::FileTime::from_unix_time(*mtime as i64, 0);
            filetime::set_symlink_file_times(&full, t, t).map_err(write)?;
        }
        Ok(())
    }
}

pub(crate) enum Resolve {
    Loop,
    Io(io::Error),
}

/// Resolves `parts` inside `root`, following symlinks as if `root` were `/`: the result
/// never leaves it. Returns the resolved relative path and whether a symlink was followed.
pub(crate) fn resolve_in_root(
    root: &Path,
    parts: &[OsString],
    mut known: Option<&mut HashSet<PathBuf>>,
) -> Result<(PathBuf, bool), Resolve> {
    let mut stack: Vec<OsString> = Vec::new();
    let mut pending: VecDeque<OsString> = parts.iter().cloned().collect();
    let mut links = 0u32;
    let mut via_symlink = false;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            stack.pop();
            continue;
        }
        if c.is_empty() || c == "." {
            continue;
        }
        stack.push(c);
        let rel = join(&stack);
        if known.as_ref().is_some_and(|k| k.contains(&rel)) {
            continue;
        }
        let here = root.join(&rel);
        let Some(meta) = lstat(&here) else { continue };
        if !meta.file_type().is_symlink() {
            if meta.is_dir()
                && let Some(k) = known.as_mut()
            {
                k.insert(rel);
            }
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(Resolve::Loop);
        }
        via_symlink = true;
        let target = fs::read_link(&here).map_err(Resolve::Io)?;
        stack.pop();
        if target.is_absolute() {
            stack.clear();
        }
        let mut next: VecDeque<OsString> = VecDeque::new();
        for tc in target.components() {
            match tc {
                Component::Normal(n) => next.push_back(n.to_owned()),
                Component::ParentDir => next.push_back("..".into()),
                _ => {}
            }
        }
        next.extend(pending);
        pending = next;
    }
    Ok((join(&stack), via_symlink))
}

/// Reads a regular file of an unpacked tree, at most `max` bytes, resolving its path inside
/// `root` (a symlinked `/etc/passwd` pointing at the host's is read inside the tree).
pub(crate) fn read_in_root(root: &Path, path: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
    let parts = clean(Path::new(path));
    let (rel, _) = resolve_in_root(root, &parts, None).map_err(|e| match e {
        Resolve::Loop => io::Error::other("too many symlinks"),
        Resolve::Io(e) => e,
    })?;
    let full = root.join(rel);
    match lstat(&full) {
        Some(m) if m.is_file() => {
            let mut out = Vec::new();
            fs::File::open(&full)?.take(max).read_to_end(&mut out)?;
            Ok(Some(out))
        }
        _ => Ok(None),
    }
}

/// Total bytes of the files under `p` (each hard-linked inode once), without following
/// symlinks.
pub(crate) fn tree_size(p: &Path) -> u64 {
    fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
        let Some(m) = lstat(p) else { return 0 };
        if m.is_dir() {
            let mut total = m.blocks() * 512;
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    total += walk(&e.path(), seen);
                }
            }
            total
        } else if seen.insert((m.dev(), m.ino())) {
            m.blocks() * 512
        } else {
            0
        }
    }
    walk(p, &mut HashSet::new())
}

pub(crate) fn remove_tree(p: &Path) -> io::Result<()> {
    remove_any(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_and_zstd_layers_unpack() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o640);
        b.append_data(&mut h, "hello", &b"world"[..]).unwrap();
        let raw = b.into_inner().unwrap();
        let zst = ruzstd::encoding::compress_to_vec(
            &raw[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &raw).unwrap();
        let gz = gz.finish().unwrap();
        for (data, c) in [
            (zst, Compression::Zstd),
            (gz, Compression::Gzip),
            (raw, Compression::None),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut u = Unpacker::new(dir.path());
            u.apply(decompress(&data[..], c).unwrap()).unwrap();
            u.finish().unwrap();
            let p = dir.path().join("hello");
            assert_eq!(fs::read(&p).unwrap(), b"world", "{c:?}");
            assert_eq!(
                fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o640
            );
        }
    }
}
