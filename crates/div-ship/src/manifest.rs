//! The manifest: what a shipment holds, and the code id derived from it.

use serde::{Deserialize, Serialize};

pub use div_spec::{EntryKind, TreeEntry};

/// A manifest's entry: [`TreeEntry`] itself, the type the API commits (`div_api::TreeEntry`),
/// under the name div-ship gave it first.
pub type ManifestEntry = TreeEntry;

/// The list of shipped paths, sorted by path (bytewise), each path once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub entries: Vec<TreeEntry>,
}

/// What [`Manifest::digests`] gives: the code id and the tree's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digests {
    /// [`Manifest::id`].
    pub id: String,
    /// blake3 of the entries as a JSON list (`div_api::tree_digest`).
    pub tree: String,
}

impl Manifest {
    /// The manifest's canonical serialization: compact JSON of `{"entries":[…]}`, entries sorted
    /// by path, fields in the order `path, kind, executable, size, hash, target`, absent
    /// `hash`/`target` omitted. Identical code gives identical bytes.
    pub fn canonical_json(&self) -> Vec<u8> {
        let mut json = Vec::new();
        self.write_canonical_json(&mut json);
        json
    }

    /// Writes [`canonical_json`](Self::canonical_json) into `out`.
    fn write_canonical_json(&self, out: &mut impl std::io::Write) {
        let mut sorted;
        let manifest = if self.entries.is_sorted_by(|a, b| a.path < b.path) {
            self
        } else {
            sorted = self.clone();
            sorted.entries.sort_by(|a, b| a.path.cmp(&b.path));
            &sorted
        };
        serde_json::to_writer(out, manifest)
            .expect("a manifest of strings and integers always serializes, and hashing never fails")
    }

    /// blake3 of [`canonical_json`](Self::canonical_json), lowercase hex (64 chars). The JSON
    /// is hashed as it is written, a block of entries at a time, never held whole (8 MB for
    /// 57,000 files); each block's entries are written on as many threads as there are cores
    /// (up to 4), which is most of the time it takes, and hashed in order.
    pub fn id(&self) -> String {
        let mut id = blake3::Hasher::new();
        id.update(br#"{"entries":["#);
        self.each_block(|block| {
            id.update(block);
        });
        id.update(b"]}");
        id.finalize().to_hex().as_str().to_owned()
    }

    /// [`id`](Self::id) and the tree's digest the API asks a volume about
    /// (`div_api::tree_digest`: blake3 of the JSON list of the same entries, sorted by path),
    /// from one writing of the entries' JSON: the two hash the same bytes, framed
    /// differently (`{"entries":[…]}` and `[…]`). For 40,000 files, 7 ms where the two
    /// apart took 20 ms (docs/performance.md).
    pub fn digests(&self) -> Digests {
        let mut id = blake3::Hasher::new();
        let mut tree = blake3::Hasher::new();
        id.update(br#"{"entries":["#);
        tree.update(b"[");
        self.each_block(|block| {
            id.update(block);
            tree.update(block);
        });
        id.update(b"]}");
        tree.update(b"]");
        Digests {
            id: id.finalize().to_hex().as_str().to_owned(),
            tree: tree.finalize().to_hex().as_str().to_owned(),
        }
    }

    /// Hands `hash` the JSON of the entries, sorted by path, comma-separated, a block at a
    /// time and in order (each block's entries written on several threads).
    fn each_block(&self, mut hash: impl FnMut(&[u8])) {
        const BLOCK: usize = 2048;
        let sorted_copy;
        let entries = if self.entries.is_sorted_by(|a, b| a.path < b.path) {
            &self.entries[..]
        } else {
            let mut copy = self.entries.clone();
            copy.sort_by(|a, b| a.path.cmp(&b.path));
            sorted_copy = copy;
            &sorted_copy[..]
        };
        let threads = crate::cores::cores().min(4);
        let mut buffers = vec![Vec::new(); threads];
        let mut first = true;
        for round in entries.chunks(BLOCK * threads) {
            let mut parts = round.chunks(BLOCK).zip(buffers.iter_mut());
            let mine = parts.next();
            std::thread::scope(|scope| {
                for (part, buffer) in parts {
                    scope.spawn(move || write_entries(part, buffer));
                }
                if let Some((part, buffer)) = mine {
                    write_entries(part, buffer);
                }
            });
            for buffer in buffers.iter().take(round.len().div_ceil(BLOCK)) {
                if !first {
                    hash(b",");
                }
                first = false;
                hash(buffer);
            }
        }
    }

    /// The code id users see: the first 8 hex chars of [`id`](Self::id), like `9f31c2ab`.
    pub fn short_id(&self) -> String {
        let mut id = self.id();
        id.truncate(8);
        id
    }

    /// The entry at `path`, if shipped.
    pub fn get(&self, path: &str) -> Option<&TreeEntry> {
        self.entries
            .binary_search_by(|e| e.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }
}

/// `entries` as the canonical JSON writes them inside its list (compact, comma-separated),
/// into `out`, emptied first.
///
/// Written by hand, byte for byte what serde_json writes for a [`TreeEntry`] (tested
/// against it: `an_entry_is_written_as_serde_json_writes_it`), at a fraction of its cost per
/// field: the id of a 57,000-file manifest is 8 MB of it.
fn write_entries(entries: &[TreeEntry], out: &mut Vec<u8>) {
    out.clear();
    // About 170 bytes an entry (a path, a 64-digit hash): grown once, not as it fills.
    out.reserve(entries.len() * 176);
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_entry(entry, out);
    }
}

fn write_entry(entry: &TreeEntry, out: &mut Vec<u8>) {
    out.extend_from_slice(br#"{"path":"#);
    write_json_str(&entry.path, out);
    out.extend_from_slice(match entry.kind {
        EntryKind::File => br#","kind":"file","executable":"#.as_slice(),
        EntryKind::Symlink => br#","kind":"symlink","executable":"#.as_slice(),
    });
    out.extend_from_slice(if entry.executable { b"true" } else { b"false" });
    out.extend_from_slice(br#","size":"#);
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut size = entry.size;
    loop {
        at -= 1;
        digits[at] = b'0' + (size % 10) as u8;
        size /= 10;
        if size == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    if let Some(hash) = &entry.hash {
        out.extend_from_slice(br#","hash":"#);
        write_json_str(hash, out);
    }
    if let Some(target) = &entry.target {
        out.extend_from_slice(br#","target":"#);
        write_json_str(target, out);
    }
    out.push(b'}');
}

/// `s` as a JSON string, escaped as serde_json escapes: `"` and `\\`, the short forms of
/// backspace, form feed, newline, carriage return and tab, `\u00xx` (lowercase) for the other
/// control characters, everything else as it is.
fn write_json_str(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    // Nearly every path and hash has nothing to escape: one scan (which the compiler
    // vectorises) and one copy.
    let plain = bytes.chunks(32).all(|chunk| {
        !chunk.iter().fold(false, |any, &b| {
            any | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    });
    if plain {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(short);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Where a link at `link_path` (a manifest path) with `target` ends up, resolved inside the
/// tree described by `symlink_target` (the target of each symlink entry): `Ok(components)` of the
/// resolved path relative to the tree root, or `Err(())` when it leaves the tree (absolute target,
/// too many `..`, or through another link that does), or loops (more than 40 hops, like Linux).
///
/// Resolution is done the way the kernel does it, component by component, so `d/..` with `d` a
/// link to `.` is seen to leave the tree although it is lexically harmless.
pub(crate) fn resolve_link<'a>(
    link_path: &str,
    target: &str,
    symlink_target: &dyn Fn(&str) -> Option<&'a str>,
) -> Result<Vec<String>, ()> {
    let mut base: Vec<String> = link_path.split('/').map(str::to_owned).collect();
    base.pop();
    let mut hops = 0;
    resolve_into(&mut base, target, symlink_target, &mut hops)?;
    Ok(base)
}

fn resolve_into<'a>(
    current: &mut Vec<String>,
    target: &str,
    symlink_target: &dyn Fn(&str) -> Option<&'a str>,
    hops: &mut u32,
) -> Result<(), ()> {
    if target.starts_with('/') || target.is_empty() {
        return Err(());
    }
    for component in target.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                current.pop().ok_or(())?;
            }
            name => {
                current.push(name.to_owned());
                let here = current.join("/");
                if let Some(next) = symlink_target(&here) {
                    *hops += 1;
                    if *hops > 40 {
                        return Err(());
                    }
                    current.pop();
                    resolve_into(current, next, symlink_target, hops)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(links: &[(&str, &str)], link: &str, target: &str, expect: Option<&str>) {
        let lookup = |p: &str| links.iter().find(|(l, _)| *l == p).map(|(_, t)| *t);
        let got = resolve_link(link, target, &lookup)
            .ok()
            .map(|c| c.join("/"));
        assert_eq!(got.as_deref(), expect, "{link} -> {target}");
    }

    #[test]
    fn the_id_is_blake3_of_the_canonical_json_whatever_the_order() {
        let entry = |path: &str| TreeEntry {
            path: path.to_owned(),
            kind: EntryKind::File,
            executable: false,
            size: 1,
            hash: Some("ab".repeat(32)),
            target: None,
        };
        let sorted = Manifest {
            entries: vec![entry("a"), entry("b/c")],
        };
        let json = sorted.canonical_json();
        assert!(json.starts_with(br#"{"entries":[{"path":"a","kind":"file""#));
        assert_eq!(sorted.id(), blake3::hash(&json).to_hex().to_string());
        let unsorted = Manifest {
            entries: vec![entry("b/c"), entry("a")],
        };
        assert_eq!(unsorted.canonical_json(), json);
        assert_eq!(unsorted.id(), sorted.id());
        assert_eq!(
            Manifest::default().id(),
            blake3::hash(br#"{"entries":[]}"#).to_hex().to_string()
        );
    }

    #[test]
    fn an_entry_is_written_as_serde_json_writes_it() {
        let mut tricky: String = (0u8..0x20).map(char::from).collect();
        tricky.push_str("\"\\/\u{7f}é😀 a");
        // Plain for a while, then one byte to escape past the scan's first block of 32.
        let late_quote = format!("{}\"{}", "p".repeat(40), "q".repeat(30));
        let late_control = format!("{}\u{1f}", "é".repeat(33));
        let plain_long = "a/b".repeat(50);
        for (path, kind, hash, target, size) in [
            ("a", EntryKind::File, Some("ab".repeat(32)), None, 0),
            (
                tricky.as_str(),
                EntryKind::File,
                Some(tricky.clone()),
                None,
                u64::MAX,
            ),
            ("l", EntryKind::Symlink, None, Some(tricky.clone()), 1),
            (
                "n\0ff",
                EntryKind::Symlink,
                None,
                Some("../x".to_owned()),
                10,
            ),
            ("", EntryKind::File, None, None, 1_234_567_890),
            (
                late_quote.as_str(),
                EntryKind::File,
                Some(late_control.clone()),
                None,
                3,
            ),
            (
                plain_long.as_str(),
                EntryKind::Symlink,
                None,
                Some(late_quote.clone()),
                0,
            ),
        ] {
            for executable in [false, true] {
                let entry = TreeEntry {
                    path: path.to_owned(),
                    kind,
                    executable,
                    size,
                    hash: hash.clone(),
                    target: target.clone(),
                };
                let mut ours = Vec::new();
                write_entry(&entry, &mut ours);
                let theirs = serde_json::to_vec(&entry).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&ours),
                    String::from_utf8_lossy(&theirs)
                );
            }
        }
    }

    /// Written a block at a time on several threads, the id is still the hash of the whole
    /// canonical JSON: for a manifest of many blocks, in order or not, and of every length
    /// around a block's edge.
    #[test]
    fn the_id_of_many_blocks_is_blake3_of_the_whole_canonical_json() {
        let entry = |i: usize| TreeEntry {
            path: format!("d{}/f\"é{i:06}", i % 7),
            kind: if i.is_multiple_of(5) {
                EntryKind::Symlink
            } else {
                EntryKind::File
            },
            executable: i.is_multiple_of(3),
            size: i as u64,
            hash: (!i.is_multiple_of(5)).then(|| format!("{i:064x}")),
            target: (i.is_multiple_of(5)).then(|| format!("../t{i}")),
        };
        for n in [1, 2047, 2048, 2049, 4096, 4097, 20_001] {
            let mut entries: Vec<TreeEntry> = (0..n).map(entry).collect();
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            let manifest = Manifest { entries };
            let whole = blake3::hash(&manifest.canonical_json())
                .to_hex()
                .to_string();
            assert_eq!(manifest.id(), whole, "{n} entries");
            let digests = manifest.digests();
            assert_eq!(digests.id, whole, "{n} entries");
            let list = serde_json::to_vec(&manifest.entries).unwrap();
            assert_eq!(
                digests.tree,
                blake3::hash(&list).to_hex().to_string(),
                "{n}"
            );
            let mut reversed = manifest.clone();
            reversed.entries.reverse();
            assert_eq!(reversed.id(), whole, "{n} entries, reversed");
        }
    }

    #[test]
    fn links_resolve_inside_or_are_refused() {
        check(&[], "a", "b", Some("b"));
        check(&[], "x/a", "../b", Some("b"));
        check(&[], "x/a", "../..", None);
        check(&[], "a", "/etc/passwd", None);
        check(&[], "a", "", None);
        check(&[], "a", ".", Some(""));
        check(&[("d", ".")], "e", "d/..", None);
        check(&[("d", "x/y")], "e", "d/..", Some("x"));
        check(&[("a", "b"), ("b", "a")], "c", "a", None);
        check(&[("up", "..")], "l", "up/y", None);
        check(&[("x/up", "..")], "x/l", "up/y", Some("y"));
    }
}
