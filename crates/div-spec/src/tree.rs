//! One entry of a tree of files: what div-ship lists in a manifest and the contract commits
//! to a volume (`CommitTree`'s entries). One type for both ends, so the shipper's manifest and
//! the API's JSON are one shape and nothing converts between them. (Pure data: reading it off
//! a disk is div-ship's, and checking that a tree's paths stay inside it too.)

use serde::{Deserialize, Serialize};

/// What a path of a tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file; its content is the blob named by [`TreeEntry::hash`].
    File,
    /// A symbolic link, shipped as a link; its target is [`TreeEntry::target`].
    Symlink,
}

/// One path of a tree. Its JSON is the manifest's and the API's: fields in this order,
/// `hash` and `target` left out when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeEntry {
    /// Relative, `/`-separated, no empty, `.` or `..` components.
    pub path: String,
    pub kind: EntryKind,
    /// Whether the owner's executable bit is set (files only).
    #[serde(default)]
    pub executable: bool,
    /// Size in bytes (files only; 0 for links).
    #[serde(default)]
    pub size: u64,
    /// blake3 of the content, lowercase hex (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The link's target, as stored in the link (symlinks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}
