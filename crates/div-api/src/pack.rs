//! A pack: several small whole blobs in one request body (`POST
//! /v1/volumes/{name}/blobs/pack`), so that a project of many small files does not cost a
//! request each. Each blob is framed as its hash, a space, its length in decimal and a
//! newline, then its bytes:
//!
//! ```text
//! af1349b9…3262 0\n
//! 6c1f…90ab 12\nhello world\n
//! ```
//!
//! [`pack_frame`] writes one, [`parse_pack`] reads one (and refuses anything else, never
//! panicking: the server reads what any client sends).

/// The most a pack body may hold.
pub const PACK_MAX_BYTES: usize = 64 << 20;
/// The largest blob sent in a pack; larger ones go by themselves, resumably.
pub const PACK_BLOB_MAX_BYTES: u64 = 1 << 20;

/// One whole blob of a pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackBlob {
    /// Its blake3, 64 lowercase hex digits.
    pub hash: String,
    /// Its bytes (shared, not copied: a client's listing may have kept them, `div_ship::Kept`).
    pub data: bytes::Bytes,
}

/// The body of a pack of `blobs`.
pub fn pack_frame(blobs: &[PackBlob]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blobs.iter().map(|b| b.data.len() + 90).sum());
    for blob in blobs {
        out.extend_from_slice(format!("{} {}\n", blob.hash, blob.data.len()).as_bytes());
        out.extend_from_slice(&blob.data);
    }
    out
}

/// The error returned by [`parse_pack()`]: what is wrong with a pack body, and where (`blob`
/// counts from 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("the pack's blob {blob} at byte {at} has no `HASH LENGTH` line")]
    NoHeader { blob: usize, at: usize },
    #[error("the pack's blob {blob} at byte {at}: its header is not text")]
    HeaderNotText { blob: usize, at: usize },
    #[error(
        "the pack's blob {blob} at byte {at}: its header `{}` is not `HASH LENGTH`",
        .header.escape_debug()
    )]
    NotHashLength {
        blob: usize,
        at: usize,
        header: String,
    },
    #[error(
        "the pack's blob {blob}: `{}` is not a blake3 hash (64 lowercase hex digits)",
        .hash.escape_debug()
    )]
    NotAHash { blob: usize, hash: String },
    #[error("the pack's blob {blob} (`{hash}`): `{}` is not a length", .length.escape_debug())]
    NotALength {
        blob: usize,
        hash: String,
        length: String,
    },
    #[error("the pack's blob {blob} (`{hash}`) says {length} bytes, but only {follow} follow")]
    Short {
        blob: usize,
        hash: String,
        length: usize,
        follow: usize,
    },
}

/// The blobs of a pack body, as `(hash, bytes)`; or what is wrong with it, saying where.
/// The hashes are checked for their form here, not against the bytes (the server does that).
pub fn parse_pack(body: &[u8]) -> Result<Vec<(&str, &[u8])>, PackError> {
    let mut blobs = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        let rest = &body[at..];
        let blob = blobs.len() + 1;
        // A header is at most 64 + 1 + 20 + 1 bytes.
        let Some(end) = rest.iter().take(90).position(|b| *b == b'\n') else {
            return Err(PackError::NoHeader { blob, at });
        };
        let header =
            std::str::from_utf8(&rest[..end]).map_err(|_| PackError::HeaderNotText { blob, at })?;
        let (hash, len) = header
            .split_once(' ')
            .ok_or_else(|| PackError::NotHashLength {
                blob,
                at,
                header: header.to_owned(),
            })?;
        if hash.len() != 64
            || !hash
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(PackError::NotAHash {
                blob,
                hash: hash.to_owned(),
            });
        }
        let len: usize = len
            .parse()
            .ok()
            .filter(|_| len.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| PackError::NotALength {
                blob,
                hash: hash.to_owned(),
                length: len.to_owned(),
            })?;
        let start = end + 1;
        let data = rest
            .get(start..start.saturating_add(len))
            .ok_or_else(|| PackError::Short {
                blob,
                hash: hash.to_owned(),
                length: len,
                follow: rest.len() - start,
            })?;
        blobs.push((hash, data));
        at += start + len;
    }
    Ok(blobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(data: &[u8]) -> PackBlob {
        PackBlob {
            hash: blake3::hash(data).to_hex().to_string(),
            data: bytes::Bytes::copy_from_slice(data),
        }
    }

    #[test]
    fn a_pack_reads_back_as_it_was_framed() {
        let blobs = [blob(b""), blob(b"hello\nworld"), blob(&[0, 255, 10, 32])];
        let body = pack_frame(&blobs);
        let read = parse_pack(&body).unwrap();
        assert_eq!(read.len(), 3);
        for ((hash, data), b) in read.iter().zip(&blobs) {
            assert_eq!((*hash, *data), (b.hash.as_str(), &b.data[..]));
        }
        assert_eq!(parse_pack(b"").unwrap(), Vec::<(&str, &[u8])>::new());
    }

    #[test]
    fn a_bad_pack_says_what_is_wrong_and_where() {
        let good = pack_frame(&[blob(b"abc")]);
        let cut = &good[..good.len() - 1];
        assert!(
            parse_pack(cut)
                .unwrap_err()
                .to_string()
                .contains("says 3 bytes, but only 2 follow")
        );
        assert!(
            parse_pack(b"nothash 3\nabc")
                .unwrap_err()
                .to_string()
                .contains("is not a blake3 hash")
        );
        let h = "a".repeat(64);
        assert!(
            parse_pack(format!("{h} -3\nabc").as_bytes())
                .unwrap_err()
                .to_string()
                .contains("is not a length")
        );
        assert!(
            parse_pack(format!("{h} +3\nabc").as_bytes())
                .unwrap_err()
                .to_string()
                .contains("is not a length")
        );
        assert!(
            parse_pack(format!("{h}3\nabc").as_bytes())
                .unwrap_err()
                .to_string()
                .contains("is not `HASH LENGTH`")
        );
        assert!(
            parse_pack(&[b'x'; 200])
                .unwrap_err()
                .to_string()
                .contains("has no `HASH LENGTH` line")
        );
        let huge = format!("{h} 18446744073709551615\n");
        assert!(
            parse_pack(huge.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("but only 0 follow")
        );
    }

    #[test]
    fn any_bytes_parse_or_are_refused_without_panicking() {
        // A cheap sweep of shapes around the framing (the fuzz target covers the rest).
        let h = "b".repeat(64);
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 120) as usize;
            let mut body = format!("{h} {}\n", seed % 7).into_bytes();
            body.extend((0..n).map(|i| (seed >> (i % 56)) as u8));
            let _ = parse_pack(&body);
            let _ = parse_pack(&body[..n.min(body.len())]);
        }
    }
}
