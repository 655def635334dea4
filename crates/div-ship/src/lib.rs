//! What div ships: the git set via gix, the walk outside a repository, the manifest and code
//! id, hashing with its cache, the upload plan, and writing a manifest back out on the server.
//!
//! - [`collect()`] lists and hashes a directory into a [`Shipment`]: inside a git repository
//!   exactly what `git ls-files --cached --others --exclude-standard` prints there (submodules
//!   walked for their own sets), outside one everything but [`SKIPPED_NAMES`].
//! - [`Manifest`] is the sorted list of [`TreeEntry`]s (div-spec's, the very entries the API
//!   commits); [`Manifest::short_id`] is the code id users see (`9f31c2ab`).
//! - [`UploadPlan`] says which blobs to send, given what the volume lacks.
//! - [`materialise()`] and [`validate_entries()`] are the server side.
//!
//! The rules and the reasons for them are in `docs/shipping.md`.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::path::Path;
//!
//! let options = div_ship::ShipOptions {
//!     cache: Some("/tmp/div-ship.cache".into()),
//!     ..Default::default()
//! };
//! let shipment = div_ship::collect(Path::new("."), &options)?;
//! eprintln!("{}", shipment.summary_line("very-cool-classifier-code"));
//! let missing: Vec<String> = Vec::new(); // what the volume says it lacks
//! let plan = div_ship::UploadPlan::new(&shipment, &missing, &BTreeMap::new());
//! assert_eq!(plan.total_bytes, 0);
//! # Ok::<(), div_ship::ShipError>(())
//! ```

use std::io;
use std::path::{Path, PathBuf};

mod cache;
mod cores;
mod git;
mod git_walk;
mod hash;
mod manifest;
mod materialise;
mod name;
mod plan;
mod repo;
mod untracked;
mod walk;

pub use cache::cache_file_for;
pub use hash::{HashStats, hash_file};
pub use manifest::{Digests, EntryKind, Manifest, ManifestEntry, TreeEntry};
pub use materialise::{
    EXECUTABLE_TWIN_SUFFIX, MaterialiseError, executable_blob, link_into, materialise,
    materialise_linked, name_unnamed_file, validate_entries,
};
pub use name::{decode_path, display_path, encode_path, fs_path};
pub use plan::{PlannedBlob, UploadPlan};
pub use walk::{SKIPPED_NAMES, is_skipped};

/// A shipment this big (bytes) deserves a word before it is uploaded: 100 MB.
pub const LARGE_SHIPMENT_BYTES: u64 = 100_000_000;

/// The error returned by [`collect()`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShipError {
    #[error("nothing to ship in `{}`", dir.display())]
    NothingToShip { dir: PathBuf },
    #[error("`{}` is not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error("repository `{}` is owned by another user", repo.display())]
    DubiousOwnership { repo: PathBuf },
    #[error("repository `{}` has no work tree", repo.display())]
    Bare { repo: PathBuf },
    #[error("`{}` is outside the work tree `{}`", dir.display(), work_tree.display())]
    OutsideWorkTree { dir: PathBuf, work_tree: PathBuf },
    #[error("cannot list the files of repository `{}`", repo.display())]
    Git {
        repo: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot read `{}`", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl ShipError {
    /// What would be right, for the CLI to print as `hint: …`.
    pub fn hint(&self) -> Option<String> {
        match self {
            ShipError::NothingToShip { .. } => Some(
                "run it where the code is, or pass `--no-upload` to run the image as it is"
                    .to_owned(),
            ),
            ShipError::DubiousOwnership { repo } => Some(format!(
                "git refuses it too; if you trust it, run `git config --global --add safe.directory {}`",
                repo.display()
            )),
            ShipError::Bare { .. } => Some(
                "set `GIT_WORK_TREE` to the top of the work tree to ship (git needs it too), or run where the code is checked out"
                    .to_owned(),
            ),
            ShipError::OutsideWorkTree { work_tree, .. } => Some(format!(
                "run from `{}` or a folder inside it, or unset `GIT_WORK_TREE` and `GIT_DIR`",
                work_tree.display()
            )),
            _ => None,
        }
    }
}

/// How [`collect()`] works.
#[derive(Debug, Clone, Default)]
pub struct ShipOptions {
    /// The hash cache file (read, then rewritten); `None` hashes everything.
    /// [`cache_file_for`] gives one name per shipped directory.
    pub cache: Option<PathBuf>,
    /// Bytes hashed so far, added to as files are read (the cache's files are not read): a
    /// caller shows progress from it while [`collect()`] works.
    pub hashed: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// `GIT_DIR` as the caller read it (div-ship reads no environment): the repository to
    /// use, instead of one found upwards from the shipped folder. Without [`work_tree`]
    /// (`Self::work_tree`) and without `core.worktree`, the shipped folder is the top of the
    /// work tree, as git takes the current directory. Relative to the process's directory.
    pub git_dir: Option<PathBuf>,
    /// `GIT_WORK_TREE` as the caller read it: the top of the work tree, whatever the
    /// repository's `core.bare` and `core.worktree` say (a work tree of a bare repository).
    /// The shipped folder must be inside it. Relative to the process's directory.
    pub work_tree: Option<PathBuf>,
    /// How many bytes, in all, of the small files hashed (a pack's worth, 1 MiB, each at most)
    /// to keep in [`Shipment::kept`], so that an upload sends them without reading them again
    /// (and sends exactly the bytes that were hashed); 0, the default, keeps none. Files the
    /// hash cache answers for are not read, so not kept.
    pub keep_bytes: u64,
}

/// How the shipped set was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Inside a git repository: what `git ls-files -co --exclude-standard` prints.
    Git,
    /// Outside one: everything but [`SKIPPED_NAMES`].
    Walk,
}

/// A directory's code, listed and hashed, ready to plan an upload.
#[derive(Debug, Clone)]
pub struct Shipment {
    /// The shipped directory (canonical); manifest paths are relative to it, and the run
    /// starts in its copy at `/workspace`.
    pub root: PathBuf,
    pub source: Source,
    pub manifest: Manifest,
    /// Things the user should know: links left out because they point outside, submodules
    /// not checked out, nested repositories, unreadable folders, a failed cache write.
    pub warnings: Vec<String>,
    /// How much was hashed and how much came from the cache.
    pub stats: HashStats,
    /// The bytes of files hashed by this listing, by hash, as [`ShipOptions::keep_bytes`]
    /// allows.
    pub kept: Kept,
}

/// Files' bytes kept from their hashing, by hash (see [`ShipOptions::keep_bytes`]). Shared,
/// so that an upload hands them to the threads that build its requests.
#[derive(Clone, Default)]
pub struct Kept(pub std::sync::Arc<std::collections::HashMap<String, bytes::Bytes>>);

impl Kept {
    /// The bytes of the file that hashes to `hash`, if they were kept (shared, not copied:
    /// files' bytes are kept in a few large buffers, each file a part of one).
    pub fn get(&self, hash: &str) -> Option<bytes::Bytes> {
        self.0.get(hash).cloned()
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes: usize = self.0.values().map(bytes::Bytes::len).sum();
        write!(f, "Kept({} files, {bytes} bytes)", self.0.len())
    }
}

/// A shipment large enough to say so before uploading (see [`Shipment::large`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LargeShipment {
    pub bytes: u64,
    /// The biggest top-level folder and its bytes, if there is one.
    pub biggest_folder: Option<(String, u64)>,
    pub source: Source,
}

impl LargeShipment {
    /// Like `this ships 6.2 GB, 6.0 GB of it in `data/``.
    pub fn message(&self) -> String {
        match &self.biggest_folder {
            Some((folder, bytes)) => format!(
                "this ships {}, {} of it in `{folder}`",
                human_bytes(self.bytes),
                human_bytes(*bytes)
            ),
            None => format!("this ships {}", human_bytes(self.bytes)),
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> String {
        let what = self
            .biggest_folder
            .as_ref()
            .map_or("the data", |(folder, _)| folder.as_str());
        let ignore = match self.source {
            Source::Git => format!("name `{what}` in `.gitignore` to leave it out"),
            Source::Walk => {
                format!("`git init` and a `.gitignore` that names `{what}` leave it out")
            }
        };
        format!("{ignore}, or send it once with `div storage put` and read it from `/mnt/<volume>`")
    }
}

impl Shipment {
    /// Files shipped (symlinks included).
    pub fn files(&self) -> u64 {
        self.manifest.entries.len() as u64
    }

    /// Bytes of file content shipped.
    pub fn bytes(&self) -> u64 {
        self.manifest.entries.iter().map(|e| e.size).sum()
    }

    /// The `n` largest files, largest first (ties by path).
    ///
    /// One pass that keeps the `n` best seen so far (n is small: 1 or 5), cloning only the
    /// paths returned: sorting every file would copy 57,000 paths to keep five.
    pub fn largest_files(&self, n: usize) -> Vec<(String, u64)> {
        let first =
            |a: &TreeEntry, b: &TreeEntry| b.size.cmp(&a.size).then_with(|| a.path.cmp(&b.path));
        let mut best: Vec<&TreeEntry> = Vec::with_capacity(n + 1);
        for e in self
            .manifest
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
        {
            if best.len() == n
                && best
                    .last()
                    .is_none_or(|worst| first(e, worst) != std::cmp::Ordering::Less)
            {
                continue;
            }
            let at = best.partition_point(|b| first(b, e) == std::cmp::Ordering::Less);
            best.insert(at, e);
            best.truncate(n);
        }
        best.into_iter().map(|e| (e.path.clone(), e.size)).collect()
    }

    /// The `n` biggest top-level folders by bytes, biggest first, named with a trailing `/`
    /// (`data/`); files at the top level are not folders and do not count.
    pub fn biggest_folders(&self, n: usize) -> Vec<(String, u64)> {
        let mut folders: Vec<(String, u64)> = Vec::new();
        for entry in &self.manifest.entries {
            let Some((top, _)) = entry.path.split_once('/') else {
                continue;
            };
            // Entries are sorted, so one folder's entries are together.
            match folders.last_mut() {
                Some((name, bytes)) if name.strip_suffix('/') == Some(top) => *bytes += entry.size,
                _ => folders.push((format!("{top}/"), entry.size)),
            }
        }
        folders.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        folders.truncate(n);
        folders
    }

    /// Whether `path` (relative to [`root`](Self::root), `/`-separated) is shipped.
    pub fn contains(&self, path: &str) -> bool {
        self.manifest
            .get(path.strip_prefix("./").unwrap_or(path))
            .is_some()
    }

    /// The bytes of the shipped file `path`; `NotFound` when it is not shipped.
    pub fn read(&self, path: &str) -> io::Result<Vec<u8>> {
        if !self.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("`{path}` is not shipped"),
            ));
        }
        std::fs::read(self.local_path(path))
    }

    /// Where the shipped `path` (as the manifest writes it, see [`encode_path`]) is on this
    /// machine.
    pub fn local_path(&self, path: &str) -> PathBuf {
        self.root
            .join(name::on_disk(path.strip_prefix("./").unwrap_or(path)))
    }

    /// The line printed before uploading, like
    /// `14 files, 38.2 KB → very-cool-classifier-code/code/9f31c2ab`.
    pub fn summary_line(&self, volume: &str) -> String {
        let files = self.files();
        let noun = if files == 1 { "file" } else { "files" };
        format!(
            "{files} {noun}, {} → {volume}/code/{}",
            human_bytes(self.bytes()),
            self.manifest.short_id()
        )
    }

    /// `Some` when the shipment is at least `threshold` bytes (use [`LARGE_SHIPMENT_BYTES`]).
    pub fn large(&self, threshold: u64) -> Option<LargeShipment> {
        let bytes = self.bytes();
        (bytes >= threshold).then(|| LargeShipment {
            bytes,
            biggest_folder: self.biggest_folders(1).into_iter().next(),
            source: self.source,
        })
    }
}

/// Bytes as the CLI prints them: decimal units (1 KB = 1000 B, as in `38.2 KB` and `6 GB`),
/// `B` below 1000 without decimals, one decimal above, rounded half up: `999 B`, `1.0 KB`,
/// `38.2 KB`, `6.0 GB`.
pub fn human_bytes(bytes: u64) -> String {
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let units = ["KB", "MB", "GB", "TB", "PB", "EB"];
    let mut unit = 1000u128;
    for (i, name) in units.iter().enumerate() {
        let tenths = (u128::from(bytes) * 10 + unit / 2) / unit;
        if tenths < 10_000 || i == units.len() - 1 {
            return format!("{}.{} {name}", tenths / 10, tenths % 10);
        }
        unit *= 1000;
    }
    unreachable!("the loop returns at its last unit")
}

/// Lists and hashes what is shipped from `dir`.
///
/// Inside a git repository (found upwards from `dir`) that is exactly what
/// `git ls-files --cached --others --exclude-standard` prints when run in `dir`, minus tracked
/// files deleted from the work tree, with each submodule and nested repository replaced by its
/// own set; paths are relative to `dir`. Outside one, everything under `dir` but
/// [`SKIPPED_NAMES`], `*.pyc` and names beginning with `.env`. Symlinks are shipped as links,
/// never followed; an absolute one into `dir` is rewritten as the relative link to the same
/// place, one that points outside `dir` is left out with a warning. Names that are not UTF-8
/// are written as [`encode_path`] says.
///
/// Refuses a repository owned by another user (as git does), and a directory with nothing
/// to send.
pub fn collect(dir: &Path, options: &ShipOptions) -> Result<Shipment, ShipError> {
    let root = dir.canonicalize().map_err(|source| ShipError::Io {
        path: dir.to_owned(),
        source,
    })?;
    if !root.is_dir() {
        return Err(ShipError::NotADirectory {
            dir: dir.to_owned(),
        });
    }
    // The hash cache is read on a thread of its own while the tree is listed.
    let (listing, cache) = std::thread::scope(|scope| {
        let cache = scope.spawn(|| {
            options
                .cache
                .as_deref()
                .map(|p| cache::Cache::load(p, &root))
                .unwrap_or_default()
        });
        let listing = list_sorted(&root, options);
        (listing, cache.join().unwrap_or_default())
    });
    let (source, listed, mut warnings, untracked_from_cache) = listing?;
    let keep = hash::Keep::new(options.keep_bytes);
    let (mut looked, mut stats) =
        hash::look_all(&root, listed, &cache, options.hashed.as_deref(), &keep)?;
    stats.untracked_from_cache = untracked_from_cache;
    let given = std::path::absolute(dir).unwrap_or_else(|_| root.clone());
    relative_absolute_links(&mut looked, &[&root, &given]);
    let looked = drop_unsafe_links(looked, &mut warnings);

    // Every file came from the cache and the cache holds nothing else: writing it again would
    // write the same bytes (racy files are re-hashed, so they never get here).
    let cache_unchanged = stats.hashed_files == 0
        && usize::try_from(stats.cached_files).is_ok_and(|n| n == cache.len());
    if let Some(cache_path) = options.cache.as_ref().filter(|_| !cache_unchanged) {
        let records: Vec<_> = looked
            .iter()
            .filter_map(|l| Some((l.entry.path.as_str(), l.key?, l.entry.hash.as_deref()?)))
            .collect();
        if let Err(err) = cache::save_cache(cache_path, &root, &records) {
            warnings.push(format!(
                "cannot write the hash cache `{}`: {err}",
                cache_path.display()
            ));
        }
    }
    let mut kept = std::collections::HashMap::new();
    let manifest = Manifest {
        entries: looked
            .into_iter()
            .map(|l| {
                if let (Some(data), Some(hash)) = (l.data, &l.entry.hash) {
                    kept.insert(hash.clone(), data);
                }
                l.entry
            })
            .collect(),
    };
    // The cache holds a record per file (57,000 of them in a big repository): freed on a
    // thread of their own rather than before the answer.
    std::thread::spawn(move || drop(cache));
    if manifest.entries.is_empty() {
        return Err(ShipError::NothingToShip {
            dir: dir.to_owned(),
        });
    }
    Ok(Shipment {
        root,
        source,
        manifest,
        warnings,
        stats,
        kept: Kept(std::sync::Arc::new(kept)),
    })
}

/// The paths [`collect()`] would look at from `dir`, relative to it, sorted and unique, without
/// reading anything but folders (no stat, no hash). Paths deleted from disk since they were
/// tracked, and links pointing outside, are still in it: `collect` drops them.
pub fn list_paths(dir: &Path) -> Result<(Source, Vec<String>), ShipError> {
    list_paths_with(dir, &ShipOptions::default())
}

/// [`list_paths`] with the repository and work tree that `options` name, if any (its hash
/// cache is not read; the untracked cache beside it is, as by [`collect()`]).
pub fn list_paths_with(
    dir: &Path,
    options: &ShipOptions,
) -> Result<(Source, Vec<String>), ShipError> {
    let root = dir.canonicalize().map_err(|source| ShipError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let (source, listed, ..) = list_sorted(&root, options)?;
    Ok((source, listed.into_iter().map(|l| l.path).collect()))
}

/// What is shipped from `root`, sorted, each path once; the warnings; whether the untracked
/// cache answered.
fn list_sorted(
    root: &Path,
    options: &ShipOptions,
) -> Result<(Source, Vec<git::Listed>, Vec<String>, bool), ShipError> {
    if !root.is_dir() {
        return Err(ShipError::NotADirectory {
            dir: root.to_owned(),
        });
    }
    let mut listed = Vec::new();
    let mut warnings = Vec::new();
    let (source, from_cache) = match repo::open(root, options)? {
        Some(opened) => {
            let untracked = options.cache.as_deref().map(untracked::file_beside);
            let from_cache = git::list(
                &opened,
                root,
                untracked.as_deref(),
                &mut listed,
                &mut warnings,
            )?;
            (Source::Git, from_cache)
        }
        None => {
            walk::list(root, &mut listed, &mut warnings)?;
            (Source::Walk, false)
        }
    };
    listed.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    listed.dedup_by(|a, b| a.path == b.path);
    Ok((source, listed, warnings, from_cache))
}

/// Rewrites each link whose absolute target lies inside the shipped folder (one of `roots`:
/// its canonical path, and the path it was given as) as the relative target that reaches the
/// same place from the link's folder: in the run the folder is `/workspace`, so the absolute
/// target would point at nothing there, or at something else. Other absolute targets stay as
/// they are (and are left out by [`drop_unsafe_links`]).
fn relative_absolute_links(looked: &mut [hash::Looked], roots: &[&Path]) {
    for l in looked.iter_mut() {
        let Some(target) = l.entry.target.as_deref().filter(|t| t.starts_with('/')) else {
            continue;
        };
        if let Some(relative) = relative_target(&l.entry.path, target, roots) {
            l.entry.target = Some(relative);
        }
    }
}

/// The relative target for a link at `link_path` (a manifest path) whose absolute `target`
/// is inside one of `roots`, lexically, or once the target's folder is resolved on this
/// machine (a root reached through a link); `None` when it is not.
fn relative_target(link_path: &str, target: &str, roots: &[&Path]) -> Option<String> {
    let target = name::on_disk(target);
    let target = target.as_ref();
    let canonical = || {
        let parent = target.parent()?.canonicalize().ok()?;
        Some(match target.file_name() {
            Some(name) => parent.join(name),
            None => parent,
        })
    };
    let rest = roots
        .iter()
        .find_map(|root| target.strip_prefix(root).ok().map(Path::to_owned))
        .or_else(|| {
            let target = canonical()?;
            roots
                .iter()
                .find_map(|root| target.strip_prefix(root).ok().map(Path::to_owned))
        })?;
    let rest = encode_path(rest.as_os_str().as_encoded_bytes()).into_owned();
    let depth = link_path.matches('/').count();
    let mut relative = "../".repeat(depth);
    relative.push_str(&rest);
    if relative.is_empty() {
        relative.push('.');
    }
    Some(relative.trim_end_matches('/').to_owned())
}

/// Leaves out links that resolve outside the shipped tree, and anything listed under a link,
/// so that what is shipped always passes [`validate_entries`].
fn drop_unsafe_links(looked: Vec<hash::Looked>, warnings: &mut Vec<String>) -> Vec<hash::Looked> {
    use std::collections::HashMap;
    let targets: HashMap<&str, &str> = looked
        .iter()
        .filter_map(|l| Some((l.entry.path.as_str(), l.entry.target.as_deref()?)))
        .collect();
    if targets.is_empty() {
        return looked;
    }
    let lookup = |p: &str| targets.get(p).copied();
    let mut keep = Vec::with_capacity(looked.len());
    let mut dropped = Vec::new();
    for (i, l) in looked.iter().enumerate() {
        let path = l.entry.path.as_str();
        let under_link = path
            .match_indices('/')
            .any(|(at, _)| targets.contains_key(&path[..at]));
        if under_link {
            warnings.push(format!(
                "`{}` is under a symlink: not shipped",
                display_path(path)
            ));
            dropped.push(i);
            continue;
        }
        if let Some(target) = l.entry.target.as_deref()
            && manifest::resolve_link(path, target, &lookup).is_err()
        {
            warnings.push(format!(
                "symlink `{}` points outside the shipped folder (`{}`): not shipped",
                display_path(path),
                display_path(target)
            ));
            dropped.push(i);
            continue;
        }
        keep.push(i);
    }
    if dropped.is_empty() {
        return looked;
    }
    let mut keep = keep.into_iter().peekable();
    looked
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.next_if_eq(i).is_some())
        .map(|(_, l)| l)
        .collect()
}
