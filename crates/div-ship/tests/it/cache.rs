//! The hash cache: an unchanged tree is not read again; any change, or a racy mtime, is.

use std::fs;
use std::path::Path;

use div_ship::{ShipOptions, Shipment};

use crate::support::{set_mtime, write};

fn ship(dir: &Path, cache: &Path) -> Shipment {
    div_ship::collect(
        dir,
        &ShipOptions {
            cache: Some(cache.to_owned()),
            ..Default::default()
        },
    )
    .unwrap()
}

/// A tree of three files last modified an hour ago, and where its cache goes.
fn tree() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("code");
    for (path, content) in [("a.py", "aaaa"), ("b/b.py", "bbbb"), ("c.bin", "cccccccc")] {
        write(&dir, path, content);
        set_mtime(&dir, path, -3600);
    }
    let cache = tmp.path().join("cache/ship.cache");
    (tmp, dir, cache)
}

#[test]
fn an_unchanged_tree_hashes_nothing() {
    let (_tmp, dir, cache) = tree();
    let first = ship(&dir, &cache);
    assert_eq!(
        (first.stats.hashed_files, first.stats.hashed_bytes),
        (3, 16)
    );
    let second = ship(&dir, &cache);
    assert_eq!(
        (second.stats.hashed_files, second.stats.cached_files),
        (0, 3)
    );
    assert_eq!(second.manifest, first.manifest);
}

#[test]
fn same_size_same_mtime_new_content_is_rehashed() {
    let (_tmp, dir, cache) = tree();
    let first = ship(&dir, &cache);
    let mtime = fs::metadata(dir.join("a.py")).unwrap().modified().unwrap();
    fs::write(dir.join("a.py"), "AAAA").unwrap();
    fs::File::options()
        .write(true)
        .open(dir.join("a.py"))
        .unwrap()
        .set_times(fs::FileTimes::new().set_modified(mtime))
        .unwrap();
    let second = ship(&dir, &cache);
    assert_eq!(second.stats.hashed_files, 1, "the ctime changed");
    assert_ne!(second.manifest.get("a.py"), first.manifest.get("a.py"));
    assert_eq!(
        second.manifest.get("a.py").unwrap().hash.as_deref(),
        Some(blake3::hash(b"AAAA").to_hex().as_str())
    );
}

#[test]
fn a_changed_size_is_rehashed() {
    let (_tmp, dir, cache) = tree();
    ship(&dir, &cache);
    write(&dir, "c.bin", "longer content");
    set_mtime(&dir, "c.bin", -3600);
    let second = ship(&dir, &cache);
    assert_eq!(
        (second.stats.hashed_files, second.stats.hashed_bytes),
        (1, 14)
    );
}

#[test]
fn a_racy_mtime_is_rehashed_every_time() {
    let (_tmp, dir, cache) = tree();
    ship(&dir, &cache);
    // Modified at or after the cache was written: it may have changed within the same
    // timestamp tick, so its stat proves nothing.
    set_mtime(&dir, "a.py", 3600);
    let second = ship(&dir, &cache);
    assert_eq!(second.stats.hashed_files, 1);
    let third = ship(&dir, &cache);
    assert_eq!(third.stats.hashed_files, 1);
}

#[test]
fn a_cache_for_another_folder_or_broken_is_not_used() {
    let (tmp, dir, cache) = tree();
    ship(&dir, &cache);
    let other = tmp.path().join("other");
    fs::create_dir_all(&other).unwrap();
    write(&other, "a.py", "aaaa");
    set_mtime(&other, "a.py", -3600);
    assert_eq!(ship(&other, &cache).stats.hashed_files, 1);
    fs::write(&cache, b"garbage\0").unwrap();
    let again = ship(&dir, &cache);
    assert_eq!(again.stats.hashed_files, 3);
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
}

#[test]
fn a_cache_that_cannot_be_written_is_a_warning() {
    let (tmp, dir, _) = tree();
    write(tmp.path(), "file", "");
    let shipment = ship(&dir, &tmp.path().join("file/cache"));
    assert_eq!(shipment.files(), 3);
    assert_eq!(shipment.warnings.len(), 1, "{:?}", shipment.warnings);
}

#[test]
fn big_files_hash_like_blake3() {
    let tmp = tempfile::tempdir().unwrap();
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(tmp.path().join("big.bin"), &content).unwrap();
    assert_eq!(
        div_ship::hash_file(&tmp.path().join("big.bin")).unwrap(),
        blake3::hash(&content).to_hex().as_str()
    );
}

#[test]
fn a_truncated_cache_is_not_used() {
    let (_tmp, dir, cache) = tree();
    ship(&dir, &cache);
    let bytes = fs::read(&cache).unwrap();
    // All inside the last record (`c.bin`'s, 89 bytes).
    for cut in [1, 32, 80] {
        fs::write(&cache, &bytes[..bytes.len() - cut]).unwrap();
        let again = ship(&dir, &cache);
        assert_eq!(again.stats.hashed_files, 3, "cut {cut} bytes");
        fs::write(&cache, &bytes).unwrap();
    }
}
