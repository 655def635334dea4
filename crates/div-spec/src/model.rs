//! Models: a model's name, a reference to one of its versions (`mask-rcnn`, `mask-rcnn:v3`,
//! `mask-rcnn@sha256:…`), and a version's digest, which anyone can compute again from the
//! files alone.
//!
//! **The digest** of a tree of files is `sha256:` and the SHA-256, in lowercase hex, of one
//! line per file or symbolic link, sorted by path (byte order), each
//!
//! ```text
//! <mode> <sha256 of the content> <path>\n
//! ```
//!
//! where `<mode>` is `100644` for a file, `100755` for an executable one and `120000` for a
//! link (whose content is its target), `<path>` is relative to the tree's root with `/`
//! between folders, and folders themselves have no line (an empty folder is not part of a
//! model). In a shell, for a tree of plain files:
//!
//! ```sh
//! find . -type f -printf '%P\0' | LC_ALL=C sort -z |
//!   while IFS= read -r -d '' f; do
//!     if [ -x "$f" ]; then m=100755; else m=100644; fi
//!     printf '%s %s %s\n' "$m" "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"
//!   done | sha256sum
//! ```

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::volume::VolumeName;

/// What a model reference pins: the latest version, a version's number, or a digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModelPin {
    /// `mask-rcnn`: its latest version, resolved when the reference is used.
    Latest,
    /// `mask-rcnn:v3`.
    Version(u32),
    /// `mask-rcnn@sha256:…`: the version whose digest this is (64 lowercase hex digits).
    Digest(String),
}

/// A reference to a model's version: `NAME`, `NAME:vN` or `NAME@sha256:HEX`. A model's name
/// follows the rules of a volume's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelRef {
    name: VolumeName,
    pin: ModelPin,
}

/// The error returned by [`ModelRef::from_str`]: what was wrong, and how a reference is
/// written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{typed}` is not a model reference ({why}): write `NAME`, `NAME:vN` or `NAME@sha256:<64 hex digits>`, where NAME is 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit"
)]
pub struct ModelRefError {
    /// What was typed.
    pub typed: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl ModelRef {
    /// The model's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// What it pins.
    pub fn pin(&self) -> &ModelPin {
        &self.pin
    }

    /// The reference to `name`'s version `version`.
    pub fn version(name: VolumeName, version: u32) -> ModelRef {
        ModelRef {
            name,
            pin: ModelPin::Version(version),
        }
    }
}

impl FromStr for ModelRef {
    type Err = ModelRefError;

    fn from_str(typed: &str) -> Result<ModelRef, ModelRefError> {
        let refuse = |why| ModelRefError {
            typed: typed.to_owned(),
            why,
        };
        let (name, pin) = if let Some((name, digest)) = typed.split_once('@') {
            let hex = digest
                .strip_prefix("sha256:")
                .ok_or_else(|| refuse("a digest starts with `sha256:`"))?;
            if !is_sha256_hex(hex) {
                return Err(refuse("a sha256 digest is 64 lowercase hex digits"));
            }
            (name, ModelPin::Digest(hex.to_owned()))
        } else if let Some((name, version)) = typed.split_once(':') {
            let digits = version
                .strip_prefix('v')
                .ok_or_else(|| refuse("a version is written `v` and its number, like `v3`"))?;
            let n = (!digits.is_empty()
                && digits.len() <= 9
                && digits.bytes().all(|b| b.is_ascii_digit())
                && !digits.starts_with('0'))
            .then(|| digits.parse::<u32>().ok())
            .flatten()
            .ok_or_else(|| refuse("a version's number is 1 or more, like `v3`"))?;
            (name, ModelPin::Version(n))
        } else {
            (typed, ModelPin::Latest)
        };
        let name = name
            .parse::<VolumeName>()
            .map_err(|_| refuse("the name is not one a model can have"))?;
        Ok(ModelRef { name, pin })
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pin {
            ModelPin::Latest => write!(f, "{}", self.name),
            ModelPin::Version(n) => write!(f, "{}:v{n}", self.name),
            ModelPin::Digest(hex) => write!(f, "{}@sha256:{hex}", self.name),
        }
    }
}

/// Whether `hex` is a SHA-256 in lowercase hex.
pub fn is_sha256_hex(hex: &str) -> bool {
    hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a line of a model's digest says of one entry of its tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestMode {
    /// A file, `100644`.
    File,
    /// An executable file, `100755`.
    Executable,
    /// A symbolic link, `120000` (its content is its target).
    Symlink,
}

impl DigestMode {
    fn as_str(self) -> &'static str {
        match self {
            DigestMode::File => "100644",
            DigestMode::Executable => "100755",
            DigestMode::Symlink => "120000",
        }
    }
}

/// A model tree's digest, built from its entries in any order (see the module's text).
#[derive(Debug, Default, Clone)]
pub struct ModelDigest {
    /// Each entry's path and its line.
    lines: Vec<(Vec<u8>, Vec<u8>)>,
}

impl ModelDigest {
    /// An empty tree's digest, to add entries to.
    pub fn new() -> ModelDigest {
        ModelDigest::default()
    }

    /// Adds the entry at `path` (relative, `/`-separated, its bytes as they are), whose
    /// content hashes to `sha256` (lowercase hex).
    pub fn add(&mut self, path: &[u8], mode: DigestMode, sha256: &str) {
        let mut line = Vec::with_capacity(path.len() + 80);
        line.extend_from_slice(mode.as_str().as_bytes());
        line.push(b' ');
        line.extend_from_slice(sha256.as_bytes());
        line.push(b' ');
        line.extend_from_slice(path);
        line.push(b'\n');
        self.lines.push((path.to_vec(), line));
    }

    /// The digest: `sha256:` and 64 lowercase hex digits.
    pub fn finish(mut self) -> String {
        self.lines.sort_by(|a, b| a.0.cmp(&b.0));
        let mut hasher = Sha256::new();
        for (_, line) in &self.lines {
            hasher.update(line);
        }
        format!("sha256:{}", hex(&hasher.finalize()))
    }
}

/// The SHA-256 of `bytes`, in lowercase hex (a file's content, for [`ModelDigest::add`]).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A SHA-256 being taken of content that comes in pieces.
#[derive(Debug, Default, Clone)]
pub struct Sha256Hex(Sha256);

impl Sha256Hex {
    /// Nothing hashed yet.
    pub fn new() -> Sha256Hex {
        Sha256Hex::default()
    }
    /// Hashes `bytes` next.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// The SHA-256 of everything given, in lowercase hex.
    pub fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}
