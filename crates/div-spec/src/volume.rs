//! Volume names, and the volumes a command names under `/mnt`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A volume's name: 1–63 of lowercase letters, digits, `-`, `_` and `.`, starting with a
/// letter or digit. Mounted at `/mnt/<name>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct VolumeName(String);

/// The error returned by [`VolumeName::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{typed}` is not a volume name: 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit"
)]
pub struct VolumeNameError {
    /// What was typed.
    pub typed: String,
}

fn volume_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)
}

fn is_volume_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes().all(volume_char)
        && s.as_bytes()[0].is_ascii_alphanumeric()
}

impl VolumeName {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for VolumeName {
    type Err = VolumeNameError;

    fn from_str(typed: &str) -> Result<VolumeName, VolumeNameError> {
        if is_volume_name(typed) {
            Ok(VolumeName(typed.to_owned()))
        } else {
            Err(VolumeNameError {
                typed: typed.to_owned(),
            })
        }
    }
}

impl fmt::Display for VolumeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for VolumeName {
    type Error = VolumeNameError;

    fn try_from(text: String) -> Result<VolumeName, VolumeNameError> {
        text.parse()
    }
}

impl From<VolumeName> for String {
    fn from(name: VolumeName) -> String {
        name.0
    }
}

/// Every `/mnt/<name>` literally in a command's text, in order of first appearance,
/// deduplicated: `mkdir -p /mnt/mask-models/base && python download.py` gives `mask-models`.
///
/// `/mnt/` counts only where a path starts (not inside `/data/mnt/x`). The name runs to the
/// first character a volume name cannot hold; a name followed by `$`, `{`, `*`, `?` or `[`
/// is one the shell builds, not a literal, and is skipped, as is any name that is not a
/// valid volume name.
pub fn volumes_named(command: &str) -> Vec<VolumeName> {
    let bytes = command.as_bytes();
    let mut found: Vec<VolumeName> = Vec::new();
    let mut from = 0;
    while let Some(offset) = command[from..].find("/mnt/") {
        let start = from + offset;
        from = start + 1;
        let starts_path = start == 0 || {
            let before = bytes[start - 1];
            !(before.is_ascii_alphanumeric() || b"_-./~$}".contains(&before))
        };
        if !starts_path {
            continue;
        }
        let name_start = start + 5;
        let name_end = bytes[name_start..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || b"-_.".contains(b)))
            .map_or(bytes.len(), |p| name_start + p);
        let built = bytes.get(name_end).is_some_and(|b| b"${*?[".contains(b));
        let name = &command[name_start..name_end];
        if built || !is_volume_name(name) {
            continue;
        }
        if !found.iter().any(|v| v.0 == name) {
            found.push(VolumeName(name.to_owned()));
        }
    }
    found
}

/// Whether `path` names something inside a volume: relative, `/`-separated, with no empty,
/// `.` or `..` part and no NUL (`code/9f31c2ab/train.py`; not `""`, `/etc`, `a//b`, `../x`).
/// One rule for the server (commits, listings, file reads, a run's code) and the client
/// (`volume:path` arguments).
pub fn is_volume_path(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

#[cfg(test)]
mod path_tests {
    use super::is_volume_path;

    #[test]
    fn a_volume_path_stays_inside_the_volume() {
        for good in ["a", "code/9f31c2ab/train.py", ".hidden/x", "a..b", "..."] {
            assert!(is_volume_path(good), "{good:?} is inside");
        }
        for bad in [
            "", "/", "/etc", "a/", "a//b", ".", "..", "../x", "a/../b", "a/./b", "a\0b",
        ] {
            assert!(!is_volume_path(bad), "{bad:?} is not inside");
        }
    }
}
