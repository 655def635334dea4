//! The shipped set inside a git repository: what `git ls-files -co --exclude-standard` prints,
//! computed with gix, with submodules and nested repositories walked for their own sets.

use std::borrow::Cow;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use gix::bstr::{BStr, BString, ByteSlice};
use gix::dir::entry::{Kind, Status};
use gix::dir::walk::{Action, Delegate, EmissionMode};

use crate::ShipError;
use crate::git_walk::Untracked;
use crate::name::{display_path, encode_path, on_disk};
use crate::repo::{Opened, open_inner, reopen};

/// A repository inside the one listed.
#[derive(Debug, Clone, Copy)]
enum Inner {
    /// A gitlink in the index.
    Submodule,
    /// An untracked folder holding its own `.git` (git lists it as `name/`).
    Nested,
}

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

/// Lists what is shipped from `dir`, which is inside the work tree of `opened`. Paths come
/// out relative to `dir`, unsorted, maybe repeated. The untracked half is kept in (and
/// taken from) the untracked cache at `untracked_cache`, when one is given
/// ([`crate::untracked`]); whether it answered is returned.
pub(crate) fn list(
    opened: &Opened,
    dir: &Path,
    untracked_cache: Option<&Path>,
    out: &mut Vec<Listed>,
    warnings: &mut Vec<String>,
) -> Result<bool, ShipError> {
    let repo = &opened.repo;
    let workdir = repo.workdir().ok_or_else(|| ShipError::Bare {
        repo: repo.git_dir().to_owned(),
    })?;
    let workdir = workdir.canonicalize().map_err(|source| ShipError::Io {
        path: workdir.to_owned(),
        source,
    })?;
    let prefix = dir
        .strip_prefix(&workdir)
        .map_err(|_| ShipError::OutsideWorkTree {
            dir: dir.to_owned(),
            work_tree: workdir.clone(),
        })?;
    let prefix = encode_path(prefix.as_os_str().as_bytes());
    list_repo(
        opened,
        &workdir,
        &prefix,
        "",
        untracked_cache,
        out,
        warnings,
    )
}

/// Lists `prefix` (relative to `workdir`, `""` for all) of `repo`; each path is written relative
/// to `prefix`, behind `out_prefix`. Whether the untracked cache answered for `repo`'s own
/// walk.
fn list_repo(
    opened: &Opened,
    workdir: &Path,
    prefix: &str,
    out_prefix: &str,
    untracked_cache: Option<&Path>,
    out: &mut Vec<Listed>,
    warnings: &mut Vec<String>,
) -> Result<bool, ShipError> {
    let repo = &opened.repo;
    if repo.git_dir_trust() != gix::sec::Trust::Full {
        return Err(ShipError::DubiousOwnership {
            repo: workdir.to_owned(),
        });
    }
    // The untracked cache is checked (thousands of folders stat'ed) while the index is read.
    // Its answer is taken only if the index read is the one it was checked against: the
    // index stats the same before the check and after the read.
    let index_path = repo.index_path();
    let index_before = crate::untracked::follow_stat(&index_path);
    let cached =
        untracked_cache.map(|cache| crate::git_walk::Cached::new(repo, workdir, prefix, cache));
    let (index, mut held) = std::thread::scope(|scope| {
        let check = cached
            .as_ref()
            .map(|c| scope.spawn(move || c.held(workdir)));
        let index = read_index(repo, workdir);
        let held = check.and_then(|c| c.join().ok().flatten());
        (index, held)
    });
    if held.is_some() && crate::untracked::follow_stat(&index_path) != index_before {
        held = None;
    }
    let index = index?;
    let dir_prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };

    // Untracked files git is not ignoring, and nested repositories: walked as git walks
    // them, or by gix's walk where the file system folds case or composes Unicode.
    let collect = match crate::git_walk::walk(opened, workdir, &index, prefix, cached, held)? {
        Some(found) => found,
        None => walk_untracked(opened, workdir, &index, prefix)?,
    };

    let from_cache = collect.from_cache;
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
                let rel = rel.to_owned();
                nested.push((path, rel, Inner::Nested));
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
        let path = encode_path(path);
        let Some(rel) = relative(&path, prefix, &dir_prefix) else {
            continue;
        };
        if entry.mode == gix::index::entry::Mode::COMMIT {
            nested.push((path.clone().into_owned(), rel.to_owned(), Inner::Submodule));
        } else {
            out.push(Listed {
                path: join(out_prefix, rel),
            });
        }
    }

    list_nested(nested, workdir, out_prefix, out, warnings)?;
    Ok(from_cache)
}

/// The repository's index as git reads it (its checksum not verified, as git verifies it only
/// in `git fsck`), with a sparse index expanded; an empty one when there is none.
fn read_index(repo: &gix::Repository, workdir: &Path) -> Result<gix::index::File, ShipError> {
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
    // A sparse index holds whole folders outside the sparse cone as one entry (their tree);
    // git expands them before it lists anything (`ensure_full_index`), and so does div.
    if index.is_sparse() {
        expand_sparse(repo, &index).map_err(|source| ShipError::Git {
            repo: workdir.to_owned(),
            source,
        })
    } else {
        Ok(index)
    }
}

/// Submodules and nested repositories, alike: each one's own set, and a word about it, in the
/// order of their paths (the walk finds them in no set order). `nested` holds each one's
/// path in the manifest's form, its path relative to the listing, and what it is.
fn list_nested(
    mut nested: Vec<(String, String, Inner)>,
    workdir: &Path,
    out_prefix: &str,
    out: &mut Vec<Listed>,
    warnings: &mut Vec<String>,
) -> Result<(), ShipError> {
    nested.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, rel, inner) in nested {
        let sub_workdir = workdir.join(on_disk(&path));
        let shown = display_path(&rel);
        if !sub_workdir.join(".git").exists() {
            warnings.push(format!(
                "submodule `{out_prefix}{shown}` is not checked out: nothing of it is shipped"
            ));
            continue;
        }
        let what = match inner {
            Inner::Submodule => "a submodule",
            Inner::Nested => "a git repository inside this one (not a submodule)",
        };
        warnings.push(format!(
            "`{out_prefix}{shown}` is {what}: shipping what it lists itself, its untracked files included"
        ));
        let sub = open_inner(&sub_workdir)?;
        list_repo(
            &sub,
            &sub_workdir,
            "",
            &format!("{out_prefix}{rel}/"),
            None,
            out,
            warnings,
        )?;
    }
    Ok(())
}

/// `index` with each sparse folder entry (a tree, outside the sparse cone) replaced by the
/// files of that tree, each marked skip-worktree as git marks them when it expands the index:
/// the full index git itself lists from.
fn expand_sparse(
    repo: &gix::Repository,
    index: &gix::index::File,
) -> Result<gix::index::File, Box<dyn std::error::Error + Send + Sync>> {
    use gix::index::entry::{Flags, Mode};
    let mut full = gix::index::State::new(repo.object_hash());
    for entry in index.entries() {
        let path = entry.path(index);
        if entry.mode != Mode::DIR {
            full.dangerously_push_entry(entry.stat, entry.id, entry.flags, entry.mode, path);
            continue;
        }
        // The folder's path ends with `/`.
        let tree = gix::index::State::from_tree(&entry.id, &repo.objects, Default::default())?;
        let mut inner = Vec::with_capacity(path.len() + 64);
        for file in tree.entries() {
            inner.clear();
            inner.extend_from_slice(path);
            inner.extend_from_slice(file.path(&tree));
            full.dangerously_push_entry(
                file.stat,
                file.id,
                file.flags | Flags::SKIP_WORKTREE | Flags::EXTENDED,
                file.mode,
                inner.as_bstr(),
            );
        }
    }
    full.sort_entries();
    Ok(gix::index::File::from_state(full, index.path().to_owned()))
}

/// Untracked files git is not ignoring, and nested repositories, under `prefix` (relative to
/// `workdir`, `""` for all): one gix walk per core, each given some of the folder's
/// subfolders as literal pathspecs (the first also its other entries), or one walk when the
/// folder has fewer than two subfolders. Every walk starts at `prefix` itself (a pathspec
/// without a trailing `/` keeps the walk in its parent), so each entry is classified, ignore
/// rules included, exactly as by one walk; only the work is shared.
fn walk_untracked(
    opened: &Opened,
    workdir: &Path,
    index: &gix::index::File,
    prefix: &str,
) -> Result<Untracked, ShipError> {
    let repo = &opened.repo;
    let threads = crate::cores::cores().min(8);
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
    std::thread::scope(|scope| {
        let others: Vec<_> = groups
            .into_iter()
            .map(|patterns| {
                let how = opened.how_to_reopen();
                scope.spawn(move || {
                    // One handle per thread: gix's is not `Send` without its `parallel`
                    // feature, which would rebuild gix for the whole workspace.
                    let repo = reopen(how)?;
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

/// `:(top,literal)path`: relative to the work tree, and no glob (`path` as the manifest
/// writes it).
fn pathspec(path: &str) -> gix::bstr::BString {
    let mut spec = BString::from(":(top,literal)");
    spec.extend_from_slice(
        &crate::name::decode_path(path).unwrap_or(Cow::Borrowed(path.as_bytes())),
    );
    spec
}

/// The pathspecs of each walk when the folder `prefix` is walked by `threads`: its
/// subfolders dealt round, its other entries with the first. `None` when one walk will do:
/// one thread, fewer than two subfolders, or a name that is not UTF-8 (the single walk
/// takes it).
fn split_top(workdir: &Path, prefix: &str, threads: usize) -> Option<Vec<Vec<gix::bstr::BString>>> {
    if threads < 2 {
        return None;
    }
    let dir = workdir.join(on_disk(prefix));
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

impl Delegate for Untracked {
    fn emit(&mut self, entry: gix::dir::EntryRef<'_>, _dir_status: Option<Status>) -> Action {
        if entry.status != Status::Untracked {
            return Action::Continue(());
        }
        let Some(kind) = entry.disk_kind else {
            return Action::Continue(());
        };
        self.found
            .push((encode_path(entry.rela_path.as_bytes()).into_owned(), kind));
        Action::Continue(())
    }
}
