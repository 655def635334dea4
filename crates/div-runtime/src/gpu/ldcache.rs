//! glibc's loader cache (`/etc/ld.so.cache`): an image's read without trusting it, the
//! driver's libraries put in it, and the result written as a file of the run's own, which the
//! sandbox binds over the image's. The image's tree is never written.
//!
//! The format is glibc's "new" one (`glibc-ld.so.cache1.1`, `elf/dl-cache.h`), which every
//! glibc since 2.2 reads and which ldconfig writes alone since 2.32: a 48-byte header, 24-byte
//! entries sorted for the loader's binary search (greatest name first by [`libcmp`]),
//! NUL-terminated strings whose offsets count from the header, then an extension directory
//! (the `glibc-hwcaps` subdirectories of glibc 2.33 and later, and who wrote the file). A
//! cache in the older compatible format (an `ld.so-1.7.0` table before the new one) is read
//! through the new table it holds. Little-endian only, as every machine div runs on.

use std::cmp::Ordering;
use std::collections::HashMap;

const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
const HEADER: usize = 48;
const ENTRY: usize = 24;
const OLD_HEADER: usize = 16;
const OLD_ENTRY: usize = 12;
const EXTENSION_MAGIC: u32 = 0xeaa4_2174;
const TAG_GENERATOR: u32 = 0;
const TAG_HWCAPS: u32 = 1;
/// The header's flags: this file is little-endian (`cache_file_new_flags_endian_little`).
const LITTLE_ENDIAN: u8 = 2;
/// The most entries read from an image's cache (a system has a few thousand), and the longest
/// name or path in one (`PATH_MAX`): an image's cache is read without trusting it, and these
/// keep a crafted one from costing more than a moment.
const MAX_ENTRIES: usize = 1 << 16;
const MAX_STRING: usize = 4096;

/// One entry: a library's name (its soname, or a development link's name), the file the
/// loader opens for it, and glibc's flags (the ABI: `0x0303` is x86-64's libc6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) flags: i32,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) osversion: u32,
    pub(crate) hwcap: u64,
}

/// A loader cache: its entries in the order the loader searches them, and the names of the
/// `glibc-hwcaps` subdirectories its entries point at by index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LdCache {
    pub(crate) entries: Vec<Entry>,
    pub(crate) hwcaps: Vec<Vec<u8>>,
}

/// Why a file is not a loader cache this module reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LdCacheError {
    #[error("it is not a loader cache glibc's ldconfig writes")]
    Magic,
    #[error("it is cut short, or an offset in it points outside it")]
    Truncated,
    #[error("it was written for a machine of the other byte order")]
    ByteOrder,
    #[error("it holds more than {MAX_ENTRIES} entries")]
    TooBig,
}

/// The flags of this machine's own libraries in a cache: libc6 (3) and the architecture's
/// 64-bit tag (x86-64 `0x0300`, AArch64 `0x0a00`).
pub(crate) const OWN_FLAGS: i32 = if cfg!(target_arch = "aarch64") {
    0x0a03
} else {
    0x0303
};

/// Whether an entry's `hwcap` names a `glibc-hwcaps` subdirectory by index (glibc's
/// `DL_CACHE_HWCAP_EXTENSION`, bit 62, beside a 10-bit ISA level at bit 32).
fn names_hwcaps(hwcap: u64) -> bool {
    (hwcap >> 32) & !0x3ff == 1 << 30
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, LdCacheError> {
    let b = bytes.get(at..at + 4).ok_or(LdCacheError::Truncated)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, LdCacheError> {
    let lo = u64::from(u32_at(bytes, at)?);
    let hi = u64::from(u32_at(bytes, at + 4)?);
    Ok(lo | hi << 32)
}

/// The NUL-terminated string at `at`.
fn c_string(bytes: &[u8], at: u32) -> Result<Vec<u8>, LdCacheError> {
    let rest = bytes.get(at as usize..).ok_or(LdCacheError::Truncated)?;
    let end = rest
        .iter()
        .take(MAX_STRING)
        .position(|b| *b == 0)
        .ok_or(LdCacheError::Truncated)?;
    Ok(rest[..end].to_vec())
}

/// Where the new-format table starts in `bytes`, and whether it is inside the older format.
fn new_table(bytes: &[u8]) -> Result<(usize, bool), LdCacheError> {
    if bytes.starts_with(MAGIC_NEW) {
        return Ok((0, false));
    }
    if !bytes.starts_with(MAGIC_OLD) {
        return Err(LdCacheError::Magic);
    }
    let old = u32_at(bytes, 12)? as usize;
    let end = old
        .checked_mul(OLD_ENTRY)
        .and_then(|n| n.checked_add(OLD_HEADER))
        .ok_or(LdCacheError::Truncated)?;
    let at = end.div_ceil(8) * 8;
    match bytes.get(at..) {
        Some(rest) if rest.starts_with(MAGIC_NEW) => Ok((at, true)),
        Some(_) => Err(LdCacheError::Magic),
        None => Err(LdCacheError::Truncated),
    }
}

/// Reads a loader cache. Entries that name a `glibc-hwcaps` subdirectory the file does not
/// list are left out (the loader would skip them too).
pub(crate) fn parse(bytes: &[u8]) -> Result<LdCache, LdCacheError> {
    let (at, compat) = new_table(bytes)?;
    let table = &bytes[at..];
    if table.len() < HEADER {
        return Err(LdCacheError::Truncated);
    }
    match table[28] & 3 {
        0 | LITTLE_ENDIAN => {}
        _ => return Err(LdCacheError::ByteOrder),
    }
    let count = u32_at(table, 20)? as usize;
    if (table.len() - HEADER) / ENTRY < count {
        return Err(LdCacheError::Truncated);
    }
    if count > MAX_ENTRIES {
        return Err(LdCacheError::TooBig);
    }
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let e = HEADER + i * ENTRY;
        entries.push(Entry {
            flags: u32_at(table, e)? as i32,
            key: c_string(table, u32_at(table, e + 4)?)?,
            value: c_string(table, u32_at(table, e + 8)?)?,
            osversion: u32_at(table, e + 12)?,
            hwcap: u64_at(table, e + 16)?,
        });
    }
    // The subdirectories' names count from the start of the file; in the older format the
    // file does not start at the new table, and glibc itself reads them inconsistently there:
    // they are not kept from such a file.
    let hwcaps = if compat {
        Vec::new()
    } else {
        hwcaps_names(table, u32_at(table, 32)?)?
    };
    entries.retain(|e| !names_hwcaps(e.hwcap) || (e.hwcap as u32 as usize) < hwcaps.len());
    Ok(LdCache { entries, hwcaps })
}

/// The `glibc-hwcaps` subdirectories' names from the extension directory at `offset`.
fn hwcaps_names(file: &[u8], offset: u32) -> Result<Vec<Vec<u8>>, LdCacheError> {
    if offset == 0 || !offset.is_multiple_of(4) || u32_at(file, offset as usize)? != EXTENSION_MAGIC
    {
        return Ok(Vec::new());
    }
    let at = offset as usize;
    let count = u32_at(file, at + 4)? as usize;
    for i in 0..count.min(64) {
        let s = at + 8 + i * 16;
        if u32_at(file, s)? != TAG_HWCAPS {
            continue;
        }
        let (start, size) = (
            u32_at(file, s + 8)? as usize,
            u32_at(file, s + 12)? as usize,
        );
        let mut names = Vec::new();
        for k in 0..(size / 4).min(MAX_ENTRIES) {
            names.push(c_string(file, u32_at(file, start + k * 4)?)?);
        }
        return Ok(names);
    }
    Ok(Vec::new())
}

/// `cache` with the driver's libraries (`(name, path in the run)`) in it: an entry of this
/// machine's ABI with the same name is replaced (the driver's wins, as the NVIDIA toolkit's
/// own folder listed first makes it win), every other entry kept as the image has it, all
/// sorted as the loader searches them.
pub(crate) fn with_libraries(mut cache: LdCache, libraries: &[(String, String)]) -> LdCache {
    cache.entries.retain(|e| {
        e.flags != OWN_FLAGS
            || !libraries
                .iter()
                .any(|(name, _)| libcmp(&e.key, name.as_bytes()) == Ordering::Equal)
    });
    cache
        .entries
        .extend(libraries.iter().map(|(name, path)| Entry {
            flags: OWN_FLAGS,
            key: name.as_bytes().to_vec(),
            value: path.as_bytes().to_vec(),
            osversion: 0,
            hwcap: 0,
        }));
    // As ldconfig sorts: by name, greatest first, then by flags (the same for every entry
    // of this machine's ABI); stable, so entries of one name and ABI keep their order.
    cache
        .entries
        .sort_by(|a, b| libcmp(&b.key, &a.key).then(b.flags.cmp(&a.flags)));
    cache
}

fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The file: header, entries, strings, then the extension directory (who wrote it, and the
/// `glibc-hwcaps` names when there are any).
pub(crate) fn write(cache: &LdCache, generator: &str) -> Vec<u8> {
    let strings_at = HEADER + ENTRY * cache.entries.len();
    let mut strings: Vec<u8> = Vec::new();
    let mut interned: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut intern = |s: &[u8]| -> u32 {
        if let Some(at) = interned.get(s) {
            return *at;
        }
        let at = offset(strings_at + strings.len());
        strings.extend_from_slice(s);
        strings.push(0);
        interned.insert(s.to_vec(), at);
        at
    };
    let mut entries = Vec::with_capacity(cache.entries.len() * ENTRY);
    for e in &cache.entries {
        entries.extend_from_slice(&e.flags.to_le_bytes());
        entries.extend_from_slice(&intern(&e.key).to_le_bytes());
        entries.extend_from_slice(&intern(&e.value).to_le_bytes());
        entries.extend_from_slice(&e.osversion.to_le_bytes());
        entries.extend_from_slice(&e.hwcap.to_le_bytes());
    }
    let hwcaps: Vec<u32> = cache.hwcaps.iter().map(|n| intern(n)).collect();
    let extension_at = (strings_at + strings.len()).div_ceil(4) * 4;
    let mut out = Vec::with_capacity(extension_at + 64 + generator.len());
    out.extend_from_slice(MAGIC_NEW);
    out.extend_from_slice(&offset(cache.entries.len()).to_le_bytes());
    out.extend_from_slice(&offset(strings.len()).to_le_bytes());
    out.extend_from_slice(&[LITTLE_ENDIAN, 0, 0, 0]);
    out.extend_from_slice(&offset(extension_at).to_le_bytes());
    out.extend_from_slice(&[0; 12]);
    out.extend_from_slice(&entries);
    out.extend_from_slice(&strings);
    out.resize(extension_at, 0);
    let sections = if hwcaps.is_empty() { 1 } else { 2 };
    let hwcaps_at = extension_at + 8 + 16 * sections;
    let generator_at = hwcaps_at + 4 * hwcaps.len();
    let mut words = vec![EXTENSION_MAGIC, offset(sections)];
    words.extend([
        TAG_GENERATOR,
        0,
        offset(generator_at),
        offset(generator.len()),
    ]);
    if !hwcaps.is_empty() {
        words.extend([TAG_HWCAPS, 0, offset(hwcaps_at), offset(4 * hwcaps.len())]);
    }
    words.extend(hwcaps);
    for word in words {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.extend_from_slice(generator.as_bytes());
    out
}

/// glibc's `_dl_cache_libcmp`: names compared byte by byte as C `char`s, but runs of digits
/// as numbers, so that `libfoo.so.10` sorts after `libfoo.so.9`. The loader's binary search
/// uses it, so the entries must be sorted by exactly it.
pub(crate) fn libcmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0usize, 0usize);
    let at = |s: &[u8], k: usize| s.get(k).copied().unwrap_or(0);
    let number = |s: &[u8], k: &mut usize| {
        let mut n: i32 = 0;
        while at(s, *k).is_ascii_digit() {
            n = n.wrapping_mul(10).wrapping_add(i32::from(at(s, *k) - b'0'));
            *k += 1;
        }
        n
    };
    while at(a, i) != 0 {
        let (x, y) = (at(a, i), at(b, j));
        if x.is_ascii_digit() {
            if !y.is_ascii_digit() {
                return Ordering::Greater;
            }
            let (m, n) = (number(a, &mut i), number(b, &mut j));
            if m != n {
                return m.cmp(&n);
            }
        } else if y.is_ascii_digit() {
            return Ordering::Less;
        } else if x != y {
            return c_char(x).cmp(&c_char(y));
        } else {
            i += 1;
            j += 1;
        }
    }
    c_char(0).cmp(&c_char(at(b, j)))
}

/// A byte as C's `char` compares it here (signed on x86-64, unsigned on AArch64).
fn c_char(b: u8) -> i32 {
    i32::from(b as std::ffi::c_char)
}
