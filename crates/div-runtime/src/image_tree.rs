//! Paths looked up inside an image's unpacked tree as the run will see them: each component
//! resolved in the tree, a symlink followed as if the tree were `/` (an absolute target
//! starts again at the tree's root, `..` stops there), never a file of this machine's.
//!
//! Two uses: where a run that shipped nothing starts (the image's `WorkingDir`, made when
//! the image lacks it: [`working_dir_args`]), and which Python an image has on its `PATH`
//! ([`has_program`]).

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

/// How many symlinks one lookup follows before it calls the path a loop (Linux's own
/// limit).
const MAX_LINKS: usize = 40;

/// Where a path is in a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// It is there: its path in the tree, links resolved (`/usr/bin/python3.11`).
    Found(PathBuf),
    /// Its first `missing` components are not: `existing` (links resolved) is the deepest
    /// directory there, and `missing` what would have to be made below it.
    Missing {
        existing: PathBuf,
        missing: Vec<String>,
    },
}

/// Why a path cannot be a directory in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotADir {
    /// A component is a file (or anything but a directory or a link).
    File(PathBuf),
    /// More than [`MAX_LINKS`] symlinks, or a loop.
    Loop,
    /// A component could not be looked at (its folder unreadable to this server).
    Unreadable(PathBuf),
}

/// The tree's file for `inside` (an absolute path in it).
pub(crate) fn host(root: &Path, inside: &Path) -> PathBuf {
    root.join(inside.strip_prefix("/").unwrap_or(inside))
}

/// Looks `path` up in the tree at `root`, components that are not directories refused only
/// when something is asked below them (`want_dir`: the last one must be a directory too).
pub fn resolve(root: &Path, path: &str, want_dir: bool) -> Result<Resolved, NotADir> {
    let mut queue: VecDeque<String> = components(Path::new(path));
    let mut current = PathBuf::from("/");
    let mut links = 0usize;
    while let Some(part) = queue.pop_front() {
        if part == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&part);
        let meta = match std::fs::symlink_metadata(host(root, &next)) {
            Ok(meta) => meta,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let rest: Vec<String> = std::iter::once(part).chain(queue).collect();
                if rest.iter().any(|c| c == "..") {
                    // `app/../lib`: what is missing cancels out lexically; look again at the
                    // path that is left (it holds no `..` now).
                    let mut clean = current.clone();
                    for c in &rest {
                        if c == ".." {
                            clean.pop();
                        } else {
                            clean.push(c);
                        }
                    }
                    return resolve(root, &clean.display().to_string(), want_dir);
                }
                return Ok(Resolved::Missing {
                    existing: current,
                    missing: rest,
                });
            }
            Err(_) => return Err(NotADir::Unreadable(next)),
        };
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(NotADir::Loop);
            }
            let Ok(target) = std::fs::read_link(host(root, &next)) else {
                return Err(NotADir::Unreadable(next));
            };
            if target.is_absolute() {
                current = PathBuf::from("/");
            }
            for (i, c) in components(&target).into_iter().enumerate() {
                queue.insert(i, c);
            }
        } else if meta.is_dir() {
            current = next;
        } else if queue.is_empty() && !want_dir {
            return Ok(Resolved::Found(next));
        } else {
            return Err(NotADir::File(next));
        }
    }
    Ok(Resolved::Found(current))
}

/// `path`'s components as names and `..`, `.` and the root left out.
fn components(path: &Path) -> VecDeque<String> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".to_owned()),
            _ => None,
        })
        .collect()
}

/// Whether `name` is an executable file in one of the directories of `path_var` (a `PATH`
/// value) inside the tree at `root`, as a shell looking it up in the run would find it.
pub fn has_program(root: &Path, path_var: &str, name: &str) -> bool {
    path_var
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .any(|dir| match resolve(root, &format!("{dir}/{name}"), false) {
            Ok(Resolved::Found(file)) => std::fs::metadata(host(root, &file))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0),
            _ => false,
        })
}

/// The top-level directories the sandbox mounts for the run, writable: what the image has
/// there is not what the run sees.
const RUN_MOUNTS: [&str; 3] = ["tmp", "mnt", "workspace"];
/// The top-level directories the sandbox mounts for itself: no working directory goes there.
const SYSTEM_MOUNTS: [&str; 5] = ["proc", "dev", "sys", "cache", ".div"];

/// What bubblewrap needs to start a run in `dir`, the image's `WorkingDir` (as docker does,
/// a working directory the image lacks is made for the run, never in the cached tree).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkingDirArgs {
    /// Given right after the image's tree is bound: a tmpfs of the run's own where the first
    /// missing directory goes (over its parent, that parent's entries bound again, when the
    /// parent is not `/`; the parent read-only again after), and the rest of the path in it.
    pub early: Vec<String>,
    /// Given once `/tmp`, `/mnt` and `/workspace` are bound: a directory made in them.
    pub late: Vec<String>,
}

/// The error returned by [`working_dir_args`]: the image's `WorkingDir` cannot be a directory,
/// and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the image's WorkingDir `{}` cannot be where the run starts: {why}",
    .dir.escape_debug()
)]
pub struct WorkingDirError {
    pub dir: String,
    pub why: String,
}

/// How a run that shipped nothing is started in `dir` in the image at `rootfs`: nothing to
/// do where the tree has it; the arguments that make it where it does not; a sentence that
/// says what is wrong when it cannot be a directory (a file of the image is in its way, a
/// loop of links, a place the sandbox keeps for itself).
pub fn working_dir_args(rootfs: &Path, dir: &str) -> Result<WorkingDirArgs, WorkingDirError> {
    let wrong = |why: String| WorkingDirError {
        dir: dir.to_owned(),
        why,
    };
    if !dir.starts_with('/') {
        return Err(wrong(
            "it is not an absolute path; the image should name one like `/app`".to_owned(),
        ));
    }
    let resolved = resolve(rootfs, dir, true).map_err(|e| {
        wrong(match e {
            NotADir::File(p) => {
                format!("`{}` is a file in the image, not a directory", p.display())
            }
            NotADir::Loop => "its links go round in a loop".to_owned(),
            NotADir::Unreadable(p) => format!(
                "`{}` in the image cannot be read by the control plane",
                p.display()
            ),
        })
    })?;
    let full = match &resolved {
        Resolved::Found(p) => p.clone(),
        Resolved::Missing { existing, missing } => {
            missing.iter().fold(existing.clone(), |p, m| p.join(m))
        }
    };
    let top: Option<String> = components(&full).front().cloned();
    let depth = components(&full).len();
    if let Some(top) = top.as_deref() {
        if RUN_MOUNTS.contains(&top) {
            return Ok(WorkingDirArgs {
                early: Vec::new(),
                late: if depth > 1 {
                    vec!["--dir".to_owned(), full.display().to_string()]
                } else {
                    Vec::new()
                },
            });
        }
        if SYSTEM_MOUNTS.contains(&top) {
            if depth == 1 && ["proc", "dev", "sys"].contains(&top) {
                return Ok(WorkingDirArgs::default());
            }
            return Err(wrong(format!(
                "it is under `/{top}`, which the sandbox mounts for itself"
            )));
        }
    }
    let Resolved::Missing { existing, missing } = resolved else {
        return Ok(WorkingDirArgs::default());
    };
    let s = |p: &Path| p.display().to_string();
    let first = existing.join(&missing[0]);
    let mut early = Vec::new();
    if existing != Path::new("/") {
        // The parent is part of the image's read-only tree: a tmpfs over it holds the mount
        // point, with each of its entries bound again as the image has it.
        early.extend(cover_args(rootfs, &existing));
    }
    early.extend(["--tmpfs".to_owned(), s(&first)]);
    if existing != Path::new("/") {
        early.extend(["--remount-ro".to_owned(), s(&existing)]);
    }
    if missing.len() > 1 {
        early.extend(["--dir".to_owned(), s(&full)]);
    }
    Ok(WorkingDirArgs {
        early,
        late: Vec::new(),
    })
}

/// bubblewrap's arguments that cover `dir` (a directory of the image's read-only tree, as the
/// run sees it) with a tmpfs of the run's own and bind each of its entries again as the image
/// has it: what the run sees there is unchanged, and new mount points can be made in it. The
/// caller remounts `dir` read-only (`--remount-ro`) once they are made.
pub fn cover_args(rootfs: &Path, dir: &Path) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    let mut args = vec!["--tmpfs".to_owned(), s(dir)];
    let mut entries: Vec<_> = std::fs::read_dir(host(rootfs, dir))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let inside = dir.join(entry.file_name());
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(entry.path()) {
                args.extend(["--symlink".to_owned(), s(&target), s(&inside)]);
            }
        } else if meta.is_dir() || meta.is_file() {
            args.extend(["--ro-bind".to_owned(), s(&entry.path()), s(&inside)]);
        }
    }
    args
}

/// The most entries a directory of an image may hold for [`mount_place`] to cover it: each is
/// one more mount for bubblewrap, and each costs it a read of the mount table.
pub const MAX_COVERED_ENTRIES: usize = 128;

/// Where the run's sandbox can mount something of its own at a path of an image's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlace {
    /// The path in the run, links resolved in the tree.
    pub path: PathBuf,
    /// Whether the tree has it already (a file or directory to mount over).
    pub exists: bool,
    /// The image's directory to cover first ([`cover_args`]) so that what `path` lacks can be
    /// made there; `None` when nothing is to be made, or it goes on the root's own tmpfs.
    pub cover: Option<PathBuf>,
}

/// Why nothing can be mounted at a path of an image's tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("`{}` in the image is a file, not a directory", .0.display())]
    File(PathBuf),
    #[error("`{}` in the image is a directory, not a file", .0.display())]
    Directory(PathBuf),
    #[error("its links in the image go round in a loop")]
    Loop,
    #[error("`{}` in the image cannot be read by the control plane", .0.display())]
    Unreadable(PathBuf),
    #[error("it leads under `/{0}`, which the sandbox mounts for itself")]
    Reserved(String),
    #[error(
        "`{}` in the image holds {entries} entries, more than the {MAX_COVERED_ENTRIES} the sandbox binds again over a tmpfs of the run's own",
        .dir.display()
    )]
    TooMany { dir: PathBuf, entries: usize },
}

/// Where `inside` (an absolute path; `dir`: a directory, else a file) can be a mount point in
/// the run's root made from the image at `rootfs`, which is read-only and never written: over
/// what the tree has there, or made on a tmpfs of the run's own (the root's, or one covering
/// the deepest directory the tree has, [`cover_args`]).
pub fn mount_place(rootfs: &Path, inside: &str, dir: bool) -> Result<MountPlace, PlaceError> {
    let resolved = resolve(rootfs, inside, dir).map_err(|e| match e {
        NotADir::File(p) => PlaceError::File(p),
        NotADir::Loop => PlaceError::Loop,
        NotADir::Unreadable(p) => PlaceError::Unreadable(p),
    })?;
    let (path, exists, existing) = match resolved {
        Resolved::Found(p) => (p.clone(), true, p),
        Resolved::Missing { existing, missing } => {
            let full = missing.iter().fold(existing.clone(), |p, m| p.join(m));
            (full, false, existing)
        }
    };
    if let Some(top) = components(&path).front()
        && (RUN_MOUNTS.contains(&top.as_str()) || SYSTEM_MOUNTS.contains(&top.as_str()))
    {
        return Err(PlaceError::Reserved(top.clone()));
    }
    if exists {
        let meta = std::fs::symlink_metadata(host(rootfs, &path))
            .map_err(|_| PlaceError::Unreadable(path.clone()))?;
        if !dir && meta.is_dir() {
            return Err(PlaceError::Directory(path));
        }
        return Ok(MountPlace {
            path,
            exists,
            cover: None,
        });
    }
    if existing == Path::new("/") {
        return Ok(MountPlace {
            path,
            exists,
            cover: None,
        });
    }
    let entries = std::fs::read_dir(host(rootfs, &existing))
        .map_err(|_| PlaceError::Unreadable(existing.clone()))?
        .count();
    if entries > MAX_COVERED_ENTRIES {
        return Err(PlaceError::TooMany {
            dir: existing,
            entries,
        });
    }
    Ok(MountPlace {
        path,
        exists,
        cover: Some(existing),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    use std::path::PathBuf;

    use super::{
        MAX_COVERED_ENTRIES, MountPlace, NotADir, PlaceError, Resolved, has_program, mount_place,
        resolve, working_dir_args,
    };

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        std::fs::create_dir_all(r.join("usr/src/lib")).unwrap();
        std::fs::create_dir_all(r.join("tmp")).unwrap();
        symlink("usr/bin", r.join("bin")).unwrap();
        std::fs::write(r.join("usr/bin/python3.11"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            r.join("usr/bin/python3.11"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        symlink("python3.11", r.join("usr/bin/python3")).unwrap();
        std::fs::write(r.join("usr/bin/notes"), "not a program").unwrap();
        symlink("/usr/bin/python3", r.join("usr/src/py")).unwrap();
        symlink("/../../../etc", r.join("usr/src/up")).unwrap();
        symlink("loop2", r.join("loop1")).unwrap();
        symlink("loop1", r.join("loop2")).unwrap();
        std::fs::write(r.join("file"), "x").unwrap();
        t
    }

    #[test]
    fn paths_resolve_inside_the_tree_links_and_all() {
        let t = tree();
        let r = t.path();
        assert_eq!(
            resolve(r, "/bin/python3", false),
            Ok(Resolved::Found(PathBuf::from("/usr/bin/python3.11")))
        );
        assert_eq!(
            resolve(r, "/usr/src/py", false),
            Ok(Resolved::Found(PathBuf::from("/usr/bin/python3.11")))
        );
        // A link that climbs out stays at the tree's root: this machine's /etc is not seen.
        assert_eq!(
            resolve(r, "/usr/src/up/passwd", false),
            Ok(Resolved::Missing {
                existing: PathBuf::from("/"),
                missing: vec!["etc".to_owned(), "passwd".to_owned()]
            })
        );
        assert_eq!(
            resolve(r, "/usr/src/app/x/..", true),
            Ok(Resolved::Missing {
                existing: PathBuf::from("/usr/src"),
                missing: vec!["app".to_owned()]
            })
        );
        assert_eq!(resolve(r, "/loop1/x", true), Err(NotADir::Loop));
        assert_eq!(
            resolve(r, "/file/x", true),
            Err(NotADir::File(PathBuf::from("/file")))
        );
        assert!(has_program(r, "/nowhere:relative:/bin", "python3"));
        assert!(!has_program(r, "/bin", "python"));
        assert!(!has_program(r, "/usr/bin", "notes"), "not executable");
    }

    #[test]
    fn a_missing_working_dir_is_made_on_a_tmpfs_of_the_run_s_own() {
        let t = tree();
        let r = t.path();
        let src = r.join("usr/src/lib").display().to_string();
        assert_eq!(working_dir_args(r, "/usr/src"), Ok(Default::default()));
        // Under `/`: a tmpfs at the first missing directory, the rest made in it.
        let args = working_dir_args(r, "/app/sub").unwrap();
        assert_eq!(args.early, ["--tmpfs", "/app", "--dir", "/app/sub"]);
        // Deeper: the parent shadowed by a tmpfs with its entries bound again, then
        // read-only again, the new directory a tmpfs of its own below it.
        let args = working_dir_args(r, "/usr/src/app").unwrap();
        assert_eq!(
            args.early,
            [
                "--tmpfs",
                "/usr/src",
                "--ro-bind",
                &src,
                "/usr/src/lib",
                "--symlink",
                "/usr/bin/python3",
                "/usr/src/py",
                "--symlink",
                "/../../../etc",
                "/usr/src/up",
                "--tmpfs",
                "/usr/src/app",
                "--remount-ro",
                "/usr/src",
            ]
        );
        // Through a link: made where the link leads.
        let args = working_dir_args(r, "/bin/app").unwrap();
        assert_eq!(args.early[..2], ["--tmpfs", "/usr/bin"]);
        // In the run's own writable places: made there, after they are bound.
        let args = working_dir_args(r, "/tmp/app").unwrap();
        assert_eq!(
            (args.early.len(), args.late),
            (0, vec!["--dir".to_owned(), "/tmp/app".to_owned()])
        );
        assert_eq!(working_dir_args(r, "/workspace"), Ok(Default::default()));
        // What cannot be: said.
        let e = working_dir_args(r, "/file/app").unwrap_err().to_string();
        assert_eq!(
            e,
            "the image's WorkingDir `/file/app` cannot be where the run starts: `/file` is a file in the image, not a directory"
        );
        assert!(
            working_dir_args(r, "/proc/self")
                .unwrap_err()
                .to_string()
                .contains("which the sandbox mounts for itself")
        );
        assert!(
            working_dir_args(r, "app")
                .unwrap_err()
                .to_string()
                .contains("not an absolute path")
        );
        assert!(
            working_dir_args(r, "/loop1")
                .unwrap_err()
                .to_string()
                .contains("loop")
        );
    }

    /// Where the run's own files can go in an image's read-only tree: over what it has, on
    /// the root's tmpfs, or on a tmpfs covering the deepest directory it has; never under
    /// the sandbox's own places, never over a directory with a file, never a cover of a
    /// directory too big to bind again entry by entry.
    #[test]
    fn a_mount_place_is_found_in_the_tree_or_made_on_a_cover_of_the_run_s_own() {
        let t = tree();
        let r = t.path();
        let place = |path: &str, cover: Option<&str>, exists: bool| MountPlace {
            path: PathBuf::from(path),
            exists,
            cover: cover.map(PathBuf::from),
        };
        assert_eq!(
            mount_place(r, "/file", false),
            Ok(place("/file", None, true))
        );
        assert_eq!(
            mount_place(r, "/run/x/socket", false),
            Ok(place("/run/x/socket", None, false))
        );
        assert_eq!(
            mount_place(r, "/bin/nvidia/x", true),
            Ok(place("/usr/bin/nvidia/x", Some("/usr/bin"), false))
        );
        assert_eq!(
            mount_place(r, "/usr/src", false),
            Err(PlaceError::Directory(PathBuf::from("/usr/src")))
        );
        assert_eq!(
            mount_place(r, "/file/x", true),
            Err(PlaceError::File(PathBuf::from("/file")))
        );
        assert_eq!(
            mount_place(r, "/tmp/x", false),
            Err(PlaceError::Reserved("tmp".to_owned()))
        );
        assert_eq!(mount_place(r, "/loop1/x", true), Err(PlaceError::Loop));
        for i in 0..=MAX_COVERED_ENTRIES {
            std::fs::write(r.join(format!("usr/src/lib/{i}")), "").unwrap();
        }
        assert_eq!(
            mount_place(r, "/usr/src/lib/nvidia/x", true),
            Err(PlaceError::TooMany {
                dir: PathBuf::from("/usr/src/lib"),
                entries: MAX_COVERED_ENTRIES + 1
            })
        );
    }
}
