//! The repository a shipment comes from, opened as git opens it for a command run in the
//! shipped folder (`GIT_DIR`, `GIT_WORK_TREE`, a relative `core.excludesFile`), and another
//! handle on it for each thread that walks it.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gix::bstr::BString;

use crate::{ShipError, ShipOptions};

/// A repository opened as git opens it for a command run in the shipped folder.
pub(crate) struct Opened {
    pub(crate) repo: gix::Repository,
    /// What to open again for another handle (one per walking thread): the work tree when
    /// the repository was found from it, the git directory when it was named.
    open_at: PathBuf,
    /// The work tree that was named (or implied by a named git directory), set on every
    /// handle: gix takes one only from its own reading of `GIT_WORK_TREE`.
    work_tree: Option<PathBuf>,
}

/// What another thread needs to open its own handle with [`reopen`].
pub(crate) struct Reopen<'a> {
    open_at: &'a Path,
    options: gix::open::Options,
    work_tree: Option<&'a Path>,
}

impl Opened {
    pub(crate) fn how_to_reopen(&self) -> Reopen<'_> {
        Reopen {
            open_at: &self.open_at,
            options: self.repo.open_options().clone(),
            work_tree: self.work_tree.as_deref(),
        }
    }
}

/// Another handle on the same repository, with the same options, overrides and work tree.
pub(crate) fn reopen(how: Reopen<'_>) -> Result<gix::Repository, ShipError> {
    let git_err = |source: Box<dyn std::error::Error + Send + Sync>| ShipError::Git {
        repo: how.open_at.to_owned(),
        source,
    };
    let mut repo = gix::open_opts(how.open_at, how.options).map_err(|e| git_err(Box::new(e)))?;
    if let Some(work_tree) = how.work_tree {
        repo.set_workdir(work_tree.to_owned())
            .map_err(|e| git_err(Box::new(e)))?;
    }
    Ok(repo)
}

/// `key=value` for gix's configuration overrides, the value a path's bytes.
fn setting(key: &str, path: &Path) -> BString {
    let mut value = BString::from(format!("{key}="));
    value.extend_from_slice(path.as_os_str().as_bytes());
    value
}

/// The repository whose work tree holds `root`, as git finds it: `options.git_dir`
/// (`GIT_DIR`) if named, else upwards from `root`; the work tree `options.work_tree`
/// (`GIT_WORK_TREE`) if named, else, with a named git directory and no `core.worktree`,
/// `root` itself (git takes the current directory). `None` outside any repository.
///
/// A relative `core.excludesFile` is made absolute from the top of the work tree: git
/// resolves it from its current directory, which is always the top of the work tree by
/// the time it reads it; gix would resolve it from this process's directory.
pub(crate) fn open(root: &Path, options: &ShipOptions) -> Result<Option<Opened>, ShipError> {
    let git_err = |repo: &Path| {
        let repo = repo.to_owned();
        move |source: Box<dyn std::error::Error + Send + Sync>| ShipError::Git { repo, source }
    };
    let (repo, work_tree, open_at) = match &options.git_dir {
        Some(git_dir) => {
            // As is: `GIT_DIR=repo` does not mean `repo/.git` to git.
            let repo = gix::open_opts(git_dir, gix::open::Options::default().open_path_as_is(true))
                .map_err(|e| git_err(git_dir)(Box::new(e)))?;
            let has_core_worktree = repo
                .config_snapshot()
                .string("core.worktree")
                .is_some_and(|v| !v.is_empty());
            let work_tree = match &options.work_tree {
                Some(work_tree) => Some(work_tree.clone()),
                None if has_core_worktree => None,
                None if repo.config_snapshot().boolean("core.bare") == Some(true) => {
                    return Err(ShipError::Bare {
                        repo: repo.git_dir().to_owned(),
                    });
                }
                None => Some(root.to_owned()),
            };
            let open_at = repo.git_dir().to_owned();
            (repo, work_tree, open_at)
        }
        None => match gix::discover(root) {
            Ok(repo) => match &options.work_tree {
                Some(work_tree) => {
                    let open_at = repo.git_dir().to_owned();
                    (repo, Some(work_tree.clone()), open_at)
                }
                None => {
                    let open_at = repo.workdir().unwrap_or(repo.git_dir()).to_owned();
                    (repo, None, open_at)
                }
            },
            Err(err) if is_no_repository(&err) => return Ok(None),
            Err(err) => return Err(git_err(root)(Box::new(err))),
        },
    };
    let work_tree = match work_tree {
        Some(work_tree) => {
            Some(
                std::path::absolute(&work_tree).map_err(|source| ShipError::Io {
                    path: work_tree.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    let mut opened = Opened {
        repo,
        open_at,
        work_tree,
    };
    if let Some(work_tree) = &opened.work_tree {
        opened
            .repo
            .set_workdir(work_tree.clone())
            .map_err(|e| git_err(work_tree)(Box::new(e)))?;
    }
    if let Some(options) = excludes_file_from_top(&opened.repo) {
        opened.repo = reopen(Reopen {
            options,
            ..opened.how_to_reopen()
        })?;
    }
    Ok(Some(opened))
}

/// The repository at `workdir`, inside the one listed (a submodule, or a nested repository),
/// opened as git opens it when it lists that repository from its top.
pub(crate) fn open_inner(workdir: &Path) -> Result<Opened, ShipError> {
    let repo = gix::open(workdir).map_err(|source| ShipError::Git {
        repo: workdir.to_owned(),
        source: Box::new(source),
    })?;
    let mut opened = Opened {
        repo,
        open_at: workdir.to_owned(),
        work_tree: None,
    };
    if let Some(options) = excludes_file_from_top(&opened.repo) {
        opened.repo = reopen(Reopen {
            options,
            ..opened.how_to_reopen()
        })?;
    }
    Ok(opened)
}

/// `repo`'s open options with an absolute `core.excludesFile`, if its own is relative (joined
/// to the top of the work tree, as git reads it); `None` when nothing needs changing.
fn excludes_file_from_top(repo: &gix::Repository) -> Option<gix::open::Options> {
    let workdir = repo.workdir()?;
    let absolute = match repo.config_snapshot().trusted_path("core.excludesFile") {
        Ok(Some(path)) if path.is_relative() => workdir.join(path),
        _ => return None,
    };
    Some(
        repo.open_options()
            .clone()
            .config_overrides([setting("core.excludesFile", &absolute)]),
    )
}

/// Whether `err` says there is no repository here (rather than one that cannot be read).
fn is_no_repository(err: &gix::Error) -> bool {
    use gix::discover::upwards::Error;
    matches!(
        err.downcast_any_ref::<Error>(),
        Some(
            Error::NoGitRepository { .. }
                | Error::NoGitRepositoryWithinCeiling { .. }
                | Error::NoGitRepositoryWithinFs { .. }
        )
    )
}
