//! One entry of a layer as its tar header states it, without its contents: what the
//! unpacker applies, and what the layer store's index keeps of each entry.

use std::io::Read;

/// What a layer's entry is, as applying it needs (from a tar header, or a layer's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A directory.
    Dir,
    /// A regular file (sparse ones included).
    File,
    /// A symbolic link.
    Symlink,
    /// A hard link to an earlier entry.
    Link,
    /// A device node or FIFO: skipped.
    Device,
    /// Anything else tar holds: skipped.
    Other,
}

/// One entry of a layer, without its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) kind: Kind,
    /// The path as the tar stream has it (raw bytes, uncleaned).
    pub(crate) path: Vec<u8>,
    /// A link's target (raw bytes); empty for other kinds.
    pub(crate) link: Vec<u8>,
    /// The header's mode; `None` where it cannot be read.
    pub(crate) mode: Option<u32>,
    pub(crate) uid: u64,
    pub(crate) gid: u64,
    pub(crate) mtime: u64,
}

impl Item {
    /// The entry `entry`'s header describes.
    pub(crate) fn of<R: Read>(entry: &tar::Entry<'_, R>) -> Item {
        let header = entry.header();
        use tar::EntryType as T;
        let kind = match header.entry_type() {
            T::Directory => Kind::Dir,
            T::Regular | T::Continuous | T::GNUSparse => Kind::File,
            T::Symlink => Kind::Symlink,
            T::Link => Kind::Link,
            T::Char | T::Block | T::Fifo => Kind::Device,
            _ => Kind::Other,
        };
        let link = match kind {
            Kind::Symlink | Kind::Link => entry
                .link_name_bytes()
                .map(|b| b.into_owned())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Item {
            kind,
            path: entry.path_bytes().into_owned(),
            link,
            mode: header.mode().ok(),
            uid: header.uid().unwrap_or(0),
            gid: header.gid().unwrap_or(0),
            mtime: header.mtime().unwrap_or(0),
        }
    }
}
