//! A volume's folder or file kept as a committed tree of a volume: each file's bytes copied
//! once into the target volume's blobs, read beneath the source without following a link a
//! run left and without blocking on a FIFO; then the tree committed as any other, so it never
//! changes again. What `div models push NAME --from VOLUME/PATH` does with what a run wrote,
//! without a second upload.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use div_api::{CommitTree, CommittedTree, EntryKind, TreeEntry};
use rustix::fs::{Dir, FileType, Mode, OFlags};

use super::beneath::{folder_beneath, split};
use super::error::{CommitError, PathRefused};
use super::paths::{commit_lock, on_disk, unique_name, valid_rel};
use super::{Volumes, require_volume, tree};

/// The most entries a snapshot takes (a tree past it is refused, nothing kept).
const MAX_ENTRIES: usize = 1_000_000;

/// Keeps what `from_volume` holds at `from_path` (a folder's files, or one file) as a tree
/// committed in `to_volume` under `to_prefix/<its id>`: whether it was made now (`false`: the
/// same tree was there), and what it holds.
pub(crate) fn snapshot(
    vols: &Volumes<'_>,
    from_volume: &str,
    from_path: &str,
    to_volume: &str,
    to_prefix: &str,
) -> Result<(bool, CommittedTree), CommitError> {
    require_volume(vols, from_volume)?;
    require_volume(vols, to_volume)?;
    if !valid_rel(from_path) {
        return Err(PathRefused::NotInside(from_path.to_owned()).into());
    }
    let source = vols.home.volume_dir(from_volume);
    let rel = on_disk(from_path)?;
    let mut copy = Copy {
        vols,
        volume: to_volume,
        entries: Vec::new(),
        added: Vec::new(),
    };
    copy.source(&source, &rel, from_path)?;
    if copy.entries.is_empty() {
        return Err(CommitError::Empty(format!("{from_volume}/{from_path}")));
    }
    {
        // Recorded in a turn of the commit lock, as a pack's blobs are.
        let lock = commit_lock(to_volume);
        let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
        let added: Vec<(&str, u64)> = copy.added.iter().map(|(h, n)| (h.as_str(), *n)).collect();
        vols.store.add_blobs(to_volume, &added)?;
    }
    let id = div_api::tree_digest(&copy.entries);
    let path = format!("{to_prefix}/{}", &id[..16]);
    tree::commit_tree(
        vols,
        to_volume,
        &CommitTree {
            path,
            entries: copy.entries,
        },
    )
}

/// A snapshot being made: its entries, and the blobs it wrote.
struct Copy<'v, 's> {
    vols: &'v Volumes<'s>,
    volume: &'v str,
    entries: Vec<TreeEntry>,
    added: Vec<(String, u64)>,
}

impl Copy<'_, '_> {
    /// What is at `rel` beneath `root`: a folder's tree, or one file (named as it is).
    fn source(&mut self, root: &Path, rel: &Path, shown: &str) -> Result<(), CommitError> {
        let gone = || CommitError::NoSource(shown.to_owned());
        let (parts, name) = split(rel);
        let parent = folder_beneath(root, &parts, false)
            .map_err(|_| gone())?
            .ok_or_else(gone)?;
        if name.is_empty() {
            return self.folder(parent, "");
        }
        let stat = rustix::fs::statat(&parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|_| gone())?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                let dir = open_dir(&parent, name).map_err(|_| gone())?;
                self.folder(dir, "")
            }
            FileType::RegularFile => {
                let file_name = name.to_string_lossy().into_owned();
                self.file(&parent, name, &file_name)
            }
            _ => Err(CommitError::NotAFolderOrFile(shown.to_owned())),
        }
    }

    /// Every entry of the folder `dir`, its paths under `prefix`.
    fn folder(&mut self, dir: OwnedFd, prefix: &str) -> Result<(), CommitError> {
        let mut names: Vec<(std::ffi::OsString, FileType)> = Vec::new();
        for entry in Dir::read_from(&dir).map_err(std::io::Error::from)? {
            let entry = entry.map_err(std::io::Error::from)?;
            let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            if name == "." || name == ".." {
                continue;
            }
            names.push((name, entry.file_type()));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in names {
            let path = join(prefix, &div_ship::encode_path(name.as_bytes()));
            if self.entries.len() >= MAX_ENTRIES {
                return Err(CommitError::TooManyEntries(MAX_ENTRIES));
            }
            match kind {
                FileType::Directory => {
                    let sub = open_dir(&dir, &name)?;
                    self.folder(sub, &path)?;
                }
                FileType::RegularFile => self.file(&dir, &name, &path)?,
                FileType::Symlink => {
                    let target = rustix::fs::readlinkat(&dir, &name, Vec::new())
                        .map_err(std::io::Error::from)?;
                    self.entries.push(TreeEntry {
                        path,
                        kind: EntryKind::Symlink,
                        executable: false,
                        size: 0,
                        hash: None,
                        target: Some(div_ship::encode_path(target.as_bytes()).into_owned()),
                    });
                }
                // FIFOs, sockets and devices are not a model's files.
                _ => {}
            }
        }
        Ok(())
    }

    /// The file `name` of `dir`, copied into a blob (when the volume lacks it) as `path`.
    fn file(
        &mut self,
        dir: &OwnedFd,
        name: &std::ffi::OsStr,
        path: &str,
    ) -> Result<(), CommitError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd =
            rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(std::io::Error::from)?;
        let mut file = fs::File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(());
        }
        use std::os::unix::fs::PermissionsExt;
        let executable = meta.permissions().mode() & 0o100 != 0;
        let (hash, size) = self.keep(&mut file)?;
        self.entries.push(TreeEntry {
            path: path.to_owned(),
            kind: EntryKind::File,
            executable,
            size,
            hash: Some(hash),
            target: None,
        });
        Ok(())
    }

    /// `file`'s bytes as a blob of the volume: written beside the blobs while hashed, then
    /// renamed under its hash unless the volume has it already.
    fn keep(&mut self, file: &mut fs::File) -> Result<(String, u64), CommitError> {
        let partial = self.vols.home.blob_dir(self.volume).join("partial");
        fs::create_dir_all(&partial)?;
        let tmp: PathBuf = partial.join(unique_name("snapshot"));
        let written = (|| -> std::io::Result<(String, u64)> {
            let mut out = fs::File::create(&tmp)?;
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut size = 0u64;
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n])?;
                size += n as u64;
            }
            Ok((hasher.finalize().to_hex().to_string(), size))
        })();
        let (hash, size) = match written {
            Ok(done) => done,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(crate::fault::StateError::io_while("copying a file", e).into());
            }
        };
        let blob = self.vols.home.blob_path(self.volume, &hash);
        if self.vols.store.has_blob(self.volume, &hash)? || blob.exists() {
            let _ = fs::remove_file(&tmp);
        } else {
            fs::rename(&tmp, &blob)?;
            self.added.push((hash.clone(), size));
        }
        Ok((hash, size))
    }
}

fn open_dir(dir: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

use std::os::unix::ffi::OsStrExt as _;
