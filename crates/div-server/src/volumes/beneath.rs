//! Writing and reading beneath a volume without ever following a link a run left there:
//! each folder opened `O_NOFOLLOW | O_DIRECTORY` beneath the one before (made when missing
//! for a write), files placed by `renameat` and read `O_NOFOLLOW | O_NONBLOCK`. A run shares
//! the volume while the server works in it, so a folder checked a moment ago may be a link
//! now: these calls refuse it rather than write or read through it.

use std::fs;
use std::path::Path;

/// The folder `parts` beneath `root`, each opened without following a link (`O_NOFOLLOW |
/// O_DIRECTORY`, beneath the one before); with `make`, a missing one is made. `None`: one is
/// missing (without `make`). A link or a file on the way is an error (`ELOOP`, `ENOTDIR`).
pub(super) fn folder_beneath(
    root: &Path,
    parts: &[&std::ffi::OsStr],
    make: bool,
) -> std::io::Result<Option<rustix::fd::OwnedFd>> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(root, flags, Mode::empty())?;
    for part in parts {
        dir = match rustix::fs::openat(&dir, *part, flags, Mode::empty()) {
            Ok(next) => next,
            Err(rustix::io::Errno::NOENT) if make => {
                match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::openat(&dir, *part, flags, Mode::empty())?
            }
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
    }
    Ok(Some(dir))
}

/// `path`'s folders and name on disk, split.
pub(super) fn split(path: &Path) -> (Vec<&std::ffi::OsStr>, &std::ffi::OsStr) {
    let mut parts: Vec<&std::ffi::OsStr> = path.iter().collect();
    let name = parts.pop().unwrap_or_default();
    (parts, name)
}

/// Moves `tmp/path` over `root/path`: beneath folders opened without following links (made
/// when missing), replacing a file or a link there (the link itself), never a folder.
pub(super) fn place(root: &Path, tmp: &Path, path: &str) -> std::io::Result<()> {
    let rel = div_ship::fs_path(path).ok_or_else(|| std::io::Error::other("not a valid path"))?;
    let (parts, name) = split(&rel);
    let Some(dir) = folder_beneath(root, &parts, true)? else {
        return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    };
    rustix::fs::renameat(rustix::fs::CWD, tmp.join(&rel), &dir, name)?;
    Ok(())
}

/// Whether the volume holds `entry` as it is: the same file content and mode bit, or the
/// same link. The file is opened without following a link, and never blocks (a FIFO a run
/// left is not the file).
pub(super) fn holds(root: &Path, entry: &div_api::TreeEntry) -> bool {
    use rustix::fs::{Mode, OFlags};
    let Some(rel) = div_ship::fs_path(&entry.path) else {
        return false;
    };
    let (parts, name) = split(&rel);
    let Ok(Some(dir)) = folder_beneath(root, &parts, false) else {
        return false;
    };
    match entry.kind {
        div_api::EntryKind::File => {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let Ok(fd) = rustix::fs::openat(&dir, name, flags, Mode::empty()) else {
                return false;
            };
            let file = fs::File::from(fd);
            let Ok(meta) = file.metadata() else {
                return false;
            };
            use std::os::unix::fs::PermissionsExt;
            let executable = meta.permissions().mode() & 0o100 != 0;
            if !meta.is_file() || meta.len() != entry.size || executable != entry.executable {
                return false;
            }
            let mut hasher = blake3::Hasher::new();
            hasher.update_reader(file).is_ok()
                && Some(hasher.finalize().to_hex().as_str()) == entry.hash.as_deref()
        }
        div_api::EntryKind::Symlink => {
            rustix::fs::readlinkat(&dir, name, Vec::new()).is_ok_and(|t| {
                Some(div_ship::encode_path(t.as_bytes()).as_ref()) == entry.target.as_deref()
            })
        }
    }
}

/// `root/rel` opened for reading beneath `root` without following a link anywhere, never
/// blocking; `None` when it is not a regular file (or missing).
pub(super) fn open_in(root: &Path, rel: &Path) -> std::io::Result<Option<fs::File>> {
    use rustix::fs::{Mode, OFlags};
    let (parts, name) = split(rel);
    if name.is_empty() {
        return Ok(None);
    }
    let Some(dir) = folder_beneath(root, &parts, false)? else {
        return Ok(None);
    };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = fs::File::from(rustix::fs::openat(&dir, name, flags, Mode::empty())?);
    Ok(file.metadata()?.is_file().then_some(file))
}

#[cfg(test)]
mod tests {
    use super::{folder_beneath, open_in, place};
    use std::ffi::OsStr;
    use std::fs;

    /// A run swaps a folder of the volume for a link to a host folder after the put checked
    /// it: the write step itself, beneath folders opened without following links, refuses
    /// and writes nothing through it.
    #[test]
    fn a_folder_swapped_for_a_link_after_the_check_is_never_written_through() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let (root, staged, outside) = (
            tmp.path().join("vol"),
            tmp.path().join("staged"),
            tmp.path().join("outside"),
        );
        for d in [&root, &staged.join("sub"), &outside] {
            fs::create_dir_all(d).expect("mkdir");
        }
        fs::write(staged.join("sub/x"), "put").expect("write");
        std::os::unix::fs::symlink(&outside, root.join("sub")).expect("link");
        // `O_DIRECTORY | O_NOFOLLOW` on a link: `ENOTDIR` (`ELOOP` on some kernels).
        let refused =
            |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR));
        let e = place(&root, &staged, "sub/x").expect_err("refused");
        assert!(refused(&e), "{e}");
        assert!(!outside.join("x").exists(), "written through the link");
        assert!(staged.join("sub/x").exists());
        let e = folder_beneath(&root, &[OsStr::new("sub")], true).expect_err("refused");
        assert!(refused(&e), "{e}");
        assert!(fs::read_dir(&outside).expect("outside").next().is_none());
        // A file on the way: ENOTDIR, nothing made.
        fs::remove_file(root.join("sub")).expect("rm");
        fs::write(root.join("sub"), "a file").expect("write");
        let e = place(&root, &staged, "sub/x").expect_err("refused");
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
    }

    /// A link a run left in a file's place is replaced itself: its target is untouched.
    #[test]
    fn a_link_in_a_files_place_is_replaced_never_followed() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let (root, staged) = (tmp.path().join("vol"), tmp.path().join("staged"));
        for d in [&root, &staged] {
            fs::create_dir_all(d).expect("mkdir");
        }
        let target = tmp.path().join("host-file");
        fs::write(&target, "host").expect("write");
        std::os::unix::fs::symlink(&target, root.join("f")).expect("link");
        fs::write(staged.join("f"), "put").expect("write");
        place(&root, &staged, "f").expect("placed");
        assert_eq!(fs::read_to_string(&target).expect("host"), "host");
        let meta = fs::symlink_metadata(root.join("f")).expect("f");
        assert!(meta.is_file());
        assert_eq!(fs::read_to_string(root.join("f")).expect("f"), "put");
        // Missing folders on the way are made.
        fs::create_dir_all(staged.join("a/b")).expect("mkdir");
        fs::write(staged.join("a/b/c"), "deep").expect("write");
        place(&root, &staged, "a/b/c").expect("placed");
        assert_eq!(fs::read_to_string(root.join("a/b/c")).expect("c"), "deep");
    }

    /// A file swapped for a link to a host file, or for a FIFO, after its path was resolved:
    /// the open beneath the volume refuses the link and never blocks on the FIFO.
    #[test]
    fn a_read_never_follows_a_swapped_link_nor_blocks_on_a_fifo() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let root = tmp.path().join("vol");
        fs::create_dir_all(root.join("sub")).expect("mkdir");
        fs::write(root.join("sub/f"), "data").expect("write");
        let rel = std::path::Path::new("sub/f");
        let mut read = String::new();
        std::io::Read::read_to_string(
            &mut open_in(&root, rel).expect("open").expect("a file"),
            &mut read,
        )
        .expect("read");
        assert_eq!(read, "data");
        let host = tmp.path().join("host-secret");
        fs::write(&host, "secret").expect("write");
        fs::remove_file(root.join("sub/f")).expect("rm");
        std::os::unix::fs::symlink(&host, root.join("sub/f")).expect("link");
        assert!(open_in(&root, rel).is_err(), "opened through a link");
        fs::remove_file(root.join("sub/f")).expect("rm");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("sub/f"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        assert!(
            open_in(&root, rel)
                .expect("opens without blocking")
                .is_none(),
            "a FIFO taken for a file"
        );
        fs::remove_dir_all(root.join("sub")).expect("rm");
        std::os::unix::fs::symlink(tmp.path(), root.join("sub")).expect("link");
        fs::write(tmp.path().join("f"), "outside").expect("write");
        assert!(
            open_in(&root, rel).is_err(),
            "opened through a linked folder"
        );
    }
}
