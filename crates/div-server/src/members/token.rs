//! Members' tokens: `div_<id>_<secret>`, both parts from the kernel's generator. The id (64
//! bits) finds the member; the secret (256 bits) proves the token, and the store keeps only
//! its blake3 hash, compared in constant time. A token is never logged: only its id is ever
//! written anywhere (the store's `token_id`).

use std::io::Read;

/// A token's two parts, as given.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parts<'a> {
    pub(crate) id: &'a str,
    pub(crate) secret: &'a str,
}

/// How many random bytes the id holds (hex: twice as many characters).
const ID_BYTES: usize = 8;
/// How many random bytes the secret holds: 256 bits.
const SECRET_BYTES: usize = 32;

/// `n` bytes from the kernel's generator, as lowercase hex. No fallback: a token that is not
/// random is not made.
pub(crate) fn random_hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A new token and its id.
pub(crate) fn fresh() -> std::io::Result<(String, String)> {
    let id = random_hex(ID_BYTES)?;
    let secret = random_hex(SECRET_BYTES)?;
    Ok((format!("div_{id}_{secret}"), id))
}

/// The parts of what was given as a token, when it has the shape of one.
pub(crate) fn parts(token: &str) -> Option<Parts<'_>> {
    let rest = token.strip_prefix("div_")?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id, ID_BYTES * 2) && hex(secret, SECRET_BYTES * 2)).then_some(Parts { id, secret })
}

/// The hash the store keeps of a token's secret.
pub(crate) fn hash(secret: &str) -> String {
    blake3::hash(secret.as_bytes()).to_hex().to_string()
}

/// Whether `given`'s secret hashes to `stored`, compared in a time that depends on the
/// lengths only (blake3's own `Hash` equality is constant-time too; the hex is compared
/// byte by byte without stopping early).
pub(crate) fn matches(secret: &str, stored: &str) -> bool {
    constant_time_eq(hash(secret).as_bytes(), stored.as_bytes())
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut differ = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        differ |= usize::from(std::hint::black_box(x ^ y));
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::{constant_time_eq, fresh, hash, matches, parts};

    #[test]
    fn a_token_is_random_parses_back_and_only_its_hash_matches() {
        let (token, id) = fresh().unwrap();
        let (other, other_id) = fresh().unwrap();
        assert_ne!(token, other);
        assert_ne!(id, other_id);
        // div_ + 16 hex + _ + 64 hex: 256 bits of secret.
        assert_eq!(token.len(), 4 + 16 + 1 + 64);
        let p = parts(&token).expect("its own shape");
        assert_eq!(p.id, id);
        let stored = hash(p.secret);
        assert!(!stored.contains(p.secret));
        assert!(matches(p.secret, &stored));
        let q = parts(&other).unwrap();
        assert!(!matches(q.secret, &stored));
    }

    #[test]
    fn what_is_not_a_token_has_no_parts() {
        for bad in [
            "",
            "div_",
            "div__",
            "schemathesis-token",
            "div_0123456789abcdef",
            "div_0123456789abcdef_xyz",
            "div_0123456789abcdeg_0000000000000000000000000000000000000000000000000000000000000000",
            "div_0123456789abcdef_00000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(parts(bad), None, "{bad}");
        }
    }

    #[test]
    fn equal_only_when_equal() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
