//! The JSON documents of an image: index, manifest and config, as much of them as the
//! library uses.

use std::collections::BTreeMap;

use crate::platform::Platform;
use crate::reference::Digest;

pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// What the library accepts when it asks for a manifest.
pub(crate) const ACCEPTED: &[&str] = &[OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST];

/// Manifests and configs are small; a bigger one is refused rather than read.
pub(crate) const DOCUMENT_MAX: u64 = 4 << 20;

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The media type of what it points to.
    #[serde(default)]
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// Its platform (index entries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Document {
    #[serde(default)]
    pub(crate) schema_version: Option<u32>,
    #[serde(default)]
    pub(crate) media_type: Option<String>,
    #[serde(default)]
    pub(crate) manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    pub(crate) config: Option<Descriptor>,
    #[serde(default)]
    pub(crate) layers: Option<Vec<Descriptor>>,
}

/// A manifest: one image for one platform.
#[derive(Debug, Clone)]
pub(crate) struct Manifest {
    pub(crate) config: Descriptor,
    pub(crate) layers: Vec<Descriptor>,
}

#[derive(Debug)]
pub(crate) enum Parsed {
    Index(Vec<Descriptor>),
    Manifest(Manifest),
}

/// Why [`parse_document`] refused a manifest or index; the words are those a pull's
/// `EnsureError::BadImage` gives as its reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DocumentError {
    /// Not JSON, or not of a manifest's or an index's shape.
    #[error("{0}")]
    Json(serde_json::Error),
    /// Another schema version than 2.
    #[error(
        "schemaVersion is {0:?}, and only 2 is supported (docker schema 1 images are obsolete)"
    )]
    SchemaVersion(Option<u32>),
    /// A manifest that lacks its config or its layers.
    #[error("a manifest without `config` and `layers`")]
    NotAManifest,
}

/// Reads a manifest or an index.
pub(crate) fn parse_document(bytes: &[u8]) -> Result<Parsed, DocumentError> {
    let doc: Document = serde_json::from_slice(bytes).map_err(DocumentError::Json)?;
    if doc.schema_version != Some(2) {
        return Err(DocumentError::SchemaVersion(doc.schema_version));
    }
    let is_index = matches!(doc.media_type.as_deref(), Some(OCI_INDEX | DOCKER_LIST))
        || (doc.media_type.is_none() && doc.manifests.is_some());
    if is_index {
        return Ok(Parsed::Index(doc.manifests.unwrap_or_default()));
    }
    match (doc.config, doc.layers) {
        (Some(config), Some(layers)) => Ok(Parsed::Manifest(Manifest { config, layers })),
        _ => Err(DocumentError::NotAManifest),
    }
}

/// How a layer blob is compressed, from its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

/// A layer whose media type is not a tar layer, plain, gzip or zstd.
#[derive(Debug, thiserror::Error)]
#[error(
    "layer media type `{media_type}` is not supported: expected a tar layer, plain, gzip or zstd"
)]
pub(crate) struct LayerTypeError {
    /// The media type the manifest gives.
    pub(crate) media_type: String,
}

/// How a layer of `media_type` is compressed.
pub(crate) fn layer_compression(media_type: &str) -> Result<Compression, LayerTypeError> {
    match media_type {
        "application/vnd.oci.image.layer.v1.tar"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar" => Ok(Compression::None),
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip"
        | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => Ok(Compression::Gzip),
        "application/vnd.oci.image.layer.v1.tar+zstd"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => Ok(Compression::Zstd),
        other => Err(LayerTypeError {
            media_type: other.to_owned(),
        }),
    }
}

/// The parts of an image's config a run honours.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageConfig {
    /// `Env`: `KEY=value` lines, in order; they come first in a run's environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// `WorkingDir`, if set.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// `User` (`name`, `uid`, `uid:gid`, `name:group`), if set.
    #[serde(default)]
    pub user: Option<String>,
    /// `Entrypoint`.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// `Labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The image's own platform, as its config states it.
    pub platform: Platform,
}

#[derive(serde::Deserialize)]
struct RawConfig {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default)]
    config: Option<RawRunConfig>,
    #[serde(default)]
    rootfs: Option<RawRootfs>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawRunConfig {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(serde::Deserialize)]
struct RawRootfs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// Why [`parse_config`] refused an image config; the words are those a pull's
/// `EnsureError::BadImage` gives after "its config is not valid JSON of an image config: ".
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// Not JSON, or not of a config's shape.
    #[error("{0}")]
    Json(serde_json::Error),
    /// A `diff_ids` entry that is not a digest (escaped as `escape_debug` does).
    #[error("its diff_id `{0}` is not a digest")]
    DiffId(String),
}

/// Parses an image config blob; returns the config and its `diff_ids`, in order (the digest
/// of each layer's uncompressed tar stream).
pub(crate) fn parse_config(bytes: &[u8]) -> Result<(ImageConfig, Vec<Digest>), ConfigError> {
    let raw: RawConfig = serde_json::from_slice(bytes).map_err(ConfigError::Json)?;
    let run = raw.config.unwrap_or(RawRunConfig {
        env: None,
        working_dir: None,
        user: None,
        entrypoint: None,
        cmd: None,
        labels: None,
    });
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let diff_ids = raw
        .rootfs
        .map(|r| r.diff_ids)
        .unwrap_or_default()
        .iter()
        .map(|d| {
            d.parse::<Digest>()
                .map_err(|_| ConfigError::DiffId(d.escape_debug().to_string()))
        })
        .collect::<Result<Vec<Digest>, ConfigError>>()?;
    Ok((
        ImageConfig {
            env: run.env.unwrap_or_default(),
            working_dir: nonempty(run.working_dir),
            user: nonempty(run.user),
            entrypoint: run.entrypoint.unwrap_or_default(),
            cmd: run.cmd.unwrap_or_default(),
            labels: run.labels.unwrap_or_default(),
            platform: Platform {
                os: raw.os,
                architecture: raw.architecture,
                variant: raw.variant,
            },
        },
        diff_ids,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_run_config() {
        let zeros = format!("sha256:{}", "0".repeat(64));
        let ones = format!("sha256:{}", "1".repeat(64));
        let text = format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"Env":["PATH=/usr/bin","A=b"],"WorkingDir":"/app","User":"1000:1000","Cmd":["sh"]}},"rootfs":{{"type":"layers","diff_ids":["{zeros}","{ones}"]}}}}"#
        );
        let (c, diff_ids) = parse_config(text.as_bytes()).unwrap();
        assert_eq!(c.env, ["PATH=/usr/bin", "A=b"]);
        assert_eq!(c.working_dir.as_deref(), Some("/app"));
        assert_eq!(c.user.as_deref(), Some("1000:1000"));
        assert_eq!(c.platform.to_string(), "linux/amd64");
        assert_eq!(
            diff_ids.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            [zeros, ones]
        );
        let err =
            parse_config(br#"{"os":"linux","rootfs":{"diff_ids":["sha256:00"]}}"#).unwrap_err();
        assert_eq!(err.to_string(), "its diff_id `sha256:00` is not a digest");
        let (c, _) = parse_config(
            br#"{"architecture":"arm64","os":"linux","config":{"WorkingDir":"","User":""}}"#,
        )
        .unwrap();
        assert_eq!((c.working_dir, c.user), (None, None));
    }

    /// The words each refusal gives, as they were when these were strings.
    #[test]
    fn refusals_say_what_they_said() {
        let say = |bytes: &[u8]| parse_document(bytes).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(
            say(br#"{"schemaVersion":1,"fsLayers":[]}"#),
            Err("schemaVersion is Some(1), and only 2 is supported (docker schema 1 images are obsolete)".to_owned())
        );
        assert_eq!(
            say(br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#),
            Err("a manifest without `config` and `layers`".to_owned())
        );
        assert_eq!(
            say(b"{").map_err(|e| e.starts_with("EOF while parsing")),
            Err(true)
        );
        assert_eq!(
            layer_compression("application/x-foo").map_err(|e| e.to_string()),
            Err("layer media type `application/x-foo` is not supported: expected a tar layer, plain, gzip or zstd".to_owned())
        );
        assert_eq!(
            parse_config(b"[")
                .map(|_| ())
                .map_err(|e| e.to_string().starts_with("EOF while parsing")),
            Err(true)
        );
    }

    #[test]
    fn refuses_schema_1_and_unknown_layers() {
        assert!(
            parse_document(br#"{"schemaVersion":1,"fsLayers":[]}"#)
                .unwrap_err()
                .to_string()
                .contains("schemaVersion")
        );
        assert!(
            layer_compression("application/x-foo")
                .unwrap_err()
                .to_string()
                .contains("`application/x-foo`")
        );
    }
}
