//! The layer store: each layer unpacked once, keyed by its diff_id, whose files every image
//! of the layer links.
//!
//! ```text
//! DIR/layers/sha256/HEX/index     the layer's entries, in its tar stream's order
//! DIR/layers/sha256/HEX/files/N   the Nth entry's contents, with the mode, owner and mtime
//!                                 its header gives: the inode each image's file links
//! ```
//!
//! HEX is the layer's diff_id: the digest of its uncompressed tar stream, checked as it was
//! unpacked, so the same HEX is the same bytes, headers included, whichever image brought
//! it and however it was compressed. An image's root filesystem is its layers applied in
//! order (`Unpacker::compose`): directories and symlinks made for the image, regular files
//! hard-linked from here, whiteouts and overwrites unlinking the image's name and never
//! touching the inode. A layer store is moved into place whole, after its image unpacked
//! completely; `prune` removes the ones no remaining image lists.

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use crate::disk;
use crate::entry::{Item, Kind};
use crate::reference::Digest;

const MAGIC: &[u8] = b"div-layer-index 1\n";

/// The most entries an index is read with: far past any image's (the unpacking bound is
/// one million), so a damaged count cannot make it allocate without end.
const MAX_INDEX_ENTRIES: u64 = 1 << 26;

/// One entry of a layer, and for a regular file the bytes of its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub(crate) item: Item,
    pub(crate) size: u64,
}

/// A stored layer: its entries, and what unpacking it took.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LayerIndex {
    pub(crate) entries: Vec<IndexEntry>,
    /// The uncompressed stream's length (tar blocks and what follows the archive's end).
    pub(crate) read: u64,
    /// Bytes on disk of the files kept (their blocks).
    pub(crate) stored: u64,
}

/// The folder of the layer whose diff_id is `diff_id`.
pub(crate) fn layer_dir(root: &Path, diff_id: &Digest) -> PathBuf {
    root.join("layers")
        .join(diff_id.algorithm().name())
        .join(diff_id.hex())
}

/// The file of the `n`th entry, in a layer's `files` folder.
pub(crate) fn file_path(files: &Path, n: usize) -> PathBuf {
    files.join(n.to_string())
}

/// The stored layer in `dir`; `None` where there is none (or only a damaged one, which is
/// then unpacked again for the image that needs it and not shared).
pub(crate) fn load(dir: &Path) -> Option<LayerIndex> {
    let bytes = fs::read(dir.join("index")).ok()?;
    decode(&bytes).ok()
}

/// What the layer in `dir` takes on disk: its files' blocks as its index records them, and
/// its index and folders; a folder without a readable index is walked.
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
    let mut head = [0u8; MAGIC.len() + 24];
    let stored = fs::File::open(dir.join("index"))
        .and_then(|mut f| f.read_exact(&mut head))
        .ok()
        .filter(|()| head.starts_with(MAGIC))
        .map(|()| {
            let at = MAGIC.len() + 16;
            let mut b = [0u8; 8];
            b.copy_from_slice(&head[at..at + 8]);
            u64::from_le_bytes(b)
        });
    let Some(stored) = stored else {
        return disk::tree_size(dir);
    };
    let blocks = |p: PathBuf| {
        fs::symlink_metadata(p).map_or(0, |m| {
            use std::os::unix::fs::MetadataExt as _;
            m.blocks() * 512
        })
    };
    stored + blocks(dir.to_path_buf()) + blocks(dir.join("index")) + blocks(dir.join("files"))
}

/// Writes `index` as `dir/index`.
pub(crate) fn write(dir: &Path, index: &LayerIndex) -> io::Result<()> {
    let mut out = io::BufWriter::new(fs::File::create(dir.join("index"))?);
    out.write_all(&encode(index))?;
    out.flush()
}

fn kind_code(kind: Kind) -> u8 {
    match kind {
        Kind::Dir => 0,
        Kind::File => 1,
        Kind::Symlink => 2,
        Kind::Link => 3,
        Kind::Device => 4,
        Kind::Other => 5,
    }
}

fn kind_of(code: u8) -> io::Result<Kind> {
    Ok(match code {
        0 => Kind::Dir,
        1 => Kind::File,
        2 => Kind::Symlink,
        3 => Kind::Link,
        4 => Kind::Device,
        5 => Kind::Other,
        _ => return Err(damaged("an unknown kind of entry")),
    })
}

fn damaged(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("a damaged layer index: {what}"),
    )
}

/// The index as bytes: a magic line, the counts, then each entry (little-endian integers,
/// names as length and bytes: a tar path need not be UTF-8).
pub(crate) fn encode(index: &LayerIndex) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + index.entries.len() * 96);
    out.extend_from_slice(MAGIC);
    for n in [index.entries.len() as u64, index.read, index.stored] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    for e in &index.entries {
        let i = &e.item;
        out.push(kind_code(i.kind));
        out.extend_from_slice(&i.mode.unwrap_or(u32::MAX).to_le_bytes());
        for n in [i.uid, i.gid, i.mtime, e.size] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for bytes in [&i.path, &i.link] {
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
    out
}

/// Reads back what [`encode`] wrote; anything else is an error.
pub(crate) fn decode(bytes: &[u8]) -> io::Result<LayerIndex> {
    let mut r = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| damaged("no magic line"))?;
    let u64_of = |r: &mut &[u8]| -> io::Result<u64> {
        let mut b = [0u8; 8];
        r.read_exact(&mut b).map_err(|_| damaged("cut short"))?;
        Ok(u64::from_le_bytes(b))
    };
    let count = u64_of(&mut r)?;
    if count > MAX_INDEX_ENTRIES {
        return Err(damaged("too many entries"));
    }
    let read = u64_of(&mut r)?;
    let stored = u64_of(&mut r)?;
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let mut head = [0u8; 5];
        r.read_exact(&mut head).map_err(|_| damaged("cut short"))?;
        let kind = kind_of(head[0])?;
        let mode = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        let (uid, gid, mtime, size) = (
            u64_of(&mut r)?,
            u64_of(&mut r)?,
            u64_of(&mut r)?,
            u64_of(&mut r)?,
        );
        let mut names = [Vec::new(), Vec::new()];
        for name in &mut names {
            let len = u64_of(&mut r)?;
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= r.len())
                .ok_or_else(|| damaged("a name past its end"))?;
            let (head, rest) = r.split_at(len);
            *name = head.to_vec();
            r = rest;
        }
        let [path, link] = names;
        entries.push(IndexEntry {
            item: Item {
                kind,
                path,
                link,
                mode: (mode != u32::MAX).then_some(mode),
                uid,
                gid,
                mtime,
            },
            size,
        });
    }
    if !r.is_empty() {
        return Err(damaged("bytes after its last entry"));
    }
    Ok(LayerIndex {
        entries,
        read,
        stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_reads_back_as_written_and_a_damaged_one_is_refused() {
        let index = LayerIndex {
            entries: vec![
                IndexEntry {
                    item: Item {
                        kind: Kind::File,
                        path: b"usr/bin/\xffodd".to_vec(),
                        link: Vec::new(),
                        mode: Some(0o4755),
                        uid: 0,
                        gid: 42,
                        mtime: 1_700_000_000,
                    },
                    size: 12_345,
                },
                IndexEntry {
                    item: Item {
                        kind: Kind::Symlink,
                        path: b"lib".to_vec(),
                        link: b"usr/lib".to_vec(),
                        mode: None,
                        uid: 1,
                        gid: 2,
                        mtime: 3,
                    },
                    size: 0,
                },
            ],
            read: 20_480,
            stored: 16_384,
        };
        let bytes = encode(&index);
        assert_eq!(decode(&bytes).expect("reads back"), index);
        for cut in [0, MAGIC.len(), bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut bad_kind = bytes.clone();
        bad_kind[MAGIC.len() + 24] = 9;
        assert!(decode(&bad_kind).is_err());
    }
}
