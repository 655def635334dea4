//! What unpacking an image may take ([`UnpackLimits`]), and the limit a refused image would
//! have passed ([`Limit`]), in the words a user reads.

pub(crate) const GIB: u64 = 1 << 30;
pub(crate) const MIB: u64 = 1 << 20;

/// Bounds on what unpacking an image may take, all its layers together (docs/images.md,
/// Limits). A layer that would pass one fails with [`UnpackError::Limit`] before the byte or
/// the entry that passes it is written.
///
/// [`UnpackError::Limit`]: crate::UnpackError::Limit
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// The most bytes an image unpacks to: the contents of the files written, and also the
    /// decompressed bytes read (a tar stream's headers, data skipped, what follows its end),
    /// each held to it. Default [`UnpackLimits::DEFAULT_MAX_BYTES`], 64 GiB.
    pub max_bytes: u64,
    /// The most tar entries (files, folders, links, whiteouts…) an image holds. Default
    /// [`UnpackLimits::DEFAULT_MAX_ENTRIES`], one million.
    pub max_entries: u64,
    /// Bytes of the filesystem under the root that unpacking leaves free, for everything
    /// else written there; `None`: 1 GiB or 5 % of the filesystem's size, whichever is
    /// smaller ([`UnpackLimits::keep_free_of`]). Each entry counts as its contents and
    /// 4 KiB.
    pub keep_free: Option<u64>,
}

impl UnpackLimits {
    /// 64 GiB: several times the largest images in common use (a CUDA PyTorch runtime
    /// image unpacks to about 8 GiB).
    pub const DEFAULT_MAX_BYTES: u64 = 64 * GIB;
    /// One million entries: images of many GiB hold tens of thousands.
    pub const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;

    /// The bytes kept free on a filesystem of `size` bytes when [`keep_free`] is `None`:
    /// 1 GiB, or 5 % of a filesystem smaller than 20 GiB.
    ///
    /// [`keep_free`]: UnpackLimits::keep_free
    pub fn keep_free_of(size: u64) -> u64 {
        (size / 20).min(GIB)
    }
}

impl Default for UnpackLimits {
    fn default() -> UnpackLimits {
        UnpackLimits {
            max_bytes: UnpackLimits::DEFAULT_MAX_BYTES,
            max_entries: UnpackLimits::DEFAULT_MAX_ENTRIES,
            keep_free: None,
        }
    }
}

/// The limit an image's unpacking would have passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// [`UnpackLimits::max_bytes`].
    Size {
        /// The limit, in bytes.
        max: u64,
    },
    /// [`UnpackLimits::max_entries`].
    Entries {
        /// The limit.
        max: u64,
    },
    /// The filesystem's free space less what is kept free.
    FreeSpace {
        /// Bytes free when unpacking began, or, when others took space meanwhile, when
        /// the filesystem was last asked.
        available: u64,
        /// Bytes kept free.
        keep_free: u64,
    },
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Size { max } => {
                write!(
                    f,
                    "the limit of {} on an image's unpacked size",
                    bytes(*max)
                )
            }
            Limit::Entries { max } => write!(
                f,
                "the limit of {max} entries (files, folders, links) in an image"
            ),
            Limit::FreeSpace {
                available,
                keep_free,
            } => write!(
                f,
                "the free space of the image cache's filesystem ({} free) less the {} kept free for everything else there",
                bytes(*available),
                bytes(*keep_free)
            ),
        }
    }
}

/// A size as people read it: `64 GiB`, `100 MiB`, `1.5 GiB`, `512 bytes`, in integers.
pub(crate) fn bytes(n: u64) -> String {
    for (unit, name) in [(GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")] {
        if n >= unit {
            if n.is_multiple_of(unit) {
                return format!("{} {name}", n / unit);
            }
            // Tenths, rounded down: never more than there is.
            let tenths = (u128::from(n) * 10 / u128::from(unit)) as u64;
            return format!("{}.{} {name}", tenths / 10, tenths % 10);
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_read_them() {
        for (n, text) in [
            (64 << 30, "64 GiB"),
            (100 << 20, "100 MiB"),
            (1536 << 20, "1.5 GiB"),
            ((1 << 30) - 1, "1023.9 MiB"),
            (1536, "1.5 KiB"),
            (512, "512 bytes"),
            (0, "0 bytes"),
        ] {
            assert_eq!(bytes(n), text, "{n}");
        }
        assert_eq!(
            Limit::FreeSpace {
                available: 3 << 30,
                keep_free: 1 << 30
            }
            .to_string(),
            "the free space of the image cache's filesystem (3 GiB free) less the 1 GiB kept free for everything else there"
        );
    }
}
