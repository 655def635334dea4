//! The Slurm settings file, `home/slurm.toml`: when it exists, the local control plane places
//! its runs on a Slurm cluster rather than on this machine (docs/slurm.md).
//!
//! ```toml
//! # The directory every node sees at the same path; the state directory must be inside it.
//! shared_dir = "/shared/div"
//! # The GRES name of the GPUs, and how many one node has.
//! gres = "gpu"
//! gpus_per_node = 8
//! # Seconds between the end of a stopped run's own grace (SIGTERM, then SIGKILL, on each
//! # node) and `scancel`.
//! grace_seconds = 10
//! # Optional: the `div` the nodes run (default: the server's own supervisor command).
//! # div = "/shared/bin/div"
//! [partitions]   # the partition of each SKU; a SKU not named here is refused
//! h100 = "gpu"
//! cpu = "cpu"
//! [prices]       # optional: an hour of each unit, replacing the catalogue's (`div-pricing`)
//! h100 = "$3.10"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::rules;

/// The file's name inside the state directory.
pub(crate) const FILE_NAME: &str = "slurm.toml";

/// What `slurm.toml` says, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlurmConfig {
    pub(crate) shared_dir: PathBuf,
    pub(crate) gres: String,
    pub(crate) gpus_per_node: u32,
    pub(crate) grace_seconds: u64,
    pub(crate) div: Option<PathBuf>,
    /// SKU name (`h100`) → partition.
    pub(crate) partitions: BTreeMap<String, String>,
    /// SKU name → cents an hour, replacing the catalogue's; empty: the catalogue's.
    pub(crate) prices: BTreeMap<String, i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    shared_dir: PathBuf,
    #[serde(default = "default_gres")]
    gres: String,
    #[serde(default = "default_gpus_per_node")]
    gpus_per_node: u32,
    #[serde(default = "default_grace")]
    grace_seconds: u64,
    #[serde(default)]
    div: Option<PathBuf>,
    partitions: BTreeMap<String, String>,
    #[serde(default)]
    prices: BTreeMap<String, String>,
}

fn default_gres() -> String {
    "gpu".to_owned()
}
fn default_gpus_per_node() -> u32 {
    8
}
fn default_grace() -> u64 {
    10
}

/// A word Slurm takes as a partition or GRES name, passed on a command line as one argument.
fn slurm_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// The error returned by [`parse`] and [`load`]: what is wrong with `slurm.toml`, and what
/// would be right.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("{FILE_NAME}: {0}")]
    Toml(toml::de::Error),
    #[error("{FILE_NAME}: `shared_dir` must be an absolute path, not `{}`", .0.display())]
    SharedDirNotAbsolute(PathBuf),
    #[error("{FILE_NAME}: `shared_dir` `{}`: {source}", dir.display())]
    SharedDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{FILE_NAME}: the state directory `{}` is not inside `shared_dir` `{}`; the nodes must see it (set DIVERGENT_HOME to a directory under the shared one)",
        home.display(),
        shared.display()
    )]
    HomeOutside { home: PathBuf, shared: PathBuf },
    #[error("{FILE_NAME}: `gres` must be a GRES name like `gpu`, not `{0}`")]
    Gres(String),
    #[error("{FILE_NAME}: `gpus_per_node` must be 1 to 64, not {0}")]
    GpusPerNode(u32),
    #[error("{FILE_NAME}: `grace_seconds` must be at most 3600, not {0}")]
    Grace(u64),
    #[error("{FILE_NAME}: `[partitions]` names no SKU; write e.g. `h100 = \"gpu\"`")]
    NoPartitions,
    #[error("{FILE_NAME}: `[{section}]` names `{sku}`, which is not a SKU; the SKUs are {skus}")]
    NotASku {
        section: &'static str,
        sku: String,
        skus: String,
    },
    #[error(
        "{FILE_NAME}: the partition of `{sku}` must be a partition name like `gpu`, not `{partition}`"
    )]
    Partition { sku: String, partition: String },
    #[error("{FILE_NAME}: `div` must be an absolute path, not `{}`", .0.display())]
    DivNotAbsolute(PathBuf),
    #[error("{FILE_NAME}: the price of `{sku}` must be an hourly price like \"$4.95\": {why}")]
    Price { sku: String, why: String },
    #[error("could not read `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Parses and checks the text of `slurm.toml`; `home` is the state directory, which must be
/// inside `shared_dir`. The error says what was wrong and what would be right.
pub(crate) fn parse(text: &str, home: &Path) -> Result<SlurmConfig, ConfigError> {
    let raw: Raw = toml::from_str(text).map_err(ConfigError::Toml)?;
    let shared = shared_dir(&raw, home)?;
    if !slurm_word(&raw.gres) {
        return Err(ConfigError::Gres(raw.gres));
    }
    if raw.gpus_per_node == 0 || raw.gpus_per_node > 64 {
        return Err(ConfigError::GpusPerNode(raw.gpus_per_node));
    }
    if raw.grace_seconds > 3600 {
        return Err(ConfigError::Grace(raw.grace_seconds));
    }
    if raw.partitions.is_empty() {
        return Err(ConfigError::NoPartitions);
    }
    let names: Vec<String> = rules::skus().iter().map(|s| s.name.to_owned()).collect();
    let not_a_sku = |section, sku: String| ConfigError::NotASku {
        section,
        sku,
        skus: names.join(", "),
    };
    let mut partitions = BTreeMap::new();
    for (sku, partition) in raw.partitions {
        let Some(price) = rules::sku(&sku) else {
            return Err(not_a_sku("partitions", sku));
        };
        if !slurm_word(&partition) {
            return Err(ConfigError::Partition { sku, partition });
        }
        partitions.insert(price.name.to_owned(), partition);
    }
    if let Some(div) = &raw.div
        && !div.is_absolute()
    {
        return Err(ConfigError::DivNotAbsolute(div.clone()));
    }
    let mut prices = BTreeMap::new();
    for (sku, typed) in raw.prices {
        let Some(price) = rules::sku(&sku) else {
            return Err(not_a_sku("prices", sku));
        };
        let money: div_spec::Money =
            typed
                .parse()
                .map_err(|e: div_spec::MoneyError| ConfigError::Price {
                    sku: sku.clone(),
                    why: e.to_string(),
                })?;
        prices.insert(price.name.to_owned(), money.cents());
    }
    Ok(SlurmConfig {
        prices,
        shared_dir: shared,
        gres: raw.gres,
        gpus_per_node: raw.gpus_per_node,
        grace_seconds: raw.grace_seconds,
        div: raw.div,
        partitions,
    })
}

/// `shared_dir`, absolute and made canonical, holding the state directory `home`.
fn shared_dir(raw: &Raw, home: &Path) -> Result<PathBuf, ConfigError> {
    if !raw.shared_dir.is_absolute() {
        return Err(ConfigError::SharedDirNotAbsolute(raw.shared_dir.clone()));
    }
    let shared = raw
        .shared_dir
        .canonicalize()
        .map_err(|source| ConfigError::SharedDir {
            dir: raw.shared_dir.clone(),
            source,
        })?;
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    if !home.starts_with(&shared) {
        return Err(ConfigError::HomeOutside { home, shared });
    }
    Ok(shared)
}

/// Reads `home/slurm.toml`: `Ok(None)` when there is none (runs run on this machine).
pub(crate) fn load(home: &Path) -> Result<Option<SlurmConfig>, ConfigError> {
    let path = home.join(FILE_NAME);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text, home).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> tempfile::TempDir {
        tempfile::tempdir().expect("a temp dir")
    }

    #[test]
    fn a_full_file_is_read() {
        let dir = home();
        let shared = dir.path().display().to_string();
        let text = format!(
            "shared_dir = \"{shared}\"\ngres = \"gpu\"\ngpus_per_node = 4\ngrace_seconds = 3\ndiv = \"/opt/div\"\n[partitions]\nH100 = \"gpu-h100\"\ncpu = \"cpu\"\n[prices]\nh100 = \"$3.10\"\n"
        );
        let c = parse(&text, &dir.path().join("home")).expect("valid");
        assert_eq!(c.gpus_per_node, 4);
        assert_eq!(c.grace_seconds, 3);
        assert_eq!(c.div.as_deref(), Some(Path::new("/opt/div")));
        assert_eq!(
            c.partitions.get("h100").map(String::as_str),
            Some("gpu-h100")
        );
        assert_eq!(c.partitions.get("cpu").map(String::as_str), Some("cpu"));
        assert_eq!(c.prices.get("h100"), Some(&310));
        assert_eq!(c.prices.get("cpu"), None, "the catalogue's");
    }

    #[test]
    fn defaults_fill_what_is_left_out() {
        let dir = home();
        let text = format!(
            "shared_dir = \"{}\"\n[partitions]\nh100 = \"gpu\"\n",
            dir.path().display()
        );
        let c = parse(&text, dir.path()).expect("valid");
        assert_eq!(
            (c.gres.as_str(), c.gpus_per_node, c.grace_seconds),
            ("gpu", 8, 10)
        );
        assert_eq!(c.div, None);
    }

    #[test]
    fn each_mistake_is_named() {
        let dir = home();
        let shared = dir.path().display().to_string();
        let cases = [
            (
                format!("shared_dir = \"{shared}\"\n[partitions]\nh300 = \"gpu\"\n"),
                "names `h300`, which is not a SKU",
            ),
            (
                format!("shared_dir = \"{shared}\"\n[partitions]\nh100 = \"gpu; rm -rf /\"\n"),
                "must be a partition name",
            ),
            (
                format!("shared_dir = \"{shared}\"\n[partitions]\n"),
                "names no SKU",
            ),
            (
                format!(
                    "shared_dir = \"{shared}\"\ngpus_per_node = 0\n[partitions]\nh100 = \"gpu\"\n"
                ),
                "`gpus_per_node` must be 1 to 64",
            ),
            (
                "shared_dir = \"relative\"\n[partitions]\nh100 = \"gpu\"\n".to_owned(),
                "must be an absolute path",
            ),
            (
                format!("shared_dir = \"{shared}\"\nshared = 1\n[partitions]\nh100 = \"gpu\"\n"),
                "unknown field `shared`",
            ),
            (
                format!(
                    "shared_dir = \"{shared}\"\n[partitions]\nh100 = \"gpu\"\n[prices]\nh100 = \"free\"\n"
                ),
                "the price of `h100` must be an hourly price like \"$4.95\"",
            ),
            (
                format!(
                    "shared_dir = \"{shared}\"\n[partitions]\nh100 = \"gpu\"\n[prices]\nh100 = \"0\"\n"
                ),
                "the price of `h100` must be an hourly price",
            ),
            (
                "shared_dir = \"/proc\"\n[partitions]\nh100 = \"gpu\"\n".to_owned(),
                "is not inside `shared_dir`",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text, dir.path()).expect_err(&text).to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn no_file_means_this_machine() {
        let dir = home();
        assert!(matches!(load(dir.path()), Ok(None)));
    }
}
