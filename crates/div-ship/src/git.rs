//! The shipped set inside a git repository: what `git ls-files -co --exclude-standard` prints,
//! computed with gix, with submodules and nested repositories walked for their own sets.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use gix::bstr::{BStr, ByteSlice};
use gix::dir::entry::{Kind, Status};
use gix::dir::walk::{Action, Delegate, EmissionMode};

use crate::ShipError;
use crate::git_walk::Untracked;

/// One path the listing found, before it is looked at on disk.
#[derive(Debug)]
pub(crate) struct Listed {
    /// Relative to the shipped root, `/`-separated; on disk it is the root joined with it
    /// (submodules included: their paths carry their folder).
    pub(crate) path: String,
}

/// `prefix` then `rel`, without `format!`'s machinery when there is no prefix.
fn join(prefix: &str, rel: &str) -> String {
    let mut path = String::with_capacity(prefix.len() + rel.len());
    path.push_str(prefix);
    path.push_str(rel);
    path
}

/// Lists what is shipped from `dir`, which is inside the work tree of `repo` (opened at
/// `workdir`). Paths come out relative to `dir`, unsorted, maybe repeated.
pub(crate) fn list(
    repo: &gix::Repository,
    dir: &Path,
    out: &mut Vec<Listed>,
    warnings: &mut Vec<String>,
) -> Result<(), ShipError> {
    let workdir = repo.workdir().ok_or_else(|| ShipError::Bare {
        repo: repo.git_dir().to_owned(),
    })?;
    let workdir = workdir.canonicalize().map_err(|source| ShipError::Io {
        path: workdir.to_owned(),
        source,
    })?;
    let prefix = dir.strip_prefix(&workdir).unwrap_or(Path::new(""));
    let prefix = path_to_str(prefix)?;
    list_repo(repo, &workdir, prefix, "", out, warnings)
}

/// Lists `prefix` (relative to `workdir`, `""` for all) of `repo`; each path is written relative
/// to `prefix`, behind `out_prefix`.
fn list_repo(
    repo: &gix::Repository,
    workdir: &Path,
    prefix: &str,
    out_prefix: &str,
    out: &mut Vec<Listed>,
    warnings: &mut Vec<String>,
) -> Result<(), ShipError> {
    if repo.git_dir_trust() != gix::sec::Trust::Full {
        return Err(ShipError::DubiousOwnership {
            repo: workdir.to_owned(),
        });
    }
    // Like git, which only verifies the index checksum in `git fsck`: skipping it saves a
    // hash over the whole index on every listing.
    let index_path = repo.index_path();
    let index = if index_path.exists() {
        gix::index::File::at(
            &index_path,
            repo.object_hash(),
            true,
            gix::index::decode::Options::default(),
        )
        .map_err(|source| ShipError::Git {
            repo: workdir.to_owned(),
            source: Box::new(source),
        })?
    } else {
        gix::index::File::from_state(gix::index::State::new(repo.object_hash()), index_path)
    };
    if index.is_sparse() {
        return Err(ShipError::SparseIndex {
            repo: workdir.to_owned(),
        });
    }
    let dir_prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };

    // Untracked files git is not ignoring, and nested repositories: walked as git walks
    // them, or by gix's walk where the file system folds case or composes Unicode.
    let collect = match crate::git_walk::walk(repo, workdir, &index, prefix)? {
        Some(found) => found,
        None => walk_untracked(repo, workdir, &index, prefix)?,
    };
    if let Some(path) = collect.non_utf8 {
        return Err(ShipError::NonUtf8Path {
            path: workdir.join(path),
        });
    }

    let mut nested = Vec::new();
    for (path, kind) in collect.found {
        let Some(rel) = relative(&path, prefix, &dir_prefix) else {
            continue;
        };
        match kind {
            Kind::File | Kind::Symlink => out.push(Listed {
                path: join(out_prefix, rel),
            }),
            Kind::Repository => {
                warnings.push(format!(
                    "`{out_prefix}{rel}` is a git repository inside this one: shipping what it lists itself"
                ));
                let rel = rel.to_owned();
                nested.push((path, rel));
            }
            Kind::Directory | Kind::Untrackable => {}
        }
    }

    // Everything in the index, once, whether or not it is ignored (tracked wins).
    let mut last: Option<&BStr> = None;
    for entry in index.entries() {
        let path = entry.path(&index);
        if last == Some(path) {
            continue; // another conflict stage of the same path
        }
        last = Some(path);
        let path = path.to_str().map_err(|_| ShipError::NonUtf8Path {
            path: workdir.join(path.to_path_lossy()),
        })?;
        let Some(rel) = relative(path, prefix, &dir_prefix) else {
            continue;
        };
        if entry.mode == gix::index::entry::Mode::COMMIT {
            nested.push((path.to_owned(), rel.to_owned()));
        } else {
            out.push(Listed {
                path: join(out_prefix, rel),
            });
        }
    }

    // Submodules and nested repositories: each one's own set.
    for (path, rel) in nested {
        let sub_workdir = workdir.join(&path);
        if !sub_workdir.join(".git").exists() {
            warnings.push(format!(
                "submodule `{out_prefix}{rel}` is not checked out: nothing of it is shipped"
            ));
            continue;
        }
        let sub_repo = gix::open(&sub_workdir).map_err(|source| ShipError::Git {
            repo: sub_workdir.clone(),
            source: Box::new(source),
        })?;
        list_repo(
            &sub_repo,
            &sub_workdir,
            "",
            &format!("{out_prefix}{rel}/"),
            out,
            warnings,
        )?;
    }
    Ok(())
}

/// Untracked files git is not ignoring, and nested repositories, under `prefix` (relative to
/// `workdir`, `""` for all): one gix walk per core, each given some of the folder's
/// subfolders as literal pathspecs (the first also its other entries), or one walk when the
/// folder has fewer than two subfolders. Every walk starts at `prefix` itself (a pathspec
/// without a trailing `/` keeps the walk in its parent), so each entry is classified, ignore
/// rules included, exactly as by one walk; only the work is shared.
fn walk_untracked(
    repo: &gix::Repository,
    workdir: &Path,
    index: &gix::index::File,
    prefix: &str,
) -> Result<Untracked, ShipError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let Some(mut groups) = split_top(workdir, prefix, threads) else {
        // `top`: relative to the work tree, whatever this process's directory;
        // `literal`: a folder called `[x]` is no glob.
        let patterns = if prefix.is_empty() {
            Vec::new()
        } else {
            vec![pathspec(prefix)]
        };
        return walk_one(repo, workdir, index, &patterns);
    };
    let first = groups.swap_remove(0);
    let options = repo.open_options().clone();
    std::thread::scope(|scope| {
        let others: Vec<_> = groups
            .into_iter()
            .map(|patterns| {
                let options = options.clone();
                scope.spawn(move || {
                    // One handle per thread: gix's is not `Send` without its `parallel`
                    // feature, which would rebuild gix for the whole workspace.
                    let repo =
                        gix::open_opts(workdir, options).map_err(|source| ShipError::Git {
                            repo: workdir.to_owned(),
                            source: Box::new(source),
                        })?;
                    walk_one(&repo, workdir, index, &patterns)
                })
            })
            .collect();
        let mut all = walk_one(repo, workdir, index, &first)?;
        for other in others {
            let more = other.join().expect("a walking thread does not panic")?;
            all.merge(more);
        }
        Ok(all)
    })
}

/// `:(top,literal)path`: relative to the work tree, and no glob.
fn pathspec(path: &str) -> gix::bstr::BString {
    format!(":(top,literal){path}").into()
}

/// The pathspecs of each walk when the folder `prefix` is walked by `threads`: its
/// subfolders dealt round, its other entries with the first. `None` when one walk will do:
/// one thread, fewer than two subfolders, or a name that is not UTF-8 (the single walk
/// reports it).
fn split_top(workdir: &Path, prefix: &str, threads: usize) -> Option<Vec<Vec<gix::bstr::BString>>> {
    if threads < 2 {
        return None;
    }
    let dir = workdir.join(prefix);
    let mut folders = Vec::new();
    let mut others = Vec::new();
    for entry in std::fs::read_dir(&dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name().into_string().ok()?;
        if name == ".git" {
            continue; // never listed; a pathspec naming it would only cost time
        }
        let path = if prefix.is_empty() {
            pathspec(&name)
        } else {
            pathspec(&format!("{prefix}/{name}"))
        };
        if entry.file_type().ok()?.is_dir() {
            folders.push(path);
        } else {
            others.push(path);
        }
    }
    crate::git_walk::deal(folders, others, threads)
}

/// One gix walk of the untracked entries that `patterns` select (all when empty).
fn walk_one(
    repo: &gix::Repository,
    workdir: &Path,
    index: &gix::index::File,
    patterns: &[gix::bstr::BString],
) -> Result<Untracked, ShipError> {
    let git_err = |source: gix::Error| ShipError::Git {
        repo: workdir.to_owned(),
        source: Box::new(source),
    };
    let options = repo
        .dirwalk_options()
        .map_err(git_err)?
        .emit_untracked(EmissionMode::Matching)
        .emit_ignored(None)
        .emit_tracked(false)
        .emit_pruned(false)
        .emit_empty_directories(false)
        .recurse_repositories(false)
        // Only ever given with patterns; never the process's own directory.
        .empty_patterns_match_prefix(!patterns.is_empty());
    let mut collect = Untracked::default();
    let interrupt = AtomicBool::new(false);
    repo.dirwalk(index, patterns, &interrupt, options, &mut collect)
        .map_err(git_err)?;
    Ok(collect)
}

/// `path` relative to the shipped prefix, or `None` when it is outside it.
fn relative<'a>(path: &'a str, prefix: &str, dir_prefix: &str) -> Option<&'a str> {
    if prefix.is_empty() {
        return Some(path);
    }
    path.strip_prefix(dir_prefix)
        .filter(|rest| !rest.is_empty())
}

fn path_to_str(path: &Path) -> Result<&str, ShipError> {
    path.to_str().ok_or_else(|| ShipError::NonUtf8Path {
        path: path.to_owned(),
    })
}

impl Delegate for Untracked {
    fn emit(&mut self, entry: gix::dir::EntryRef<'_>, _dir_status: Option<Status>) -> Action {
        if entry.status != Status::Untracked {
            return Action::Continue(());
        }
        let Some(kind) = entry.disk_kind else {
            return Action::Continue(());
        };
        match entry.rela_path.to_str() {
            Ok(path) => self.found.push((path.to_owned(), kind)),
            Err(_) => {
                self.non_utf8 = Some(entry.rela_path.to_path_lossy().into_owned());
                return Action::Break(());
            }
        }
        Action::Continue(())
    }
}
