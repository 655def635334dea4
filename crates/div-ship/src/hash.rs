//! Looking at each listed path on disk, hashing files with blake3 on every core, and the hash
//! cache that lets an unchanged file go unread.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ShipError;
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
}

/// What the cache keys a file's hash on, like git's index: any change re-hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatKey {
    size: u64,
    mtime_ns: i128,
    ino: u64,
    ctime_ns: i128,
}

impl StatKey {
    /// The same as [`StatKey::of`], from `lstat`'s answer.
    #[allow(clippy::unnecessary_cast, trivial_numeric_casts)]
    fn of_stat(stat: &rustix::fs::Stat) -> StatKey {
        // The fields' types differ between architectures; every value fits an `i128`.
        let ns = |s: i128, ns: i128| s * 1_000_000_000 + ns;
        StatKey {
            size: u64::try_from(stat.st_size).unwrap_or(0),
            mtime_ns: ns(stat.st_mtime as i128, stat.st_mtime_nsec as i128),
            ino: stat.st_ino as u64,
            ctime_ns: ns(stat.st_ctime as i128, stat.st_ctime_nsec as i128),
        }
    }

    fn of(meta: &fs::Metadata) -> StatKey {
        StatKey {
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ino: meta.ino(),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

/// The first bytes of a cache file; the version changes with the layout.
const CACHE_MAGIC: &[u8] = b"div-ship hash cache 2\n";

/// The bytes of one record after its path: size, mtime, inode, ctime, blake3.
const RECORD_TAIL: usize = 8 + 16 + 8 + 16 + 32;

/// The hash cache as read from its file, a compact binary layout that loads without parsing
/// text: [`CACHE_MAGIC`], the root's bytes, NUL, then per file, sorted by path: the path's
/// length (`u32`) and bytes, size (`u64`), mtime and ctime (`i128` ns), inode (`u64`), all
/// little-endian, and the raw 32-byte blake3. Kept as read, with each record's place, so that
/// a worker going through sorted paths finds each one next to the last one it found, without
/// hashing or allocating.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    bytes: Vec<u8>,
    records: Vec<Cached>,
    /// When the cache file was last written (its mtime, ns): a file modified at or after it
    /// may have changed after it was hashed without its stat showing it ("racy", as git says).
    written_ns: i128,
}

/// One record of the cache: where its path and hash are in the bytes, and its stat.
#[derive(Debug)]
struct Cached {
    path: Range<usize>,
    hash: usize,
    key: StatKey,
}

/// The next `N` bytes of `bytes` from `*at`, moving past them.
fn take<const N: usize>(bytes: &[u8], at: &mut usize) -> Option<[u8; N]> {
    let end = at.checked_add(N)?;
    let taken = bytes.get(*at..end)?.try_into().ok()?;
    *at = end;
    Some(taken)
}

impl Cache {
    /// Reads the cache for `root` from `path`; anything missing, unreadable, for another root
    /// or malformed gives an empty cache (a cache is only ever an optimisation).
    pub(crate) fn load(path: &Path, root: &Path) -> Cache {
        let Ok(bytes) = fs::read(path) else {
            return Cache::default();
        };
        let Ok(meta) = fs::metadata(path) else {
            return Cache::default();
        };
        let written_ns = StatKey::of(&meta).mtime_ns;
        Cache::parse(bytes, root, written_ns).unwrap_or_default()
    }

    fn parse(bytes: Vec<u8>, root: &Path, written_ns: i128) -> Option<Cache> {
        let rest = bytes.strip_prefix(CACHE_MAGIC)?;
        let root = root.as_os_str().as_encoded_bytes();
        if rest.get(..root.len())? != root || rest.get(root.len()) != Some(&0) {
            return None;
        }
        let mut at = CACHE_MAGIC.len() + root.len() + 1;
        // Room for as many records as the bytes could hold (each at least its length and
        // tail): never grown and copied; what is not filled is never touched.
        let mut records = Vec::with_capacity((bytes.len() - at) / (4 + RECORD_TAIL));
        while at < bytes.len() {
            let len = usize::try_from(u32::from_le_bytes(take(&bytes, &mut at)?)).ok()?;
            let path = at..at.checked_add(len)?;
            at = path.end;
            if bytes.len() < at.checked_add(RECORD_TAIL)? {
                return None;
            }
            let key = StatKey {
                size: u64::from_le_bytes(take(&bytes, &mut at)?),
                mtime_ns: i128::from_le_bytes(take(&bytes, &mut at)?),
                ino: u64::from_le_bytes(take(&bytes, &mut at)?),
                ctime_ns: i128::from_le_bytes(take(&bytes, &mut at)?),
            };
            records.push(Cached {
                path,
                hash: at,
                key,
            });
            at += 32;
        }
        let path = |r: &Cached| &bytes[r.path.clone()];
        if !records.is_sorted_by(|a, b| path(a) <= path(b)) {
            records.sort_unstable_by(|a, b| path(a).cmp(path(b)));
        }
        Some(Cache {
            bytes,
            records,
            written_ns,
        })
    }

    /// How many files it holds.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    fn path(&self, record: &Cached) -> &[u8] {
        &self.bytes[record.path.clone()]
    }

    /// The cached hash of `path` (lowercase hex), if its stat is unchanged and it is not
    /// racy. `cursor` is where the last lookup ended: looking up sorted paths, each is found
    /// there at once.
    fn get(&self, path: &str, key: &StatKey, cursor: &mut usize) -> Option<String> {
        let path = path.as_bytes();
        let i = match self.records.get(*cursor) {
            Some(record) if self.path(record) == path => *cursor,
            _ => self
                .records
                .binary_search_by(|record| self.path(record).cmp(path))
                .ok()?,
        };
        *cursor = i + 1;
        let record = &self.records[i];
        if record.key != *key || key.mtime_ns >= self.written_ns {
            return None;
        }
        let hash: [u8; 32] = self.bytes[record.hash..record.hash + 32].try_into().ok()?;
        Some(blake3::Hash::from_bytes(hash).to_hex().as_str().to_owned())
    }
}

/// Writes the cache for `root` to `path` (a temporary sibling renamed into place); `records`
/// are sorted by path, their hashes lowercase hex.
pub(crate) fn save_cache(
    path: &Path,
    root: &Path,
    records: &[(&str, StatKeyRef, &str)],
) -> io::Result<()> {
    let root = root.as_os_str().as_encoded_bytes();
    let mut out = Vec::with_capacity(
        CACHE_MAGIC.len() + root.len() + 1 + records.len() * (4 + 32 + RECORD_TAIL),
    );
    out.extend_from_slice(CACHE_MAGIC);
    out.extend_from_slice(root);
    out.push(0);
    for (file, key, hash) in records {
        let key = key.0;
        let Ok(hash) = blake3::Hash::from_hex(hash) else {
            continue; // never: the hashes are blake3's own
        };
        let Ok(len) = u32::try_from(file.len()) else {
            continue; // a path this long is not cached, only hashed again
        };
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(file.as_bytes());
        out.extend_from_slice(&key.size.to_le_bytes());
        out.extend_from_slice(&key.mtime_ns.to_le_bytes());
        out.extend_from_slice(&key.ino.to_le_bytes());
        out.extend_from_slice(&key.ctime_ns.to_le_bytes());
        out.extend_from_slice(hash.as_bytes());
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    fs::write(&tmp, &out)?;
    fs::rename(&tmp, path)
}

/// A file's stat as the cache records it (opaque outside this module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatKeyRef(StatKey);

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
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(16));
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

/// Where the cache for a shipped root could live inside `cache_dir`: one file per root, named
/// by the blake3 of the root's path (so two checkouts never share one).
pub fn cache_file_for(cache_dir: &Path, root: &Path) -> PathBuf {
    let name = blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex();
    cache_dir.join(format!("{}.cache", &name[..16]))
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
