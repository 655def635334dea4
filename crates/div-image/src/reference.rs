//! Image references (`busybox`, `python:3.12-slim`, `ghcr.io/org/img:tag`,
//! `host:port/name:tag`, `name@sha256:…`), normalised the way docker does.

use std::fmt;
use std::str::FromStr;

/// The registry docker means when a reference names none.
pub const DOCKER_HUB: &str = "docker.io";

/// Longest reference accepted, as docker's `NameTotalLengthMax` bounds the name.
const NAME_MAX: usize = 255;
const TAG_MAX: usize = 128;

/// The error returned by [`ImageRef::from_str`] and [`Digest::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// The reference was empty.
    #[error("the image reference is empty; name an image such as `busybox` or `python:3.12-slim`")]
    Empty,
    /// A character that no reference may hold.
    #[error(
        "the image reference `{reference}` holds {what}; a reference is `[registry/]name[:tag][@sha256:hex]`"
    )]
    BadCharacter {
        /// The reference as given (control characters escaped).
        reference: String,
        /// What was wrong.
        what: String,
    },
    /// The name is longer than 255 characters.
    #[error("the image name `{0}` is longer than 255 characters")]
    NameTooLong(String),
    /// A path component breaks the grammar.
    #[error(
        "`{component}` in `{reference}` is not a valid repository name component: use lowercase letters and digits, separated by `.`, `_`, `__` or dashes"
    )]
    BadComponent {
        /// The reference.
        reference: String,
        /// The offending component.
        component: String,
    },
    /// The registry host (or port) is malformed.
    #[error("`{0}` is not a valid registry host: expected `host`, `host:port` or `[ipv6]:port`")]
    BadRegistry(String),
    /// The tag is malformed.
    #[error(
        "`{0}` is not a valid tag: up to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`"
    )]
    BadTag(String),
    /// The digest is malformed or of an unsupported algorithm.
    #[error(
        "`{0}` is not a valid digest: expected `sha256:` and 64 lowercase hex digits (or `sha512:` and 128)"
    )]
    BadDigest(String),
}

/// A content digest: `sha256:<64 hex>` or `sha512:<128 hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    algorithm: Algorithm,
    hex: String,
}

/// A digest algorithm the library can verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// SHA-256, what every registry uses.
    Sha256,
    /// SHA-512, allowed by the OCI spec.
    Sha512,
}

impl Algorithm {
    /// The name used in digests (`sha256`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }
    fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }
}

impl Digest {
    /// The SHA-256 digest of `bytes`.
    pub fn sha256_of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        let sum = sha2::Sha256::digest(bytes);
        Digest {
            algorithm: Algorithm::Sha256,
            hex: to_hex(&sum),
        }
    }
    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// The lowercase hex digits, which name the blob in the cache.
    pub fn hex(&self) -> &str {
        &self.hex
    }
    pub(crate) fn from_parts(algorithm: Algorithm, hex: String) -> Digest {
        Digest { algorithm, hex }
    }
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl FromStr for Digest {
    type Err = RefError;
    fn from_str(s: &str) -> Result<Digest, RefError> {
        let bad = || RefError::BadDigest(escape(s));
        let (algo, hex) = s.split_once(':').ok_or_else(bad)?;
        let algorithm = match algo {
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            _ => return Err(bad()),
        };
        if hex.len() != algorithm.hex_len()
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad());
        }
        Ok(Digest {
            algorithm,
            hex: hex.to_owned(),
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A parsed, normalised image reference.
///
/// `busybox` becomes `docker.io/library/busybox:latest`; a reference with a digest pulls by
/// that digest (a tag beside it is kept for display only, as docker does).
///
/// ```
/// use div_image::ImageRef;
/// let r: ImageRef = "python:3.12-slim".parse().unwrap();
/// assert_eq!(r.to_string(), "docker.io/library/python:3.12-slim");
/// let r: ImageRef = "127.0.0.1:5000/tools/busybox".parse().unwrap();
/// assert_eq!(r.registry(), "127.0.0.1:5000");
/// assert_eq!(r.tag(), Some("latest"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

impl ImageRef {
    /// The registry host, with its port if any (`docker.io`, `127.0.0.1:5000`).
    pub fn registry(&self) -> &str {
        &self.registry
    }
    /// The repository path inside the registry (`library/busybox`).
    pub fn repository(&self) -> &str {
        &self.repository
    }
    /// The tag, if any (`latest` when the reference named neither tag nor digest).
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }
    /// The digest, if the reference pins one.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }
    /// The same repository pinned to `digest` (no tag).
    pub fn with_digest(&self, digest: Digest) -> ImageRef {
        ImageRef {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest),
        }
    }
    /// Whether the registry is on a loopback address (`127.0.0.0/8`, `localhost`, `[::1]`),
    /// which is reached over plain HTTP as docker does.
    pub fn is_loopback_registry(&self) -> bool {
        let host = host_of(&self.registry);
        host == "localhost"
            || host == "[::1]"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
    pub(crate) fn to_oci(&self) -> oci_client::Reference {
        match (&self.tag, &self.digest) {
            (_, Some(d)) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                d.to_string(),
            ),
            (Some(t), None) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                t.clone(),
            ),
            (None, None) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                "latest".to_owned(),
            ),
        }
    }
}

/// The host part of `host[:port]` or `[v6]:port`.
pub(crate) fn host_of(registry: &str) -> &str {
    if registry.starts_with('[') {
        match registry.find(']') {
            Some(i) => &registry[..=i],
            None => registry,
        }
    } else {
        registry.split(':').next().unwrap_or(registry)
    }
}

fn escape(s: &str) -> String {
    s.escape_debug().to_string()
}

impl FromStr for ImageRef {
    type Err = RefError;

    fn from_str(s: &str) -> Result<ImageRef, RefError> {
        if s.is_empty() {
            return Err(RefError::Empty);
        }
        if let Some(c) = s.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(RefError::BadCharacter {
                reference: escape(s),
                what: format!("the character {:?}", c),
            });
        }
        if !s.is_ascii() {
            return Err(RefError::BadCharacter {
                reference: escape(s),
                what: "a non-ASCII character".to_owned(),
            });
        }
        let (rest, digest) = match s.split_once('@') {
            Some((rest, d)) => (rest, Some(d.parse::<Digest>()?)),
            None => (s, None),
        };
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
            _ => (rest, None),
        };
        if let Some(tag) = tag {
            check_tag(tag)?;
        }
        if name.is_empty() {
            return Err(RefError::BadComponent {
                reference: escape(s),
                component: String::new(),
            });
        }
        if name.len() > NAME_MAX {
            return Err(RefError::NameTooLong(escape(name)));
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => {
                check_registry(first)?;
                (first, path)
            }
            _ => (DOCKER_HUB, name),
        };
        let registry = if registry == "index.docker.io" || registry == "registry-1.docker.io" {
            DOCKER_HUB
        } else {
            registry
        };
        for component in path.split('/') {
            if !valid_component(component) {
                return Err(RefError::BadComponent {
                    reference: escape(s),
                    component: escape(component),
                });
            }
        }
        let repository = if registry == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path.to_owned()
        };
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_owned()),
            (None, Some(_)) => None,
            (None, None) => Some("latest".to_owned()),
        };
        Ok(ImageRef {
            registry: registry.to_owned(),
            repository,
            tag,
            digest,
        })
    }
}

fn check_tag(tag: &str) -> Result<(), RefError> {
    let ok = !tag.is_empty()
        && tag.len() <= TAG_MAX
        && tag
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RefError::BadTag(escape(tag)))
    }
}

fn check_registry(reg: &str) -> Result<(), RefError> {
    let bad = || RefError::BadRegistry(escape(reg));
    let (host, port) = if let Some(rest) = reg.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or_else(bad)?;
        if v6.is_empty() || !v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return Err(bad());
        }
        match after {
            "" => (None, None),
            p => (None, Some(p.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match reg.split_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(reg), None),
        }
    };
    if let Some(host) = host {
        let labels_ok = !host.is_empty()
            && host.split('.').all(|l| {
                !l.is_empty()
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !labels_ok {
            return Err(bad());
        }
    }
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad());
    }
    Ok(())
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn check(input: &str, expect: &str) {
        let got = match input.parse::<ImageRef>() {
            Ok(r) => r.to_string(),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect, "for {input:?}");
    }

    #[test]
    fn normalises_like_docker() {
        check("busybox", "docker.io/library/busybox:latest");
        check("python:3.12-slim", "docker.io/library/python:3.12-slim");
        check(
            "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime",
            "docker.io/pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime",
        );
        check("ghcr.io/org/img:tag", "ghcr.io/org/img:tag");
        check("127.0.0.1:5000/name:tag", "127.0.0.1:5000/name:tag");
        check("localhost/name", "localhost/name:latest");
        check("localhost:5000/a/b/c", "localhost:5000/a/b/c:latest");
        check("[::1]:5000/x", "[::1]:5000/x:latest");
        check(
            "index.docker.io/busybox",
            "docker.io/library/busybox:latest",
        );
        check(
            &format!("busybox@{D}"),
            &format!("docker.io/library/busybox@{D}"),
        );
        check(
            &format!("busybox:1.36@{D}"),
            &format!("docker.io/library/busybox:1.36@{D}"),
        );
        check(
            "a__b-c---d/e.f_g:T_a.g-1",
            "docker.io/a__b-c---d/e.f_g:T_a.g-1",
        );
    }

    #[test]
    fn refuses_what_docker_refuses() {
        check(
            "",
            "error: the image reference is empty; name an image such as `busybox` or `python:3.12-slim`",
        );
        check(
            "Busybox",
            "error: `Busybox` in `Busybox` is not a valid repository name component: use lowercase letters and digits, separated by `.`, `_`, `__` or dashes",
        );
        check(
            "busybox:",
            "error: `` is not a valid tag: up to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`",
        );
        check(
            "busybox:-x",
            "error: `-x` is not a valid tag: up to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`",
        );
        check(
            "busybox@sha256:abc",
            "error: `sha256:abc` is not a valid digest: expected `sha256:` and 64 lowercase hex digits (or `sha512:` and 128)",
        );
        check(
            "busybox@md5:0123",
            "error: `md5:0123` is not a valid digest: expected `sha256:` and 64 lowercase hex digits (or `sha512:` and 128)",
        );
        check(
            "a//b",
            "error: `` in `a//b` is not a valid repository name component: use lowercase letters and digits, separated by `.`, `_`, `__` or dashes",
        );
        check(
            "a/../b",
            "error: `..` in `a/../b` is not a valid repository name component: use lowercase letters and digits, separated by `.`, `_`, `__` or dashes",
        );
        check(
            "host:99999x/a",
            "error: `host:99999x` is not a valid registry host: expected `host`, `host:port` or `[ipv6]:port`",
        );
        check(
            "bad host/a",
            "error: the image reference `bad host/a` holds the character ' '; a reference is `[registry/]name[:tag][@sha256:hex]`",
        );
        check(
            "a___b",
            "error: `a___b` in `a___b` is not a valid repository name component: use lowercase letters and digits, separated by `.`, `_`, `__` or dashes",
        );
        check(
            ":tag",
            "error: `` in `:tag` is not a valid repository name component: use lowercase letters and digits, separated by `.`, `_`, `__` or dashes",
        );
        check(
            &"a".repeat(300),
            &format!(
                "error: the image name `{}` is longer than 255 characters",
                "a".repeat(300)
            ),
        );
    }

    #[test]
    fn loopback_registries() {
        for (r, lo) in [
            ("127.0.0.1:5000/a", true),
            ("127.1.2.3:80/a", true),
            ("localhost:5000/a", true),
            ("localhost/a", true),
            ("[::1]:5000/a", true),
            ("busybox", false),
            ("10.0.0.1:5000/a", false),
            ("localhost.evil.com/a", false),
            ("127.0.0.1.evil.com/a", false),
        ] {
            assert_eq!(
                r.parse::<ImageRef>().unwrap().is_loopback_registry(),
                lo,
                "{r}"
            );
        }
    }

    proptest! {
        /// Parsing never panics, whatever the input.
        #[test]
        fn proptest_parse_never_panics(s in "\\PC{0,80}|[a-z0-9:/@._\\[\\]-]{0,80}") {
            let _ = s.parse::<ImageRef>();
        }

        /// What parses prints to a reference that parses back to the same value.
        #[test]
        fn proptest_display_round_trips(s in "([a-z0-9.-]{1,12}(:[0-9]{1,5})?/)?[a-z0-9]{1,8}([._-][a-z0-9]{1,8}){0,2}(/[a-z0-9]{1,8}){0,2}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,10})?(@sha256:[0-9a-f]{64})?") {
            if let Ok(r) = s.parse::<ImageRef>() {
                let again: ImageRef = r.to_string().parse().unwrap();
                prop_assert_eq!(again, r);
            }
        }
    }
}
