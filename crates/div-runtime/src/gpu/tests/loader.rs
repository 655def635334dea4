//! The run's loader cache, against glibc's own reading of it.

use std::path::Path;

use super::super::ldcache::{self, Entry, LdCache, OWN_FLAGS};

fn image_cache() -> LdCache {
    let entry = |key: &str, value: &str, flags: i32, hwcap: u64| Entry {
        flags,
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        osversion: 0,
        hwcap,
    };
    LdCache {
        entries: vec![
            entry("libz.so.1", "/lib/libz.so.1", OWN_FLAGS, 0),
            entry(
                "libcuda.so.1",
                "/usr/lib/glibc-hwcaps/x86-64-v3/libcuda.so.1",
                OWN_FLAGS,
                1 << 62 | 3 << 32,
            ),
            entry(
                "libcuda.so.1",
                "/usr/local/cuda/compat/libcuda.so.1",
                OWN_FLAGS,
                0,
            ),
            entry("libcuda.so.1", "/usr/lib32/libcuda.so.1", 0x0003, 0),
            entry("libc.so.6", "/lib/libc.so.6", OWN_FLAGS, 0),
        ],
        hwcaps: vec![b"x86-64-v3".to_vec()],
    }
}

const DRIVER_ENTRIES: [(&str, &str); 2] = [
    ("libcuda.so.1", "/.div/nvidia/lib/libcuda.so.1"),
    ("libnvidia-ml.so.1", "/.div/nvidia/lib/libnvidia-ml.so.1"),
];

fn with_driver(cache: LdCache) -> LdCache {
    let driver: Vec<(String, String)> = DRIVER_ENTRIES
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ldcache::with_libraries(cache, &driver)
}

/// The entries' (name, file) in order.
pub(super) fn listed(cache: &LdCache) -> Vec<(String, String)> {
    cache
        .entries
        .iter()
        .map(|e| {
            (
                String::from_utf8_lossy(&e.key).into_owned(),
                String::from_utf8_lossy(&e.value).into_owned(),
            )
        })
        .collect()
}

/// A cache written here reads back the same (glibc-hwcaps names and all); the driver's
/// entries replace the image's of the same name and ABI and nothing else, in the loader's
/// order; what is not a cache is said, never taken for one.
#[test]
fn a_loader_cache_keeps_the_image_s_entries_and_the_driver_s_replace_theirs_by_name() {
    let image = image_cache();
    let bytes = ldcache::write(&image, "a test");
    assert_eq!(ldcache::parse(&bytes).unwrap(), image, "a round trip");
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        listed(&with_driver(image)),
        vec![
            pair("libz.so.1", "/lib/libz.so.1"),
            pair("libnvidia-ml.so.1", "/.div/nvidia/lib/libnvidia-ml.so.1"),
            pair("libcuda.so.1", "/.div/nvidia/lib/libcuda.so.1"),
            pair("libcuda.so.1", "/usr/lib32/libcuda.so.1"),
            pair("libc.so.6", "/lib/libc.so.6"),
        ]
    );
    assert_eq!(
        ldcache::parse(b"not a cache"),
        Err(super::super::LdCacheError::Magic)
    );
    assert_eq!(
        ldcache::parse(&bytes[..60]),
        Err(super::super::LdCacheError::Truncated)
    );
    let mut big_endian = bytes.clone();
    big_endian[28] = 3;
    assert_eq!(
        ldcache::parse(&big_endian),
        Err(super::super::LdCacheError::ByteOrder)
    );
    // A crafted one costs a moment at most: entries and names are bounded.
    let mut crafted = bytes[..48].to_vec();
    crafted[20..24].copy_from_slice(&70_000u32.to_le_bytes());
    crafted.resize(48 + 70_000 * 24 + 8192, b'x');
    assert_eq!(
        ldcache::parse(&crafted),
        Err(super::super::LdCacheError::TooBig)
    );
    crafted[20..24].copy_from_slice(&1u32.to_le_bytes());
    crafted[52..56].copy_from_slice(&100u32.to_le_bytes());
    assert_eq!(
        ldcache::parse(&crafted),
        Err(super::super::LdCacheError::Truncated)
    );
}

/// `ldconfig -p -C <file>`'s lines, with this machine's glibc; `None` without ldconfig.
fn glibc_lists(file: &Path) -> Option<Vec<String>> {
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).is_file())?;
    let out = std::process::Command::new(ldconfig)
        .args(["-p", "-C"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
    )
}

/// glibc's own ldconfig reads the cache written for a run: every entry, in order, and who
/// wrote it.
#[test]
fn glibc_s_ldconfig_reads_the_run_s_loader_cache_as_it_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ld.so.cache");
    let merged = with_driver(image_cache());
    std::fs::write(&file, ldcache::write(&merged, "div's test")).unwrap();
    let Some(lines) = glibc_lists(&file) else {
        eprintln!(
            "SKIPPED glibc_s_ldconfig_reads_the_run_s_loader_cache_as_it_was_written: no ldconfig here"
        );
        return;
    };
    let files: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.rsplit_once(" => ").map(|(_, f)| f))
        .collect();
    let want: Vec<String> = listed(&merged).into_iter().map(|(_, f)| f).collect();
    assert_eq!(files, want, "{lines:?}");
    assert!(
        lines.iter().any(|l| l == "Cache generated by: div's test"),
        "{lines:?}"
    );
}

/// This machine's own cache, read and written again, is what glibc's ldconfig lists for the
/// original, entry for entry.
#[test]
fn this_machine_s_own_loader_cache_reads_and_writes_again_as_glibc_lists_it() {
    let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
        eprintln!("SKIPPED: this machine has no /etc/ld.so.cache");
        return;
    };
    let cache = ldcache::parse(&bytes).unwrap();
    assert!(!cache.entries.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ld.so.cache");
    std::fs::write(&file, ldcache::write(&cache, "again")).unwrap();
    let entries = |lines: Option<Vec<String>>| {
        lines.map(|l| {
            l.into_iter()
                .filter(|l| l.contains("=>"))
                .collect::<Vec<_>>()
        })
    };
    let Some(again) = entries(glibc_lists(&file)) else {
        eprintln!("SKIPPED: no ldconfig here");
        return;
    };
    assert_eq!(
        Some(again),
        entries(glibc_lists(Path::new("/etc/ld.so.cache")))
    );
}
