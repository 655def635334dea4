//! What the server asks of the disk beyond std: how much a tree holds.

use std::fs;
use std::path::Path;

/// The bytes the regular files under `path` hold (or `path`'s own, for a file), without
/// following symlinks; what cannot be read counts nothing.
pub(crate) fn tree_bytes(path: &Path) -> u64 {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::read_dir(path)
            .map(|d| d.flatten().map(|e| tree_bytes(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) if m.is_file() => m.len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_files_below_and_not_what_links_point_at() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/one"), [0u8; 10]).unwrap();
        std::fs::write(dir.path().join("a/b/two"), [0u8; 32]).unwrap();
        std::os::unix::fs::symlink("/usr", dir.path().join("a/usr")).unwrap();
        assert_eq!(super::tree_bytes(dir.path()), 42);
        assert_eq!(super::tree_bytes(&dir.path().join("a/one")), 10);
        assert_eq!(super::tree_bytes(&dir.path().join("missing")), 0);
    }
}
