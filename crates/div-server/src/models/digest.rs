//! A committed tree's model digest (`div_spec::ModelDigest`), read from its files: each
//! file's SHA-256 and mode, each link's target, by path. The tree is committed, so no run can
//! change it while it is read (its files are bound read-only in every run).

use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use div_spec::{DigestMode, ModelDigest, Sha256Hex};

/// What a tree holds: its digest, its files' count and their bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeDigest {
    pub(crate) digest: String,
    pub(crate) files: u64,
    pub(crate) bytes: u64,
}

/// The digest of the tree at `root`.
pub(crate) fn of_tree(root: &Path) -> std::io::Result<TreeDigest> {
    let mut digest = ModelDigest::new();
    let mut counted = TreeDigest {
        digest: String::new(),
        files: 0,
        bytes: 0,
    };
    walk(root, root, &mut digest, &mut counted)?;
    counted.digest = digest.finish();
    Ok(counted)
}

fn walk(
    root: &Path,
    dir: &Path,
    digest: &mut ModelDigest,
    counted: &mut TreeDigest,
) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(&path);
        let rel = rel.as_os_str().as_bytes();
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path)?;
            digest.add(
                rel,
                DigestMode::Symlink,
                &div_spec::sha256_hex(target.as_os_str().as_bytes()),
            );
        } else if meta.is_dir() {
            walk(root, &path, digest, counted)?;
        } else if meta.is_file() {
            let mut file = fs::File::open(&path)?;
            let mut hasher = Sha256Hex::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
            let mode = if meta.permissions().mode() & 0o100 != 0 {
                DigestMode::Executable
            } else {
                DigestMode::File
            };
            digest.add(rel, mode, &hasher.finish());
            counted.files += 1;
            counted.bytes += meta.len();
        }
    }
    Ok(())
}
