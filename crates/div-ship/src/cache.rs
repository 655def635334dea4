//! The hash cache that lets an unchanged file go unread: a file's hash kept with its stat,
//! as git's index keeps one, in a compact binary file per shipped root.

use std::fs;
use std::io;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the cache keys a file's hash on, like git's index: any change re-hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatKey {
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ino: u64,
    pub(crate) ctime_ns: i128,
}

impl StatKey {
    /// The same as [`StatKey::of`], from `lstat`'s answer.
    #[allow(clippy::unnecessary_cast, trivial_numeric_casts)]
    pub(crate) fn of_stat(stat: &rustix::fs::Stat) -> StatKey {
        // The fields' types differ between architectures; every value fits an `i128`.
        let ns = |s: i128, ns: i128| s * 1_000_000_000 + ns;
        StatKey {
            size: u64::try_from(stat.st_size).unwrap_or(0),
            mtime_ns: ns(stat.st_mtime as i128, stat.st_mtime_nsec as i128),
            ino: stat.st_ino as u64,
            ctime_ns: ns(stat.st_ctime as i128, stat.st_ctime_nsec as i128),
        }
    }

    pub(crate) fn of(meta: &fs::Metadata) -> StatKey {
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
    pub(crate) fn get(&self, path: &str, key: &StatKey, cursor: &mut usize) -> Option<String> {
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

/// A file's stat as the cache records it, handed back to [`save_cache`] with its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatKeyRef(pub(crate) StatKey);

/// Where the cache for a shipped root could live inside `cache_dir`: one file per root, named
/// by the blake3 of the root's path (so two checkouts never share one).
pub fn cache_file_for(cache_dir: &Path, root: &Path) -> PathBuf {
    let name = blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex();
    cache_dir.join(format!("{}.cache", &name[..16]))
}
