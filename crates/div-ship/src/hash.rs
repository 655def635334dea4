//! Looking at each listed path on disk and hashing files with blake3 on every core; a file
//! the hash cache (`cache.rs`) has unchanged goes unread.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ShipError;
use crate::cache::{Cache, StatKey, StatKeyRef};
use crate::git::Listed;
use crate::manifest::{EntryKind, TreeEntry};

/// How much hashing a [`collect`](crate::collect) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashStats {
    /// Files whose content was read and hashed.
    pub hashed_files: u64,
    /// Bytes read to hash them.
    pub hashed_bytes: u64,
    /// Files whose hash came from the cache, unread.
    pub cached_files: u64,
    /// Whether the untracked files came from the untracked cache, no folder read for them
    /// (an unchanged tree, inside a git repository).
    pub untracked_from_cache: bool,
}

/// What looking at one listed path gave.
#[derive(Debug)]
pub(crate) struct Looked {
    pub(crate) entry: TreeEntry,
    /// Files only: the stat the hash belongs to, for the cache.
    pub(crate) key: Option<StatKeyRef>,
    pub(crate) hashed: bool,
    /// Files hashed now and kept ([`Keep`]): the bytes that were hashed.
    pub(crate) data: Option<bytes::Bytes>,
}

/// How many bytes of the files hashed to keep, for an upload that then sends them without
/// reading them again: files of at most [`KEEP_FILE_MAX`] bytes, while `left` lasts.
#[derive(Debug)]
pub(crate) struct Keep {
    left: AtomicU64,
}

/// The largest file whose bytes are kept: what a pack carries (`div_api::PACK_BLOB_MAX_BYTES`).
pub(crate) const KEEP_FILE_MAX: u64 = 1 << 20;

/// Kept bytes are read into buffers of this size (a hashing thread's own, each file a part of
/// one): one allocation per 4 MiB of small files rather than one each, which grew the
/// thread's heap a page at a time (33,000 `mprotect` calls for 57,000 files).
const KEEP_CHUNK: usize = 4 << 20;

impl Keep {
    pub(crate) fn new(bytes: u64) -> Keep {
        Keep {
            left: AtomicU64::new(bytes),
        }
    }

    /// Takes `size` bytes of what is left, if that many are.
    fn take(&self, size: u64) -> bool {
        size <= KEEP_FILE_MAX
            && self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(size)
                })
                .is_ok()
    }
}

/// Looks at every listed path (sorted, unique) under `root` on disk, using all cores: files
/// are hashed (unless the cache has them), links read; paths gone from disk, folders and
/// special files are dropped. Each path is moved from `listed` into what was found there.
pub(crate) fn look_all(
    root: &Path,
    listed: Vec<Listed>,
    cache: &Cache,
    hashed: Option<&AtomicU64>,
    keep: &Keep,
) -> Result<(Vec<Looked>, HashStats), ShipError> {
    let threads = crate::cores::cores().min(16);
    // Each worker takes about sixteen chunks, so that none is left alone with the last big
    // files; no chunk is longer than 512 paths, and none shorter than 16. A worker reaches
    // each chunk's first folder afresh from the folders it holds (the chunk before it went to
    // another worker): 64 paths a chunk opened 5,815 folders for test262's 4,838, 512 opens
    // fewer.
    let chunk = (listed.len() / (threads * 16)).clamp(16, 512);
    let threads = threads.min(listed.len().div_ceil(chunk)).max(1);
    // One slot per listed path, filled in place by whichever worker takes its chunk: no
    // worker's list grows and is copied, and nothing is sorted back into order after.
    let mut slots: Vec<Option<Looked>> = Vec::with_capacity(listed.len());
    slots.resize_with(listed.len(), || None);
    let work = std::sync::Mutex::new(listed.chunks(chunk).zip(slots.chunks_mut(chunk)));
    let results: Vec<Result<(), ShipError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut folder = Folder::default();
                    let mut cursor = 0;
                    let mut chunk = bytes::BytesMut::new();
                    loop {
                        let next = work.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let Some((items, out)) = next else {
                            return Ok(());
                        };
                        for (item, slot) in items.iter().zip(out) {
                            *slot = look(
                                root,
                                item,
                                cache,
                                (hashed, keep, &mut chunk),
                                &mut folder,
                                &mut cursor,
                            )?;
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a hashing thread does not panic"))
            .collect()
    });
    for result in results {
        result?;
    }
    for (slot, item) in slots.iter_mut().zip(listed) {
        if let Some(looked) = slot {
            looked.entry.path = item.path;
        }
    }
    // `filter_map` (not `flatten`) so that the slots' own memory is reused for the answer:
    // 57,000 of them are 10 MB, which `flatten` copied into new pages.
    #[allow(clippy::filter_map_identity)]
    let looked: Vec<Looked> = slots.into_iter().filter_map(|slot| slot).collect();
    let mut stats = HashStats::default();
    for l in &looked {
        if l.hashed {
            stats.hashed_files += 1;
            stats.hashed_bytes += l.entry.size;
        } else if l.entry.kind == EntryKind::File {
            stats.cached_files += 1;
        }
    }
    Ok((looked, stats))
}

/// The folders down to the one a worker last looked in, held open (`O_PATH`), so that each
/// file is `lstat`ed by name relative to its folder, and the next folder is reached from the
/// nearest one held: listed paths are sorted, so one folder's files come together and the
/// next folder is most often a sibling, one `openat` away.
///
/// No link is followed on the way, as git follows none (`has_symlink_leading_path`): a path
/// below a link, or below something that is no longer a folder, is not there.
#[derive(Debug, Default)]
struct Folder {
    /// Outermost first, the root (`""`) at the bottom: each folder's path relative to the
    /// root, and its descriptor.
    open: Vec<(Vec<u8>, rustix::fd::OwnedFd)>,
}

impl Folder {
    /// The folder `parent` (relative to `root`), held open.
    fn reach(&mut self, root: &Path, parent: &OsStr) -> io::Result<&rustix::fd::OwnedFd> {
        use rustix::fs::{Mode, OFlags};
        let parent = parent.as_bytes();
        if self.open.is_empty() {
            let fd = rustix::fs::open(
                root,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            self.open.push((Vec::new(), fd));
        }
        // Back up to the nearest folder held that `parent` is in (the root at least).
        while self.open.len() > 1 && !within(parent, &self.open[self.open.len() - 1].0) {
            self.open.pop();
        }
        let held = self.open[self.open.len() - 1].0.len();
        let rest = &parent[held..];
        let mut at = held;
        for name in rest.split(|&b| b == b'/') {
            let start = at;
            at += name.len() + 1;
            if name.is_empty() {
                continue;
            }
            let end = start + name.len();
            let (_, dir) = &self.open[self.open.len() - 1];
            let fd = rustix::fs::openat(
                dir,
                OsStr::from_bytes(name),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| match e {
                // A link, or something that is no longer a folder: nothing is below it.
                rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP => {
                    io::Error::from(io::ErrorKind::NotFound)
                }
                e => e.into(),
            })?;
            self.open.push((parent[..end].to_vec(), fd));
        }
        Ok(&self.open[self.open.len() - 1].1)
    }
}

/// Whether the relative path `path` is the folder `folder` or inside it.
fn within(path: &[u8], folder: &[u8]) -> bool {
    folder.is_empty()
        || path
            .strip_prefix(folder)
            .is_some_and(|rest| rest.is_empty() || rest.first() == Some(&b'/'))
}

fn look(
    root: &Path,
    item: &Listed,
    cache: &Cache,
    (hashed, keep, chunk): (Option<&AtomicU64>, &Keep, &mut bytes::BytesMut),
    folder: &mut Folder,
    cursor: &mut usize,
) -> Result<Option<Looked>, ShipError> {
    let on_disk = crate::name::on_disk(&item.path);
    let abs = || root.join(&on_disk);
    let io_err = |source| ShipError::Io {
        path: abs(),
        source,
    };
    let (parent, name) = split_parent(&on_disk);
    let dir = match folder.reach(root, parent) {
        Ok(dir) => dir,
        // A tracked file whose folder was deleted, or replaced by a link or a file.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(io_err(err)),
    };
    // Nothing in the cache (a first ship): every file is read, so each is opened at once and
    // looked at through its descriptor, one call fewer than looking first (a link refuses to
    // open, and is looked at as below).
    if cache.len() == 0 {
        match open_at(dir, name) {
            Ok(file) => {
                let stat = rustix::fs::fstat(&file).map_err(|e| io_err(e.into()))?;
                if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                    != rustix::fs::FileType::RegularFile
                {
                    return Ok(None);
                }
                let key = StatKey::of_stat(&stat);
                let (hash, data) =
                    hash_open(file, hashed, (keep, chunk), key.size).map_err(io_err)?;
                return Ok(Some(file_looked(&stat, key, hash, true, data)));
            }
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(None),
            // A link (`O_NOFOLLOW`), or a file this user may not read: looked at as below.
            Err(_) => {}
        }
    }
    let stat = match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        // A tracked file deleted from the work tree (or a file gone since the listing).
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(None),
        Err(err) => return Err(io_err(err.into())),
    };
    let file_type = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    if file_type == rustix::fs::FileType::Symlink {
        let target = rustix::fs::readlinkat(dir, name, Vec::new()).map_err(|e| io_err(e.into()))?;
        let target = crate::name::encode_path(target.as_bytes()).into_owned();
        return Ok(Some(Looked {
            entry: TreeEntry {
                path: String::new(), // moved in by `look_all`
                kind: EntryKind::Symlink,
                executable: false,
                size: 0,
                hash: None,
                target: Some(target),
            },
            key: None,
            hashed: false,
            data: None,
        }));
    }
    if file_type != rustix::fs::FileType::RegularFile {
        return Ok(None);
    }
    let key = StatKey::of_stat(&stat);
    let (hash, hashed, data) = match cache.get(&item.path, &key, cursor) {
        Some(hash) => (hash, false, None),
        None => match hash_at(dir, name, hashed, (keep, chunk), key.size).map_err(io_err)? {
            Some((hash, data)) => (hash, true, data),
            // Replaced by something that is not a file since it was looked at.
            None => return Ok(None),
        },
    };
    Ok(Some(file_looked(&stat, key, hash, hashed, data)))
}

/// What looking at a plain file gave: its entry (mode from `stat`), the stat its hash
/// belongs to, whether it was hashed now, and its bytes when kept.
fn file_looked(
    stat: &rustix::fs::Stat,
    key: StatKey,
    hash: String,
    hashed: bool,
    data: Option<bytes::Bytes>,
) -> Looked {
    Looked {
        entry: TreeEntry {
            path: String::new(), // moved in by `look_all`
            kind: EntryKind::File,
            executable: stat.st_mode & 0o100 != 0,
            size: key.size,
            hash: Some(hash),
            target: None,
        },
        key: Some(StatKeyRef(key)),
        hashed,
        data,
    }
}

/// The hash of the file `name` in the folder `dir`, opened without following a link and
/// without waiting (a fifo put there since it was looked at would block a read forever);
/// `None` when it is no longer a plain file. A file of `size` bytes (as it was looked at)
/// that `keep` takes is read whole and its bytes returned with the hash, when it still holds
/// that many, read into `chunk` (the calling thread's buffer, [`KEEP_CHUNK`]).
fn hash_at(
    dir: &rustix::fd::OwnedFd,
    name: &OsStr,
    hashed: Option<&AtomicU64>,
    (keep, chunk): (&Keep, &mut bytes::BytesMut),
    size: u64,
) -> io::Result<Option<(String, Option<bytes::Bytes>)>> {
    let file = match open_at(dir, name) {
        Ok(file) => file,
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    hash_open(file, hashed, (keep, chunk), size).map(Some)
}

/// The file `name` in the folder `dir`, opened to read without following a link and without
/// waiting (a fifo put there since it was looked at would block a read forever).
fn open_at(dir: &rustix::fd::OwnedFd, name: &OsStr) -> rustix::io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
}

/// The hash of the plain file `file` of `size` bytes (as it was looked at), and its bytes
/// when `keep` takes them and it still holds that many ([`hash_at`]).
fn hash_open(
    mut file: File,
    hashed: Option<&AtomicU64>,
    (keep, chunk): (&Keep, &mut bytes::BytesMut),
    size: u64,
) -> io::Result<(String, Option<bytes::Bytes>)> {
    if keep.take(size) {
        use std::io::Read;
        // One byte more than expected is asked for, and no more: a file still growing (a log
        // being written) is hashed on as a stream, never held whole. A read that gives the
        // size the file was looked at with, short of what was asked, met the end of the file
        // (a plain file's read is short only there): no second read to see it end.
        let want = usize::try_from(size).unwrap_or(usize::MAX - 1) + 1;
        if chunk.capacity() < want {
            *chunk = bytes::BytesMut::with_capacity(KEEP_CHUNK.max(want));
        }
        chunk.resize(want, 0);
        let mut got = 0;
        while got < want {
            match file.read(&mut chunk[got..want]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    chunk.clear();
                    return Err(e);
                }
            }
            if got as u64 == size {
                break;
            }
        }
        let data = chunk.split_to(got).freeze();
        chunk.clear();
        if let Some(counter) = hashed {
            counter.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        if data.len() as u64 == size {
            let hash = blake3::hash(&data).to_hex().as_str().to_owned();
            return Ok((hash, Some(data)));
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(&data);
        return hash_rest(hasher, file, hashed).map(|hash| (hash, None));
    }
    hash_reader(file, hashed).map(|hash| (hash, None))
}

/// A relative path's folder (`""` at the top) and name, as bytes.
fn split_parent(path: &Path) -> (&OsStr, &OsStr) {
    let bytes = path.as_os_str().as_bytes();
    match bytes.iter().rposition(|&b| b == b'/') {
        Some(at) => (
            OsStr::from_bytes(&bytes[..at]),
            OsStr::from_bytes(&bytes[at + 1..]),
        ),
        None => (OsStr::new(""), path.as_os_str()),
    }
}

/// blake3 of a file's content, lowercase hex, read in bounded chunks.
pub fn hash_file(path: &Path) -> io::Result<String> {
    hash_reader(File::open(path)?, None)
}

/// blake3 of what `file` holds from where it is, adding what is read to `hashed`.
fn hash_reader(file: File, hashed: Option<&AtomicU64>) -> io::Result<String> {
    hash_rest(blake3::Hasher::new(), file, hashed)
}

/// `hasher`, given what `file` holds from where it is, finished; what is read is added to
/// `hashed`.
fn hash_rest(
    mut hasher: blake3::Hasher,
    mut file: File,
    hashed: Option<&AtomicU64>,
) -> io::Result<String> {
    match hashed {
        None => {
            hasher.update_reader(&mut file)?;
        }
        Some(counter) => {
            let mut counting = Counting {
                inner: file,
                counter,
            };
            hasher.update_reader(&mut counting)?;
        }
    }
    Ok(hasher.finalize().to_hex().as_str().to_owned())
}

/// A reader that adds what it reads to a counter.
struct Counting<'a, R> {
    inner: R,
    counter: &'a AtomicU64,
}

impl<R: io::Read> io::Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fifo put where a file was looked at (the listing saw a plain file, then it was
    /// swapped) is opened without waiting and left out, where a plain open would block
    /// forever on a fifo no one writes to.
    #[test]
    fn a_fifo_swapped_in_for_a_file_is_left_out_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(tmp.path().join("result.json"))
            .status()
            .unwrap();
        assert!(made.success());
        let dir = rustix::fs::open(
            tmp.path(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let keep = Keep::new(1 << 20);
            let _ = tx.send(
                hash_at(
                    &dir,
                    OsStr::new("result.json"),
                    None,
                    (&keep, &mut bytes::BytesMut::new()),
                    0,
                )
                .map_err(|e| e.kind()),
            );
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("hashing a fifo blocked");
        assert_eq!(got, Ok(None));
        // A file through a link is not followed either.
        std::fs::write(tmp.path().join("real"), "x").unwrap();
        std::os::unix::fs::symlink("real", tmp.path().join("link")).unwrap();
        let dir = rustix::fs::open(
            tmp.path(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let keep = Keep::new(1 << 20);
        assert_eq!(
            hash_at(
                &dir,
                OsStr::new("link"),
                None,
                (&keep, &mut bytes::BytesMut::new()),
                1
            )
            .unwrap(),
            None
        );
        let x = blake3::hash(b"x").to_hex().as_str().to_owned();
        assert_eq!(
            hash_at(
                &dir,
                OsStr::new("real"),
                None,
                (&Keep::new(0), &mut bytes::BytesMut::new()),
                1
            )
            .unwrap(),
            Some((x.clone(), None))
        );
        assert_eq!(
            hash_at(
                &dir,
                OsStr::new("real"),
                None,
                (&keep, &mut bytes::BytesMut::new()),
                1
            )
            .unwrap(),
            Some((x, Some(bytes::Bytes::from_static(b"x"))))
        );
    }

    /// The bytes of a small file are kept with its hash while the budget lasts, and only when
    /// they are as many as the file had when it was looked at (one that changed meanwhile is
    /// hashed as it is read, and read again to be sent).
    #[test]
    fn a_small_files_bytes_are_kept_while_the_budget_lasts_and_only_whole() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a"), "12345").unwrap();
        std::fs::write(
            tmp.path().join("big"),
            vec![1u8; (KEEP_FILE_MAX + 1) as usize],
        )
        .unwrap();
        let dir = rustix::fs::open(
            tmp.path(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let five = blake3::hash(b"12345").to_hex().as_str().to_owned();
        let keep = Keep::new(8);
        let hashed = AtomicU64::new(0);
        let got = hash_at(
            &dir,
            OsStr::new("a"),
            Some(&hashed),
            (&keep, &mut bytes::BytesMut::new()),
            5,
        )
        .unwrap();
        assert_eq!(
            got,
            Some((five.clone(), Some(bytes::Bytes::from_static(b"12345"))))
        );
        assert_eq!(hashed.load(Ordering::Relaxed), 5);
        // 3 bytes of budget left: not enough for five.
        let got = hash_at(
            &dir,
            OsStr::new("a"),
            None,
            (&keep, &mut bytes::BytesMut::new()),
            5,
        )
        .unwrap();
        assert_eq!(got, Some((five.clone(), None)));
        // Looked at when it had 4 bytes: hashed as read, not kept.
        let got = hash_at(
            &dir,
            OsStr::new("a"),
            None,
            (&Keep::new(100), &mut bytes::BytesMut::new()),
            4,
        )
        .unwrap();
        assert_eq!(got, Some((five.clone(), None)));
        // Looked at when it had 2: no more than 3 bytes are held, the rest hashed as read.
        let got = hash_at(
            &dir,
            OsStr::new("a"),
            None,
            (&Keep::new(100), &mut bytes::BytesMut::new()),
            2,
        )
        .unwrap();
        assert_eq!(got, Some((five, None)));
        // Past a pack's largest blob: never kept.
        let big = hash_at(
            &dir,
            OsStr::new("big"),
            None,
            (&Keep::new(u64::MAX), &mut bytes::BytesMut::new()),
            KEEP_FILE_MAX + 1,
        )
        .unwrap()
        .unwrap();
        assert_eq!(big.1, None);
    }

    #[test]
    fn within_is_by_whole_names() {
        assert!(within(b"a/b", b""));
        assert!(within(b"a/b", b"a"));
        assert!(within(b"a/b", b"a/b"));
        assert!(!within(b"a/bc", b"a/b"));
        assert!(!within(b"ab", b"a"));
        assert!(!within(b"", b"a"));
        assert!(within(b"", b""));
    }
}
