//! The untracked half of `git ls-files -co --exclude-standard`, walked the way git walks it
//! (`dir.c`, `treat_one_path`/`treat_directory`): a depth-first walk of the work tree from
//! the shipped folder, reading each folder once with `getdents64` on a descriptor opened
//! relative to its parent, and per entry:
//!
//! - `.git` is never an entry;
//! - a file or symlink with a path in the index is tracked (a hash lookup, as git's
//!   `index_file_exists`), otherwise listed unless an ignore rule excludes it;
//! - a folder an ignore rule excludes is not entered, tracked contents or not (what is
//!   tracked inside comes from the index; nothing under an excluded folder can be re-included);
//! - a folder that is a gitlink in the index (a submodule) is not entered here;
//! - a folder with tracked paths below it is entered;
//! - any other folder holding a `.git` that is a repository is a nested repository;
//!   otherwise it is entered;
//! - anything else (sockets, fifos, devices) is skipped.
//!
//! Ignore rules (`.gitignore` files, `info/exclude`, `core.excludesFile`) come from gix's
//! exclude stack, exactly as its own directory walk uses them. Only file systems that git
//! treats as case-sensitive and without Unicode precomposition take this path;
//! [`walk`] returns `None` for the others, and the caller uses gix's walk.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gix::bstr::ByteSlice;
use gix::dir::entry::Kind;
use gix::index::entry::Mode;
use rustix::fs::{AtFlags, FileType, Mode as FsMode, OFlags, RawDir};

use crate::ShipError;
use crate::cache::StatKey;
use crate::untracked::{Kept, Seen};

/// What the walk found: untracked, not ignored files and symlinks, and nested repositories,
/// as paths relative to the work tree, written as the manifest writes them
/// ([`encode_path`](crate::name::encode_path)).
#[derive(Default)]
pub(crate) struct Untracked {
    pub(crate) found: Vec<(String, Kind)>,
    /// What the walk's answer hangs on, when it is to be kept ([`crate::untracked`]).
    seen: Seen,
    /// The answer came from the untracked cache.
    pub(crate) from_cache: bool,
}

impl Untracked {
    /// Adds what another walk found (a walk of other folders).
    pub(crate) fn merge(&mut self, other: Untracked) {
        self.found.extend(other.found);
        self.seen.merge(other.seen);
    }
}

/// The untracked cache of one walk: where it is, and the files besides the walked folders
/// that its answer hangs on ([`crate::untracked::key_files`]) with their stats, taken when
/// it is made (before the index is read).
pub(crate) struct Cached {
    path: std::path::PathBuf,
    prefix: Vec<u8>,
    key: crate::untracked::Key,
}

impl Cached {
    pub(crate) fn new(repo: &gix::Repository, workdir: &Path, prefix: &str, path: &Path) -> Cached {
        let prefix = crate::name::on_disk(prefix).as_os_str().as_bytes().to_vec();
        Cached {
            key: crate::untracked::key_of(&crate::untracked::key_files(repo, workdir, &prefix)),
            path: path.to_owned(),
            prefix,
        }
    }

    /// What the kept walk found, if it still holds (on whichever thread: it reads no
    /// repository).
    pub(crate) fn held(&self, workdir: &Path) -> Option<Vec<(String, Kind)>> {
        Kept::load(&self.path)?.still_holds(workdir, &self.prefix, &self.key)
    }
}

/// [`walk_folders`], or `held`, the answer the untracked cache `cached` kept when every folder
/// and file it hangs on stats as it did ([`Cached::held`], [`crate::untracked`]); a walk is
/// kept there for the next time.
pub(crate) fn walk(
    opened: &crate::repo::Opened,
    workdir: &Path,
    index: &gix::index::File,
    prefix: &str,
    cached: Option<Cached>,
    held: Option<Vec<(String, Kind)>>,
) -> Result<Option<Untracked>, ShipError> {
    let Some(cached) = cached else {
        return walk_folders(opened, workdir, index, prefix, false);
    };
    if let Some(found) = held {
        return Ok(Some(Untracked {
            found,
            seen: Seen::default(),
            from_cache: true,
        }));
    }
    let began = std::time::SystemTime::now();
    let Some(mut walked) = walk_folders(opened, workdir, index, prefix, true)? else {
        return Ok(None);
    };
    let seen = std::mem::take(&mut walked.seen);
    let kept = Kept::of_walk(
        workdir,
        &cached.prefix,
        &cached.key,
        seen,
        &walked.found,
        began,
    );
    if let Some(kept) = kept {
        // A cache that cannot be written costs the next run a walk, nothing else.
        let _ = kept.save(&cached.path);
    }
    Ok(Some(walked))
}

/// Walks the untracked entries under `prefix` (relative to `workdir`, `""` for all) of
/// `repo`, whose index is `index`, recording what the answer hangs on when `recording`.
/// `None` when the file system needs case folding or Unicode precomposition (gix's walk
/// then does it).
fn walk_folders(
    opened: &crate::repo::Opened,
    workdir: &Path,
    index: &gix::index::File,
    prefix: &str,
    recording: bool,
) -> Result<Option<Untracked>, ShipError> {
    let repo = &opened.repo;
    let git_err = |source: Box<dyn std::error::Error + Send + Sync>| ShipError::Git {
        repo: workdir.to_owned(),
        source,
    };
    let caps = repo
        .filesystem_options()
        .map_err(|e| git_err(Box::new(e)))?;
    if caps.ignore_case || caps.precompose_unicode {
        return Ok(None);
    }
    let excludes = exclude_stack(repo, index).map_err(git_err)?;
    let tracked = Tracked::new(index);
    let mut walker = Walker::new(&tracked, excludes, repo.git_dir(), workdir, recording);
    let mut rela = Vec::with_capacity(256);
    let prefix = crate::name::on_disk(prefix);
    let prefix = prefix.as_os_str().as_bytes();
    if walker.leading_path_excluded(prefix, &mut rela) {
        // (Rare, and not kept: nothing was walked to record.)
        walker.out.seen.unkeepable = true;
        return Ok(Some(walker.out));
    }
    let root = workdir.join(OsStr::from_bytes(prefix));
    let fd = rustix::fs::open(
        &root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        FsMode::empty(),
    )
    .map_err(|e| ShipError::Io {
        path: root.clone(),
        source: e.into(),
    })?;
    walker.record_folder(&fd, &rela);
    let listing = read_listing(&fd).map_err(|e| ShipError::Io {
        path: root.clone(),
        source: e.into(),
    })?;
    if !rela.is_empty() && listing.has_dot_git() {
        walker.out.seen.unkeepable = true;
    }
    let threads = crate::cores::cores().min(8);
    if threads < 2 {
        walker.walk_listing(&fd, &listing, &mut rela);
        return walker.finish().map(Some);
    }
    // Breadth first from the shipped folder, on this thread, until there are enough folders
    // to share out: a tree whose files all sit below one folder (`test/` in test262) is then
    // still walked by every thread, not by the one that was dealt that folder.
    let mut held = vec![fd];
    let mut frontier = Vec::new();
    walker.spread(0, &held[0], &listing, &rela, &mut frontier);
    // (At most about `MOST_HELD` folders held open meanwhile: a narrow, deep tree would
    // otherwise hold one for each folder it went through, and run out of descriptors.)
    while !frontier.is_empty()
        && frontier.len() < threads * FOLDERS_PER_THREAD
        && held.len() < MOST_HELD
    {
        if walker.stopped() {
            return walker.finish().map(Some);
        }
        for folder in std::mem::take(&mut frontier) {
            let Some((fd, listing)) =
                walker.enter(&held[folder.parent], &folder.name, &folder.rela)
            else {
                continue;
            };
            held.push(fd);
            let at = held.len() - 1;
            walker.spread(at, &held[at], &listing, &folder.rela, &mut frontier);
        }
    }
    if frontier.is_empty() || walker.stopped() {
        return walker.finish().map(Some);
    }
    // The folders taken one at a time by whichever thread is free; each thread has its own
    // repository handle and exclude stack (gix's are not `Send`).
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (held, frontier, tracked, next) = (&held, &frontier, &tracked, &next);
    let take = move |walker: &mut Walker<'_, '_>| loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(folder) = frontier.get(i) else {
            return;
        };
        if walker.stopped() {
            return;
        }
        walker.folder(&held[folder.parent], &folder.name, &mut folder.rela.clone());
    };
    std::thread::scope(|scope| {
        let others: Vec<_> = (1..threads.min(frontier.len()))
            .map(|_| {
                let how = opened.how_to_reopen();
                scope.spawn(move || {
                    let repo = crate::repo::reopen(how)?;
                    let excludes = exclude_stack(&repo, index).map_err(git_err)?;
                    let mut walker =
                        Walker::new(tracked, excludes, repo.git_dir(), workdir, recording);
                    take(&mut walker);
                    walker.finish()
                })
            })
            .collect();
        take(&mut walker);
        let mut all = walker.finish()?;
        for other in others {
            let more = other.join().expect("a walking thread does not panic")?;
            all.merge(more);
        }
        Ok(Some(all))
    })
}

/// How many folders each thread should have to take before the walk is shared out.
const FOLDERS_PER_THREAD: usize = 16;

/// How many folders the breadth-first start may hold open before it shares out what it has.
const MOST_HELD: usize = 256;

/// A folder still to walk: `name` inside the held folder numbered `parent`, at `rela`.
struct Pending {
    parent: usize,
    name: Vec<u8>,
    rela: Vec<u8>,
}

/// The ignore rules of `repo` as gix's own walk reads them.
fn exclude_stack<'repo>(
    repo: &'repo gix::Repository,
    index: &gix::index::File,
) -> Result<gix::AttributeStack<'repo>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(repo.excludes(
        index,
        None,
        gix::worktree::stack::state::ignore::Source::WorktreeThenIdMappingIfNotSkipped,
    )?)
}

/// `folders` dealt round to one group per thread (at most one per folder), `others` with the
/// first group. `None` when one walk will do: one thread, or fewer than two folders.
pub(crate) fn deal<T>(folders: Vec<T>, others: Vec<T>, threads: usize) -> Option<Vec<Vec<T>>> {
    if threads < 2 || folders.len() < 2 {
        return None;
    }
    let mut groups = vec![others];
    groups.resize_with(threads.min(folders.len()), Vec::new);
    let n = groups.len();
    for (i, folder) in folders.into_iter().enumerate() {
        groups[i % n].push(folder);
    }
    Some(groups)
}

/// The paths in the index, for lookups by path: every entry's path (any stage, gitlinks
/// included), the gitlinks alone, and every folder that has an entry below it.
struct Tracked<'a> {
    paths: HashSet<&'a [u8]>,
    gitlinks: HashSet<&'a [u8]>,
    folders: HashSet<&'a [u8]>,
}

impl<'a> Tracked<'a> {
    fn new(index: &'a gix::index::File) -> Tracked<'a> {
        let entries = index.entries();
        let mut paths = HashSet::with_capacity(entries.len());
        let mut gitlinks = HashSet::new();
        let mut folders = HashSet::with_capacity(entries.len() / 4 + 1);
        let mut previous: &[u8] = &[];
        for entry in entries {
            let path: &[u8] = entry.path(index).as_bytes();
            paths.insert(path);
            if entry.mode == Mode::COMMIT {
                gitlinks.insert(path);
            }
            // Entries are sorted: a folder of this path that ends inside the part it shares with
            // the previous path is the previous path's folder too, and already in.
            let shared = path
                .iter()
                .zip(previous)
                .take_while(|(a, b)| a == b)
                .count();
            for (i, &b) in path.iter().enumerate().skip(shared) {
                if b == b'/' {
                    folders.insert(&path[..i]);
                }
            }
            previous = path;
        }
        Tracked {
            paths,
            gitlinks,
            folders,
        }
    }
}

/// One folder's entries: names back to back, with each one's end and type.
struct Listing {
    names: Vec<u8>,
    entries: Vec<(usize, usize, FileType)>,
}

impl Listing {
    fn iter(&self) -> impl Iterator<Item = (&[u8], FileType)> {
        self.entries
            .iter()
            .map(|&(start, end, kind)| (&self.names[start..end], kind))
    }

    fn has_dot_git(&self) -> bool {
        self.iter().any(|(name, _)| name == b".git")
    }
}

fn read_listing(fd: &OwnedFd) -> rustix::io::Result<Listing> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 32 * 1024];
    let mut dir = RawDir::new(fd.as_fd(), &mut buf);
    let mut listing = Listing {
        names: Vec::new(),
        entries: Vec::new(),
    };
    while let Some(entry) = dir.next() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let start = listing.names.len();
        listing.names.extend_from_slice(name);
        listing
            .entries
            .push((start, listing.names.len(), entry.file_type()));
    }
    Ok(listing)
}

struct Walker<'a, 'repo> {
    tracked: &'a Tracked<'a>,
    excludes: gix::AttributeStack<'repo>,
    git_dir: PathBuf,
    workdir: &'a Path,
    out: Untracked,
    error: Option<ShipError>,
    /// Whether to record in `out.seen` what the answer hangs on.
    recording: bool,
}

impl<'a, 'repo> Walker<'a, 'repo> {
    fn new(
        tracked: &'a Tracked<'a>,
        excludes: gix::AttributeStack<'repo>,
        git_dir: &Path,
        workdir: &'a Path,
        recording: bool,
    ) -> Self {
        Walker {
            tracked,
            excludes,
            git_dir: git_dir.to_owned(),
            workdir,
            out: Untracked::default(),
            error: None,
            recording,
        }
    }

    /// Whether an ignore rule excludes the shipped folder `prefix` or a folder above it: then
    /// nothing untracked below is listed (git's `treat_leading_path`). `rela` is left as
    /// `prefix`, or as the path up to the folder excluded.
    fn leading_path_excluded(&mut self, prefix: &[u8], rela: &mut Vec<u8>) -> bool {
        for component in prefix.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            if !rela.is_empty() {
                rela.push(b'/');
            }
            rela.extend_from_slice(component);
            if self.excluded(rela, true) {
                return true;
            }
        }
        false
    }

    /// Records the stat of the folder open as `fd`, at `rela`, before it is read.
    fn record_folder(&mut self, fd: &OwnedFd, rela: &[u8]) {
        if !self.recording {
            return;
        }
        match rustix::fs::fstat(fd) {
            Ok(stat) => self
                .out
                .seen
                .folders
                .push((rela.to_vec(), StatKey::of_stat(&stat))),
            Err(_) => self.out.seen.unkeepable = true,
        }
    }

    fn finish(self) -> Result<Untracked, ShipError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.out),
        }
    }
    /// Whether an ignore rule excludes `rela` (a folder when `is_dir`). A failure to read an
    /// ignore file is kept as the walk's error.
    fn excluded(&mut self, rela: &[u8], is_dir: bool) -> bool {
        let mode = if is_dir { Mode::DIR } else { Mode::FILE };
        match self.excludes.at_entry(rela.as_bstr(), Some(mode)) {
            Ok(platform) => platform.is_excluded(),
            Err(e) => {
                self.fail(ShipError::Git {
                    repo: self.workdir.to_owned(),
                    source: Box::new(e),
                });
                true
            }
        }
    }

    fn fail(&mut self, error: ShipError) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    fn stopped(&self) -> bool {
        self.error.is_some()
    }

    fn emit(&mut self, rela: &[u8], kind: Kind) {
        let path = crate::name::encode_path(rela).into_owned();
        self.out.found.push((path, kind));
    }

    /// The entries of the folder open as `fd`, at `rela` (relative to the work tree).
    fn walk_listing(&mut self, fd: &OwnedFd, listing: &Listing, rela: &mut Vec<u8>) {
        self.walk_entries(fd, listing, 0..listing.entries.len(), rela);
    }

    /// The entries numbered `which` of the folder open as `fd`, at `rela`.
    fn walk_entries(
        &mut self,
        fd: &OwnedFd,
        listing: &Listing,
        which: impl Iterator<Item = usize>,
        rela: &mut Vec<u8>,
    ) {
        for i in which {
            let (start, end, kind) = listing.entries[i];
            let name = &listing.names[start..end];
            if self.stopped() {
                return;
            }
            if name == b".git" {
                continue;
            }
            let len = rela.len();
            if len > 0 {
                rela.push(b'/');
            }
            rela.extend_from_slice(name);
            if self.recording && name == b".gitignore" {
                // Its content is what counts: stat'ed through a link.
                match rustix::fs::statat(fd, name, AtFlags::empty()) {
                    Ok(stat) => self
                        .out
                        .seen
                        .ignores
                        .push((rela.clone(), StatKey::of_stat(&stat))),
                    Err(_) => self.out.seen.unkeepable = true,
                }
            }
            let kind = if kind == FileType::Unknown {
                match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    Err(_) => FileType::Unknown, // gone meanwhile
                }
            } else {
                kind
            };
            match kind {
                FileType::Directory => self.folder(fd, name, rela),
                FileType::RegularFile | FileType::Symlink
                    if !self.tracked.paths.contains(rela.as_slice())
                        && !self.excluded(rela, false) =>
                {
                    let kind = if kind == FileType::Symlink {
                        Kind::Symlink
                    } else {
                        Kind::File
                    };
                    self.emit(rela, kind);
                }
                _ => {}
            }
            rela.truncate(len);
        }
    }

    /// The folder `name` inside the one open as `parent`, at `rela`.
    fn folder(&mut self, parent: &OwnedFd, name: &[u8], rela: &mut Vec<u8>) {
        if let Some((fd, listing)) = self.enter(parent, name, rela) {
            self.walk_listing(&fd, &listing, rela);
        }
    }

    /// The folder `name` inside the one open as `parent`, at `rela`, opened and read when it
    /// is walked into: not when an ignore rule excludes it, it is a submodule, it cannot be
    /// read, or it is a nested repository (then listed as one).
    fn enter(&mut self, parent: &OwnedFd, name: &[u8], rela: &[u8]) -> Option<(OwnedFd, Listing)> {
        if self.tracked.gitlinks.contains(rela) || self.excluded(rela, true) {
            return None;
        }
        // Gone meanwhile, or not readable: git skips it too. (Not kept: one made readable
        // again would not change its parent's stat.)
        let opened = rustix::fs::openat(
            parent,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            FsMode::empty(),
        );
        let Ok(fd) = opened else {
            self.out.seen.unkeepable = true;
            return None;
        };
        self.record_folder(&fd, rela);
        let Ok(listing) = read_listing(&fd) else {
            self.out.seen.unkeepable = true;
            return None;
        };
        if listing.has_dot_git() {
            // A folder that holds `.git` may become a repository, or stop being one,
            // without its stat changing.
            self.out.seen.unkeepable = true;
        }
        if !self.tracked.folders.contains(rela)
            && listing.has_dot_git()
            && self.is_nested_repository(rela)
        {
            self.emit(rela, Kind::Repository);
            return None;
        }
        Some((fd, listing))
    }

    /// The entries of the folder open as `fd` (held as number `at`), at `rela`: all but its
    /// subfolders walked now, its subfolders added to `frontier` to be walked later.
    fn spread(
        &mut self,
        at: usize,
        fd: &OwnedFd,
        listing: &Listing,
        rela: &[u8],
        frontier: &mut Vec<Pending>,
    ) {
        let (folders, others): (Vec<usize>, Vec<usize>) =
            (0..listing.entries.len()).partition(|&i| listing.entries[i].2 == FileType::Directory);
        self.walk_entries(fd, listing, others.into_iter(), &mut rela.to_vec());
        for i in folders {
            let (start, end, _) = listing.entries[i];
            let name = &listing.names[start..end];
            if name == b".git" {
                continue;
            }
            let mut path = Vec::with_capacity(rela.len() + 1 + name.len());
            path.extend_from_slice(rela);
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            frontier.push(Pending {
                parent: at,
                name: name.to_vec(),
                rela: path,
            });
        }
    }

    /// Whether `rela/.git` is a repository other than this one (as gix's walk decides it).
    fn is_nested_repository(&self, rela: &[u8]) -> bool {
        let dot_git = self
            .workdir
            .join(OsStr::from_bytes(rela))
            .join(gix::discover::DOT_GIT_DIR);
        if gix::discover::is_git(&dot_git).is_err() {
            return false;
        }
        let ours = self.git_dir.canonicalize().ok();
        dot_git.canonicalize().ok() != ours || ours.is_none()
    }
}
