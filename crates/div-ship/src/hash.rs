//! Looking at each listed path on disk, hashing files with blake3 on every core, and the hash
//! cache that lets an unchanged file go unread.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::ShipError;
use crate::git::Listed;
use crate::manifest::{EntryKind, ManifestEntry};

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
        let mut records = Vec::new();
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
        Some(blake3::Hash::from_bytes(hash).to_hex().to_string())
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
    pub(crate) entry: ManifestEntry,
    /// Files only: the stat the hash belongs to, for the cache.
    pub(crate) key: Option<StatKeyRef>,
    pub(crate) hashed: bool,
}

/// Looks at every listed path (sorted, unique) under `root` on disk, using all cores: files
/// are hashed (unless the cache has them), links read; paths gone from disk, folders and
/// special files are dropped.
pub(crate) fn look_all(
    root: &Path,
    listed: &[Listed],
    cache: &Cache,
    hashed: Option<&AtomicU64>,
) -> Result<(Vec<Looked>, HashStats), ShipError> {
    const CHUNK: usize = 64;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(16));
    let threads = threads.min(listed.len().div_ceil(CHUNK)).max(1);
    let next = AtomicUsize::new(0);
    let results: Vec<Result<Vec<(usize, Looked)>, ShipError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    let mut folder = Folder::default();
                    let mut cursor = 0;
                    loop {
                        let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if start >= listed.len() {
                            return Ok(mine);
                        }
                        for (i, item) in listed.iter().enumerate().skip(start).take(CHUNK) {
                            if let Some(looked) =
                                look(root, item, cache, hashed, &mut folder, &mut cursor)?
                            {
                                mine.push((i, looked));
                            }
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
    let mut all = Vec::with_capacity(listed.len());
    for result in results {
        all.extend(result?);
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    let mut stats = HashStats::default();
    let looked: Vec<Looked> = all.into_iter().map(|(_, l)| l).collect();
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

/// The folder a worker last looked in, held open (`O_PATH`) so that each file in it is
/// `lstat`ed by name relative to it: the kernel walks one component instead of the whole
/// path. Listed paths are sorted, so one folder's files come together.
#[derive(Debug, Default)]
struct Folder {
    /// Relative to the root; `None` before the first.
    rel: Option<OsString>,
    /// `None` when it could not be opened (gone, not a folder): then the whole path is used,
    /// which gives the same answer (not found, or the error) as before.
    fd: Option<rustix::fd::OwnedFd>,
}

impl Folder {
    /// The stat of `name` in `parent`, without following a link, as `lstat` of the whole
    /// path would give it.
    fn lstat(&mut self, root: &Path, parent: &OsStr, name: &OsStr) -> io::Result<rustix::fs::Stat> {
        use rustix::fs::{AtFlags, Mode, OFlags};
        if self.rel.as_deref() != Some(parent) {
            self.fd = rustix::fs::open(
                root.join(parent),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok();
            self.rel = Some(parent.to_owned());
        }
        match &self.fd {
            Some(fd) => Ok(rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)?),
            None => Ok(rustix::fs::lstat(root.join(parent).join(name))?),
        }
    }
}

fn look(
    root: &Path,
    item: &Listed,
    cache: &Cache,
    hashed: Option<&AtomicU64>,
    folder: &mut Folder,
    cursor: &mut usize,
) -> Result<Option<Looked>, ShipError> {
    let on_disk = crate::git::on_disk(&item.path);
    let abs = || root.join(&on_disk);
    let io_err = |source| ShipError::Io {
        path: abs(),
        source,
    };
    let (parent, name) = split_parent(&on_disk);
    let stat = match folder.lstat(root, parent, name) {
        Ok(stat) => stat,
        // A tracked file deleted from the work tree (or a file gone since the listing).
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(io_err(err)),
    };
    let file_type = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    if file_type == rustix::fs::FileType::Symlink {
        let target = fs::read_link(abs()).map_err(io_err)?;
        let target = crate::name::encode_path(target.as_os_str().as_bytes()).into_owned();
        return Ok(Some(Looked {
            entry: ManifestEntry {
                path: item.path.clone(),
                kind: EntryKind::Symlink,
                executable: false,
                size: 0,
                hash: None,
                target: Some(target),
            },
            key: None,
            hashed: false,
        }));
    }
    if file_type != rustix::fs::FileType::RegularFile {
        return Ok(None);
    }
    let key = StatKey::of_stat(&stat);
    let (hash, hashed) = match cache.get(&item.path, &key, cursor) {
        Some(hash) => (hash, false),
        None => (hash_file_counting(&abs(), hashed).map_err(io_err)?, true),
    };
    Ok(Some(Looked {
        entry: ManifestEntry {
            path: item.path.clone(),
            kind: EntryKind::File,
            executable: stat.st_mode & 0o100 != 0,
            size: key.size,
            hash: Some(hash),
            target: None,
        },
        key: Some(StatKeyRef(key)),
        hashed,
    }))
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
    hash_file_counting(path, None)
}

/// [`hash_file`], adding each chunk's bytes to `hashed` as it is read (for progress).
fn hash_file_counting(path: &Path, hashed: Option<&AtomicU64>) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = blake3::Hasher::new();
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
    Ok(hasher.finalize().to_hex().to_string())
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
