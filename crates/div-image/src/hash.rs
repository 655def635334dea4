//! Digests computed as bytes stream past: a blob as it downloads, a layer's uncompressed
//! stream as it is unpacked (its diff_id).

use sha2::Digest as _;

use crate::reference::{Algorithm, Digest, to_hex};

/// A running hash of either algorithm.
pub(crate) enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub(crate) fn new(a: Algorithm) -> Hasher {
        match a {
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }
    pub(crate) fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }
    pub(crate) fn finish(self) -> Digest {
        match self {
            Hasher::Sha256(h) => Digest::from_parts(Algorithm::Sha256, to_hex(&h.finalize())),
            Hasher::Sha512(h) => Digest::from_parts(Algorithm::Sha512, to_hex(&h.finalize())),
        }
    }
}

/// The digest of `bytes` with `algorithm`.
pub(crate) fn digest_of(algorithm: Algorithm, bytes: &[u8]) -> Digest {
    let mut h = Hasher::new(algorithm);
    h.update(bytes);
    h.finish()
}
