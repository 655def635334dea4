//! The platform (`linux/amd64`, `linux/arm64/v8`) whose manifest is picked from an index.

use std::fmt;
use std::str::FromStr;

/// An OCI platform: operating system, architecture and optional variant, in the OCI spec's
/// words (`amd64`, not `x86_64`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Platform {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`, `arm`, `ppc64le`, `s390x`, `riscv64`, `386`.
    pub architecture: String,
    /// `v8` for arm64, `v7` for arm, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this binary was built for (what a run on this machine executes).
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        };
        let variant = (architecture == "arm64").then(|| "v8".to_owned());
        Platform {
            os: "linux".to_owned(),
            architecture: architecture.to_owned(),
            variant,
        }
    }

    /// Whether an index entry for `other` fits this platform. A missing variant on either
    /// side matches (arm64 images often omit `v8`).
    pub fn matches(&self, other: &Platform) -> bool {
        self.os == other.os
            && self.architecture == other.architecture
            && match (&self.variant, &other.variant) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

/// The error returned by [`Platform::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a platform: expected `os/architecture[/variant]`, such as `linux/amd64`")]
pub struct PlatformError(String);

impl FromStr for Platform {
    type Err = PlatformError;
    fn from_str(s: &str) -> Result<Platform, PlatformError> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok =
            |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform {
                os: (*os).to_owned(),
                architecture: (*arch).to_owned(),
                variant: None,
            }),
            [os, arch, v] if ok(os) && ok(arch) && ok(v) => Ok(Platform {
                os: (*os).to_owned(),
                architecture: (*arch).to_owned(),
                variant: Some((*v).to_owned()),
            }),
            _ => Err(PlatformError(s.escape_debug().to_string())),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches() {
        let p: Platform = "linux/arm64".parse().unwrap();
        assert!(p.matches(&"linux/arm64/v8".parse().unwrap()));
        assert!(!p.matches(&"linux/amd64".parse().unwrap()));
        let v7: Platform = "linux/arm/v7".parse().unwrap();
        assert!(!v7.matches(&"linux/arm/v6".parse().unwrap()));
        assert_eq!(v7.to_string(), "linux/arm/v7");
        assert!("linux".parse::<Platform>().is_err());
        assert!("linux/amd64/v1/x".parse::<Platform>().is_err());
        assert_eq!(Platform::host().os, "linux");
    }
}
