//! What the server asks of the disk beyond std: how much a tree holds.

use std::fs;
use std::path::Path;

/// The bytes the regular files under `path` hold (or `path`'s own, for a file), without
/// following symlinks; what cannot be read counts nothing.
pub fn tree_bytes(path: &Path) -> u64 {
    tree_bytes_at_most(path, usize::MAX).0
}

/// [`tree_bytes`], stopping after `max_entries` entries: the bytes counted and whether the
/// count stopped there. Links are counted as nothing (never followed), FIFOs and devices too
/// (never opened), folders walked without recursion, so no depth a run made can exhaust the
/// stack and no number of entries can keep it walking past the bound.
pub fn tree_bytes_at_most(path: &Path, max_entries: usize) -> (u64, bool) {
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > max_entries {
            return (total, true);
        }
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(dir) = fs::read_dir(&p) {
                stack.extend(dir.flatten().map(|e| e.path()));
            }
        } else if meta.is_file() {
            total = total.saturating_add(meta.len());
        }
    }
    (total, false)
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

    #[test]
    fn a_bounded_count_says_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("f{i}")), [0u8; 3]).unwrap();
        }
        // The folder and its five files: six entries.
        assert_eq!(super::tree_bytes_at_most(dir.path(), 6), (15, false));
        let (bytes, cut) = super::tree_bytes_at_most(dir.path(), 3);
        assert!(cut);
        assert_eq!(bytes, 6, "two of the files were counted before the bound");
    }
}
