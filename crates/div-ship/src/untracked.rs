//! The untracked cache: what the last walk of a work tree found untracked (and not ignored),
//! kept with the stat of every folder it read and of every ignore file that could change
//! its answer, so that a run of an unchanged project does not read its folders again. Like
//! git's untracked cache (`core.untrackedCache`), with one difference that keeps it simple:
//! it is all or nothing. Either every folder and ignore file it recorded stats the same, and
//! the walk's answer is taken as it was, or the whole tree is walked again (and the cache
//! written anew).
//!
//! Why a folder's stat says enough: creating, removing or renaming an entry in a folder
//! changes the folder's mtime and ctime; changing a file's content does not, but the content
//! of a file is not what the untracked walk answers (the hash cache looks at each file). What
//! else the answer hangs on is in the key, each stat'ed again on every use: the index (which
//! paths are tracked, which are submodules), `info/exclude`, the user's excludes file, every
//! configuration file git reads (which names the excludes file), and the `.gitignore` of each
//! folder above the shipped one.
//!
//! Not cached, so always walked: a walk that met a folder holding `.git` (a nested repository
//! or one that may become one without its parent's stat showing it), a `.gitignore` that
//! could not be stat'ed, and a walk during which anything it recorded changed in the
//! [`RACY`] before it began (a change in the same tick of the file system's clock as the
//! stat would not show).

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gix::dir::entry::Kind;
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::cache::StatKey;

/// The first bytes of an untracked cache file; the version changes with the layout.
const MAGIC: &[u8] = b"div-ship untracked cache 1\n";

/// How long before a walk anything it records must have last changed for the walk to be
/// kept: ext4's timestamps come from a clock that ticks every few milliseconds, and a folder
/// changed twice in one tick shows one mtime. Two seconds covers every Linux file system's
/// granularity that git's own racy check allows for.
pub(crate) const RACY: std::time::Duration = std::time::Duration::from_secs(2);

/// What a walk saw that its answer hangs on, recorded as it walked.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Every folder the walk read, relative to the work tree (`""` for it), with its stat
    /// taken before it was read.
    pub(crate) folders: Vec<(Vec<u8>, StatKey)>,
    /// Every `.gitignore` in those folders, relative to the work tree, with its stat
    /// (following a link, as its content is what counts).
    pub(crate) ignores: Vec<(Vec<u8>, StatKey)>,
    /// Something was met that the stats above would not show changing: a `.git` below the
    /// top, a `.gitignore` that could not be stat'ed. The walk is then not kept.
    pub(crate) unkeepable: bool,
}

impl Seen {
    pub(crate) fn merge(&mut self, other: Seen) {
        self.folders.extend(other.folders);
        self.ignores.extend(other.ignores);
        self.unkeepable |= other.unkeepable;
    }
}

/// The files the answer hangs on besides the walked folders, each stat'ed again on every use
/// (an absent one is recorded as absent: one that appears changes the key).
pub(crate) fn key_files(repo: &gix::Repository, workdir: &Path, prefix: &[u8]) -> Vec<PathBuf> {
    let mut files = vec![repo.index_path(), repo.git_dir().join("info/exclude")];
    let snapshot = repo.config_snapshot();
    match snapshot.trusted_path("core.excludesFile") {
        Ok(Some(path)) => files.push(path),
        // Unset: the default place, found as gix finds it for its exclude stack (it reads
        // `XDG_CONFIG_HOME` itself, then `HOME`): the very file the walk's rules came from.
        _ => {
            #[allow(clippy::disallowed_methods)]
            let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
            let xdg = xdg.or_else(|| gix::path::env::home_dir().map(|h| h.join(".config")));
            if let Some(xdg) = xdg {
                files.push(xdg.join("git/ignore"));
            }
        }
    }
    for section in snapshot.plumbing().sections() {
        if let Some(path) = &section.meta().path
            && !files.contains(path)
        {
            files.push(path.clone());
        }
    }
    // The `.gitignore` of the work tree and of each folder down to the shipped one's parent:
    // the walk does not read them as folders, but their rules reach below.
    let mut folder = workdir.to_owned();
    files.push(folder.join(".gitignore"));
    let components: Vec<&[u8]> = prefix
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    for component in components.iter().take(components.len().saturating_sub(1)) {
        folder.push(std::ffi::OsStr::from_bytes(component));
        files.push(folder.join(".gitignore"));
    }
    files
}

/// Each of `files` with its stat, taken now: what a kept walk's answer hangs on besides its
/// folders. Taken before the index is read and the folders walked, so that a change made
/// meanwhile leaves the key older than what the walk saw, and the next use walks again.
pub(crate) type Key = Vec<(Vec<u8>, Option<StatKey>)>;

pub(crate) fn key_of(files: &[PathBuf]) -> Key {
    files
        .iter()
        .map(|p| (p.as_os_str().as_bytes().to_vec(), follow_stat(p)))
        .collect()
}

/// A file's stat, following links; `None` when there is none.
pub(crate) fn follow_stat(path: &Path) -> Option<StatKey> {
    fs::metadata(path).ok().map(|m| StatKey::of(&m))
}

/// A kept walk: its key, what it saw, and what it found.
#[derive(Debug, PartialEq)]
pub(crate) struct Kept {
    workdir: Vec<u8>,
    prefix: Vec<u8>,
    key: Key,
    folders: Vec<(Vec<u8>, StatKey)>,
    ignores: Vec<(Vec<u8>, StatKey)>,
    found: Vec<(String, Kind)>,
}

/// Nanoseconds since the epoch of `at`, or 0 before it.
fn epoch_ns(at: std::time::SystemTime) -> i128 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

impl Kept {
    /// What a walk that began at `began` saw and found, to keep; `None` when it cannot be
    /// kept (see [`Seen::unkeepable`] and [`RACY`]).
    pub(crate) fn of_walk(
        workdir: &Path,
        prefix: &[u8],
        key: &Key,
        seen: Seen,
        found: &[(String, Kind)],
        began: std::time::SystemTime,
    ) -> Option<Kept> {
        if seen.unkeepable {
            return None;
        }
        let settled = epoch_ns(began) - i128::try_from(RACY.as_nanos()).unwrap_or(0);
        let recent = |k: &StatKey| k.mtime_ns >= settled || k.ctime_ns >= settled;
        if seen
            .folders
            .iter()
            .chain(&seen.ignores)
            .any(|(_, k)| recent(k))
            || key.iter().filter_map(|(_, k)| k.as_ref()).any(recent)
        {
            return None;
        }
        Some(Kept {
            workdir: workdir.as_os_str().as_bytes().to_vec(),
            prefix: prefix.to_vec(),
            key: key.clone(),
            folders: seen.folders,
            ignores: seen.ignores,
            found: found.to_vec(),
        })
    }

    /// What the kept walk found, if it still holds for `workdir` and `prefix`: its key is
    /// `key` (taken just before), and every folder and ignore file stats as it did.
    pub(crate) fn still_holds(
        self,
        workdir: &Path,
        prefix: &[u8],
        key: &Key,
    ) -> Option<Vec<(String, Kind)>> {
        if self.workdir != workdir.as_os_str().as_bytes()
            || self.prefix != prefix
            || self.key != *key
        {
            return None;
        }
        let top = rustix::fs::open(
            workdir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let folders = &self.folders;
        let ignores = &self.ignores;
        let same = |(rela, key): &(Vec<u8>, StatKey), follow: bool| {
            let name: &[u8] = if rela.is_empty() { b"." } else { rela };
            let flags = if follow {
                AtFlags::empty()
            } else {
                AtFlags::SYMLINK_NOFOLLOW
            };
            rustix::fs::statat(&top, std::ffi::OsStr::from_bytes(name), flags)
                .is_ok_and(|stat| StatKey::of_stat(&stat) == *key)
        };
        // Thousands of folders in a big tree: stat'ed by as many threads as there are cores.
        let threads = crate::cores::cores().min(4);
        let held = if threads < 2 || folders.len() < 1024 {
            folders.iter().all(|f| same(f, false)) && ignores.iter().all(|i| same(i, true))
        } else {
            let part = folders.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let others: Vec<_> = folders
                    .chunks(part)
                    .skip(1)
                    .map(|chunk| scope.spawn(move || chunk.iter().all(|f| same(f, false))))
                    .collect();
                let mine = folders.chunks(part).next().is_none_or(|chunk| {
                    chunk.iter().all(|f| same(f, false)) && ignores.iter().all(|i| same(i, true))
                });
                others
                    .into_iter()
                    .fold(mine, |all, t| t.join().unwrap_or(false) && all)
            })
        };
        held.then_some(self.found)
    }

    /// The bytes of the cache file.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + self.folders.len() * 96);
        out.extend_from_slice(MAGIC);
        put_bytes(&mut out, &self.workdir);
        put_bytes(&mut out, &self.prefix);
        put_len(&mut out, self.key.len());
        for (path, key) in &self.key {
            put_bytes(&mut out, path);
            match key {
                Some(key) => {
                    out.push(1);
                    put_key(&mut out, key);
                }
                None => out.push(0),
            }
        }
        for list in [&self.folders, &self.ignores] {
            put_len(&mut out, list.len());
            for (rela, key) in list {
                put_bytes(&mut out, rela);
                put_key(&mut out, key);
            }
        }
        put_len(&mut out, self.found.len());
        for (path, kind) in &self.found {
            put_bytes(&mut out, path.as_bytes());
            out.push(match kind {
                Kind::Symlink => 1,
                Kind::Repository => 2,
                _ => 0,
            });
        }
        out
    }

    /// A cache file's bytes read back; `None` for anything but what [`Kept::encode`] writes.
    fn decode(bytes: &[u8]) -> Option<Kept> {
        let mut r = Reader {
            bytes: bytes.strip_prefix(MAGIC)?,
        };
        let workdir = r.bytes()?.to_vec();
        let prefix = r.bytes()?.to_vec();
        let mut key = Vec::new();
        for _ in 0..r.len()? {
            let path = r.bytes()?.to_vec();
            let stat = match r.take::<1>()?[0] {
                0 => None,
                1 => Some(r.key()?),
                _ => return None,
            };
            key.push((path, stat));
        }
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            for _ in 0..r.len()? {
                list.push((r.bytes()?.to_vec(), r.key()?));
            }
        }
        let [folders, ignores] = lists;
        let mut found = Vec::new();
        for _ in 0..r.len()? {
            let path = String::from_utf8(r.bytes()?.to_vec()).ok()?;
            let kind = match r.take::<1>()?[0] {
                0 => Kind::File,
                1 => Kind::Symlink,
                2 => Kind::Repository,
                _ => return None,
            };
            found.push((path, kind));
        }
        r.bytes.is_empty().then_some(Kept {
            workdir,
            prefix,
            key,
            folders,
            ignores,
            found,
        })
    }

    /// Reads the cache file at `path`; `None` when there is none or it is not one.
    pub(crate) fn load(path: &Path) -> Option<Kept> {
        Kept::decode(&fs::read(path).ok()?)
    }

    /// Writes the cache file at `path` (whole, by a rename).
    pub(crate) fn save(&self, path: &Path) -> io::Result<()> {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        fs::write(&tmp, self.encode())?;
        fs::rename(&tmp, path)
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_key(out: &mut Vec<u8>, key: &StatKey) {
    out.extend_from_slice(&key.size.to_le_bytes());
    out.extend_from_slice(&key.mtime_ns.to_le_bytes());
    out.extend_from_slice(&key.ino.to_le_bytes());
    out.extend_from_slice(&key.ctime_ns.to_le_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.bytes.split_at_checked(N)?;
        self.bytes = rest;
        head.try_into().ok()
    }

    fn len(&mut self) -> Option<usize> {
        usize::try_from(u32::from_le_bytes(self.take::<4>()?)).ok()
    }

    fn bytes(&mut self) -> Option<&[u8]> {
        let len = self.len()?;
        let (head, rest) = self.bytes.split_at_checked(len)?;
        self.bytes = rest;
        Some(head)
    }

    fn key(&mut self) -> Option<StatKey> {
        Some(StatKey {
            size: u64::from_le_bytes(self.take::<8>()?),
            mtime_ns: i128::from_le_bytes(self.take::<16>()?),
            ino: u64::from_le_bytes(self.take::<8>()?),
            ctime_ns: i128::from_le_bytes(self.take::<16>()?),
        })
    }
}

/// Where the untracked cache of a shipped root lives: beside its hash cache.
pub(crate) fn file_beside(hash_cache: &Path) -> PathBuf {
    let mut name = hash_cache.as_os_str().to_owned();
    name.push(".untracked");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> StatKey {
        StatKey {
            size: n,
            mtime_ns: i128::from(n) * 7,
            ino: n + 1,
            ctime_ns: -i128::from(n),
        }
    }

    #[test]
    fn a_kept_walk_reads_back_as_written_and_nothing_else_reads_as_one() {
        let kept = Kept {
            workdir: b"/w/t".to_vec(),
            prefix: b"a/b".to_vec(),
            key: vec![
                (b"/w/t/.git/index".to_vec(), Some(key(1))),
                (b"/x".to_vec(), None),
            ],
            folders: vec![(Vec::new(), key(2)), (b"a\n\xff".to_vec(), key(3))],
            ignores: vec![(b".gitignore".to_vec(), key(4))],
            found: vec![
                ("f".to_owned(), Kind::File),
                ("l".to_owned(), Kind::Symlink),
                ("r".to_owned(), Kind::Repository),
            ],
        };
        let bytes = kept.encode();
        assert_eq!(Kept::decode(&bytes).as_ref(), Some(&kept));
        // Cut anywhere, or with a byte more, it is not a cache.
        for cut in 0..bytes.len() {
            assert_eq!(Kept::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Kept::decode(&longer), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let mut with_magic = MAGIC.to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = Kept::decode(&with_magic);
            let _ = Kept::decode(&bytes);
        }
    }
}
