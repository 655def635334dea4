//! Paths whose bytes are not UTF-8, in the manifest's UTF-8 strings, losslessly.
//!
//! A Linux name is any bytes but NUL and `/`; the manifest and the API speak JSON strings,
//! which are Unicode. A path that is valid UTF-8 is written as itself (every manifest made
//! before this encoding existed is unchanged, code ids included). In a path that is not, each
//! byte that is not part of a valid UTF-8 sequence is written as NUL followed by two lowercase
//! hex digits (`caf\u{0}e9.txt` for the Latin-1 `café.txt`): no real name holds a NUL, so the
//! escape can never be confused with a name, and a reader that does not know it refuses the
//! path (a NUL is no valid name) rather than writing a file under a wrong name. Exactly one
//! string stands for each byte path: escapes of bytes that would form valid UTF-8 are refused.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The manifest's string for a path's bytes: itself when it is UTF-8, else with each byte of
/// an invalid sequence written as NUL and two lowercase hex digits.
pub fn encode_path(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                out.push_str(valid);
                break;
            }
            Err(err) => {
                let (valid, after) = rest.split_at(err.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                let bad = err.error_len().unwrap_or(after.len());
                for &b in &after[..bad] {
                    out.push('\0');
                    out.push(char::from(HEX[usize::from(b >> 4)]));
                    out.push(char::from(HEX[usize::from(b & 0xf)]));
                }
                rest = &after[bad..];
            }
        }
    }
    Cow::Owned(out)
}

/// The bytes a manifest string stands for; `None` when it holds a NUL that is not an escape
/// [`encode_path`] would write (not two lowercase hex digits, or bytes that are valid UTF-8).
pub fn decode_path(s: &str) -> Option<Cow<'_, [u8]>> {
    if !s.contains('\0') {
        return Some(Cow::Borrowed(s.as_bytes()));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == 0 {
            let hex = |b: u8| HEX.iter().position(|&h| h == b);
            let hi = hex(*bytes.get(i + 1)?)?;
            let lo = hex(*bytes.get(i + 2)?)?;
            out.push(u8::try_from(hi * 16 + lo).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    // One string per path: `\0c3\0a9` is `é`, which is written as itself.
    (encode_path(&out) == s).then_some(Cow::Owned(out))
}

/// A manifest path as a path on this machine (`None` as [`decode_path`]).
pub fn fs_path(s: &str) -> Option<Cow<'_, Path>> {
    Some(match decode_path(s)? {
        Cow::Borrowed(b) => Cow::Borrowed(Path::new(OsStr::from_bytes(b))),
        Cow::Owned(b) => Cow::Owned(OsStr::from_bytes(&b).to_owned().into()),
    })
}

/// A manifest path for people: each escaped byte shown as `\xNN` (as `café` in Latin-1
/// shows as `caf\xe9`), everything else as it is; a string that is no valid encoding is
/// shown as it is.
pub fn display_path(s: &str) -> Cow<'_, str> {
    if !s.contains('\0') || decode_path(s).is_none() {
        return Cow::Borrowed(s);
    }
    Cow::Owned(s.replace('\0', "\\x"))
}

/// A path as the manifest writes it ([`encode_path`]), on disk.
pub(crate) fn on_disk(path: &str) -> Cow<'_, Path> {
    fs_path(path).unwrap_or(Cow::Borrowed(Path::new(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_itself_and_other_bytes_are_escaped_losslessly() {
        assert_eq!(encode_path("été/a b".as_bytes()), "été/a b");
        assert_eq!(encode_path(b"caf\xe9.txt"), "caf\0e9.txt");
        assert_eq!(encode_path(b"\xff\xfe/x\xc3"), "\0ff\0fe/x\0c3");
        for raw in [
            &b"caf\xe9.txt"[..],
            b"\xff\xfe/x\xc3",
            b"ok",
            b"\xc3\xa9\xe9",
        ] {
            let encoded = encode_path(raw);
            assert_eq!(decode_path(&encoded).unwrap(), raw);
        }
        assert_eq!(display_path("caf\0e9.txt"), "caf\\xe9.txt");
    }

    #[test]
    fn only_the_escapes_encode_path_writes_decode() {
        // Two strings for `é` would be two entries for one file.
        assert_eq!(decode_path("\0c3\0a9"), None);
        assert_eq!(decode_path("a\0"), None);
        assert_eq!(decode_path("a\0e"), None);
        assert_eq!(decode_path("a\0E9"), None);
        assert_eq!(decode_path("a\0zz"), None);
        assert_eq!(decode_path("a\0e9").unwrap(), &b"a\xe9"[..]);
    }
}
