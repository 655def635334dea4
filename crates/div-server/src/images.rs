//! Images for runs: the cache under the state directory (`home/images`, a
//! [`div_image::ImageStore`]), and a run's image resolved (pulled, verified, unpacked) before
//! the run is created, so an image that does not exist or cannot be reached is refused with
//! the registry's answer and no run exists.
//!
//! The default image, when a run names no image, follows the server's [`DefaultImage`]
//! setting: this machine's own system stands in for it (out of the box, so the quickstart
//! runs offline, and the run's first log line says so: [`host_stands_in_line`]), or it is
//! pulled like any other. An image a run names, `div_spec::DEFAULT_IMAGE` included, is always
//! pulled and used, never replaced.
//!
//! Each pull unpacks within div-image's `UnpackLimits`: at most `max_image_gib` of
//! `home/settings.json` (64 GiB by default, read at each pull), never the last of the
//! cache's disk (docs/images.md, Limits).

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use div_api::{CachedImage, ImageCache, ImageDisk, PrunedImages};
use div_image::{
    CredentialSources, Credentials, Digest, EnsureError, ImageRef, ImageStore, Limit, Platform,
    ProgressSink, PruneOptions, PullPolicy, RegistryOptions, StoreOptions, UnpackError,
    UnpackLimits,
};
use serde::{Deserialize, Serialize};

use crate::fault::{StateError, io_full};
use crate::settings::{SETTINGS_FILE, Settings, SettingsError};

/// The error of resolving a run's image ([`Images::resolve`], [`Images::refuse_uncached`],
/// [`reference`]): each says what the client can do about it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error(
        "`{requested}` is not an image reference ({why}); write it as docker does: `busybox`, `python:3.12-slim`, `ghcr.io/org/img:tag`, `host:port/name:tag` or `name@sha256:…`"
    )]
    NotAReference { requested: String, why: String },
    #[error(
        "`{0}` is not in this machine's image cache, and --pull never forbids pulling it: pull it once with --pull missing (the default) or --pull always; `div image ls` lists what is cached"
    )]
    NotCached(String),
    #[error("the registry logins could not be read: {0}")]
    Logins(String),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The image cannot be used: the registry's answer, a bad image, one past a bound (the
    /// message names the setting where there is one).
    #[error("{0}")]
    Unusable(String),
    /// The registry could not be reached; whether this machine's own system stands in for
    /// an unnamed default image (then a run without `--image` needs no registry).
    #[error("{message}")]
    Unreachable {
        message: String,
        registry: String,
        host_stands_in: bool,
    },
    /// Unpacking it would take the last free space of the cache's disk.
    #[error("{0}")]
    NoRoom(String),
    #[error("the image `{requested}` names a user this control plane cannot run as: {why}")]
    User { requested: String, why: String },
    /// The cache itself failed, or the disk is full.
    #[error(transparent)]
    State(#[from] StateError),
    /// The cache failed otherwise (its own words).
    #[error("{0}")]
    Cache(String),
}

/// The error of listing or pruning the image cache.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    #[error("cannot {what}: {why}")]
    Failed { what: &'static str, why: String },
    #[error("a task failed: {0}")]
    Task(String),
}

/// What stands in for the default image (`pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DefaultImage {
    /// This machine's own system, as its first log line says (works offline).
    #[default]
    Host,
    /// The default image itself, pulled from Docker Hub like any other.
    Pull,
}

/// The server's image settings.
#[derive(Debug, Clone, Default)]
pub struct ImageSettings {
    /// What the default image means here.
    pub default_image: DefaultImage,
    /// Registries (`host:port`) reached over plain HTTP although not on loopback.
    pub insecure_registries: Vec<String>,
    /// Where registry logins are read from (the server's own environment).
    pub credentials: CredentialSources,
}

/// The image cache and the settings that say how runs use it.
#[derive(Debug)]
pub(crate) struct Images {
    pub(crate) store: ImageStore,
    settings: ImageSettings,
    /// The state directory, whose `settings.json` bounds each pull.
    home: PathBuf,
}

/// A run's resolved image, written as `run-dir/image.json` when the run is created and read
/// by the launcher. Absent: the run uses this machine's own system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunImage {
    /// The reference as the run named it.
    pub(crate) reference: String,
    /// The manifest's digest.
    pub(crate) digest: String,
    /// The unpacked root filesystem (read-only inside the run).
    pub(crate) rootfs: PathBuf,
    /// The config's `Env` (`KEY=VALUE`), in order.
    pub(crate) env: Vec<String>,
    /// The config's `WorkingDir`, where a run that shipped nothing starts.
    pub(crate) working_dir: Option<String>,
    /// The uid and gid the config's `User` names; `None`: root.
    pub(crate) user: Option<(u32, u32)>,
    /// Whether `/etc/resolv.conf` and `/etc/hosts` of the tree can take the host's files.
    pub(crate) name_resolution: bool,
    /// How the pull found it (not kept in the run's record).
    #[serde(skip)]
    pub(crate) source: Option<div_image::ImageSource>,
}

/// The pull policy div-image follows for a request's `pull` (absent: `missing`).
fn store_policy(pull: Option<div_api::PullPolicy>) -> PullPolicy {
    match pull.unwrap_or_default() {
        div_api::PullPolicy::Missing => PullPolicy::Missing,
        div_api::PullPolicy::Always => PullPolicy::Always,
        div_api::PullPolicy::Never => PullPolicy::Never,
    }
}

/// `t` as RFC 3339, to the second.
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    div_runtime::clock::rfc3339(ms)
}

impl RunImage {
    /// What of it the run's sandbox needs.
    pub(crate) fn root(&self) -> div_runtime::sandbox::ImageRoot {
        div_runtime::sandbox::ImageRoot {
            rootfs: self.rootfs.clone(),
            user: self.user,
            name_resolution: self.name_resolution,
        }
    }
}

/// The file, in a run's directory, that holds its [`RunImage`].
pub(crate) const RUN_IMAGE_FILE: &str = "image.json";

impl Images {
    /// Opens (makes) the cache at `home/images`.
    pub(crate) fn open(
        home: &Path,
        settings: ImageSettings,
    ) -> Result<Images, div_image::StoreError> {
        let store = ImageStore::open_with(
            home.join("images"),
            StoreOptions {
                registry: RegistryOptions {
                    insecure_registries: settings.insecure_registries.clone(),
                    ..RegistryOptions::default()
                },
                // A tag pulled once is used from the cache (no network per run) unless the
                // run says otherwise (`--pull`, set per pull); `div image prune` forgets it.
                pull_policy: PullPolicy::Missing,
                unpack: UnpackLimits::default(),
            },
        )?;
        Ok(Images {
            store,
            settings,
            home: home.to_path_buf(),
        })
    }

    /// `--pull never` for a run naming `requested` whose image is not cached: refused with
    /// what to do instead, before anything is shipped or created (asked by the validation; a
    /// pull would refuse it too, later).
    pub(crate) fn refuse_uncached(
        &self,
        requested: Option<&str>,
        pull: Option<div_api::PullPolicy>,
    ) -> Result<(), ResolveError> {
        if pull != Some(div_api::PullPolicy::Never) {
            return Ok(());
        }
        let Some(requested) = to_pull(requested, self.settings.default_image) else {
            return Ok(());
        };
        if self.store.has(&reference(requested)?, &Platform::host()) {
            return Ok(());
        }
        Err(ResolveError::NotCached(requested.to_owned()))
    }

    /// What a pull may unpack now: `max_image_gib` from `home/settings.json`, read at each
    /// pull; the rest div-image's defaults (a million entries, 1 GiB or 5 % of the disk left
    /// free).
    fn unpack_limits(&self) -> Result<UnpackLimits, SettingsError> {
        let settings = Settings::read(&self.home)?;
        Ok(UnpackLimits {
            max_bytes: settings.max_image_bytes(),
            ..UnpackLimits::default()
        })
    }

    /// The image a run naming `requested` runs in: `None` for this machine's own system (a
    /// run that names no image, when the setting says so), else the image, asking the
    /// registry as `pull` says (`missing` when absent: pulled if it is not cached). A named
    /// image is never replaced, even when it is the default one.
    pub(crate) async fn resolve(
        &self,
        requested: Option<&str>,
        pull: Option<div_api::PullPolicy>,
        progress: &dyn ProgressSink,
    ) -> Result<Option<RunImage>, ResolveError> {
        let Some(requested) = to_pull(requested, self.settings.default_image) else {
            return Ok(None);
        };
        let reference = reference(requested)?;
        let credentials = Credentials::load(&self.settings.credentials)
            .map_err(|e| ResolveError::Logins(div_api::error_chain(&e)))?;
        let image = self
            .store
            .with_unpack_limits(self.unpack_limits()?)
            .with_pull_policy(store_policy(pull))
            .ensure(&reference, &Platform::host(), &credentials, progress)
            .await
            .map_err(|e| match &e {
                EnsureError::NotCached { .. } => ResolveError::NotCached(requested.to_owned()),
                // What the client can say instead: where this machine's own system stands
                // in for the default image, a run without `--image` needs no registry.
                EnsureError::Unreachable { registry, .. } => ResolveError::Unreachable {
                    message: format!("the image cannot be used: {}", div_api::error_chain(&e)),
                    registry: registry.clone(),
                    host_stands_in: self.settings.default_image == DefaultImage::Host,
                },
                _ => refusal(&e, &self.home),
            })?;
        let user = image
            .user()
            .map_err(|e| ResolveError::User {
                requested: requested.to_owned(),
                why: div_api::error_chain(&e),
            })?
            .map(|ids| (ids.uid, ids.gid));
        let name_resolution = name_resolution_mount_points(&image.rootfs);
        Ok(Some(RunImage {
            reference: requested.to_owned(),
            digest: image.digest.to_string(),
            env: image.config.env.clone(),
            working_dir: image.config.working_dir.clone().filter(|w| !w.is_empty()),
            user,
            rootfs: image.rootfs,
            name_resolution,
            source: Some(image.source),
        }))
    }
}

impl Images {
    /// `GET /v1/images`: every image of the cache, and the disk the cache takes (`div image
    /// ls`). Blocking: it walks the cache.
    pub(crate) fn listing(&self) -> Result<ImageCache, CacheError> {
        let cannot = |what: &'static str, e: div_image::StoreError| CacheError::Failed {
            what,
            why: div_api::error_chain(&e),
        };
        let images = self
            .store
            .list()
            .map_err(|e| cannot("list the image cache", e))?;
        let usage = self
            .store
            .disk_usage()
            .map_err(|e| cannot("measure the image cache", e))?;
        Ok(ImageCache {
            path: self.store.root().display().to_string(),
            images: images
                .into_iter()
                .map(|i| CachedImage {
                    digest: i.digest.to_string(),
                    references: i.references,
                    resolved: i
                        .resolved
                        .into_iter()
                        .map(|(reference, t)| div_api::ResolvedReference {
                            reference,
                            resolved_at: rfc3339(t),
                        })
                        .collect(),
                    downloaded_bytes: i.downloaded_bytes,
                    compressed_bytes: i.compressed_bytes,
                    unpacked_bytes: i.unpacked_bytes,
                    extra: Default::default(),
                })
                .collect(),
            disk: ImageDisk {
                blobs: usage.blobs,
                images: usage.images,
                tmp: usage.tmp,
            },
            extra: Default::default(),
        })
    }

    /// `POST /v1/images/prune`: removes every image that no run of `runs` (the state
    /// directory's run folders) uses while it has not ended, the blobs only they needed and
    /// unfinished work (`div image prune`). The cache's lock makes it wait for pulls under
    /// way, and a pull wait for it.
    pub(crate) async fn prune_unused(&self, runs: PathBuf) -> Result<PrunedImages, CacheError> {
        let keep = tokio::task::spawn_blocking(move || images_in_use(&runs))
            .await
            .map_err(|e| CacheError::Task(e.to_string()))?;
        let report = self
            .store
            .prune(&PruneOptions {
                keep: keep.clone(),
                unused_since: None,
            })
            .await
            .map_err(|e| CacheError::Failed {
                what: "prune the image cache",
                why: div_api::error_chain(&e),
            })?;
        Ok(PrunedImages {
            images: report.images.iter().map(ToString::to_string).collect(),
            blobs: report.blobs,
            bytes: report.bytes,
            kept: keep.len() as u64,
            extra: Default::default(),
        })
    }
}

/// The images of the runs in `runs` that have not ended (`<id>/image.json` without
/// `<id>/end.json`), each once. Only the record's `digest` is read, so a record of any
/// server's keeps its image.
fn images_in_use(runs: &Path) -> Vec<Digest> {
    #[derive(Deserialize)]
    struct Used {
        digest: String,
    }
    let mut keep: Vec<Digest> = fs::read_dir(runs)
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|run| !run.path().join("end.json").exists())
        .filter_map(|run| fs::read(run.path().join(RUN_IMAGE_FILE)).ok())
        .filter_map(|bytes| serde_json::from_slice::<Used>(&bytes).ok())
        .filter_map(|image| image.digest.parse().ok())
        .collect();
    keep.sort_by_key(ToString::to_string);
    keep.dedup();
    keep
}

/// `requested` as an image reference, or the refusal that says how to write one (asked by
/// the validation before anything is shipped, and again before a pull).
pub(crate) fn reference(requested: &str) -> Result<ImageRef, ResolveError> {
    requested.parse().map_err(|e| ResolveError::NotAReference {
        requested: requested.to_owned(),
        why: div_api::error_chain(&e),
    })
}

/// What a pull that failed with `e` says: an image that cannot be used (the registry's
/// answer, a bad image, one past `max_image_gib`, with the setting named), one that would take
/// the disk's last free space, the disk full, or the cache's own failure.
fn refusal(e: &EnsureError, home: &Path) -> ResolveError {
    let text = div_api::error_chain(e);
    let cannot = format!("the image cannot be used: {text}");
    match e {
        EnsureError::Io { source, .. } if io_full(source) => {
            StateError::DiskFull("pulling the image").into()
        }
        EnsureError::Unpack {
            source: UnpackError::Write { source, .. },
            ..
        } if io_full(source) => StateError::DiskFull("unpacking the image").into(),
        EnsureError::Io { .. } => ResolveError::Cache(text),
        EnsureError::TooLarge {
            limit: Limit::FreeSpace { .. },
            ..
        } => ResolveError::NoRoom(cannot),
        EnsureError::TooLarge {
            limit: Limit::Size { .. },
            ..
        } => ResolveError::Unusable(format!(
            "{cannot}; `max_image_gib` in `{}` sets that limit",
            home.join(SETTINGS_FILE).display()
        )),
        _ => ResolveError::Unusable(cannot),
    }
}

/// The image to pull for a run naming `requested` (`None`: it names none); `None` when this
/// machine's own system stands in. Only an unnamed default is ever stood in for.
fn to_pull(requested: Option<&str>, default_image: DefaultImage) -> Option<&str> {
    match (requested, default_image) {
        (Some(named), _) => Some(named),
        (None, DefaultImage::Host) => None,
        (None, DefaultImage::Pull) => Some(div_spec::DEFAULT_IMAGE),
    }
}

/// The first log line of a run that names no image when this machine's own system stands in
/// for the default one (`image` is the run's `image`, the default image's name).
pub(crate) fn host_stands_in_line(image: &str) -> String {
    format!(
        "div: no image pulled: this machine's own system stands in for {} (DIVERGENT_DEFAULT_IMAGE=host; set it to pull to run in the image itself)",
        image.escape_debug()
    )
}

/// Makes sure the tree has `/etc/resolv.conf` and `/etc/hosts` as plain files, so the host's
/// can be bound over them (bubblewrap cannot make a mount point in a read-only tree). Never
/// follows a link of the image's: an `/etc` that is not a real directory, or either file
/// being anything but a plain file, leaves name resolution as the image has it.
fn name_resolution_mount_points(rootfs: &Path) -> bool {
    let etc = rootfs.join("etc");
    match fs::symlink_metadata(&etc) {
        Ok(m) if m.is_dir() => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if fs::create_dir(&etc).is_err()
                && !fs::symlink_metadata(&etc).is_ok_and(|m| m.is_dir())
            {
                return false;
            }
        }
        _ => return false,
    }
    ["resolv.conf", "hosts"].iter().all(|name| {
        let path = etc.join(name);
        if fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            return true;
        }
        // `create_new` (O_EXCL) never follows a link that is already there.
        let made = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .is_ok();
        made || fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
    })
}

/// Reads a run's image from its directory; `None` when it runs on this machine's system.
pub(crate) fn read_run_image(run_dir: &Path) -> Result<Option<RunImage>, RunImageError> {
    match fs::read(run_dir.join(RUN_IMAGE_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| RunImageError(e.to_string())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RunImageError(e.to_string())),
    }
}

/// The error returned by [`read_run_image`].
#[derive(Debug, thiserror::Error)]
#[error("the run's image record is unreadable: {0}")]
pub(crate) struct RunImageError(String);

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use div_image::{Digest, EnsureError, Limit};

    use super::{
        DefaultImage, Images, ResolveError, host_stands_in_line, name_resolution_mount_points,
        refusal, to_pull,
    };

    #[test]
    fn each_pull_is_bounded_by_max_image_gib_as_the_settings_say_then() {
        let home = tempfile::tempdir().unwrap();
        let images = Images::open(home.path(), Default::default()).unwrap();
        assert_eq!(images.unpack_limits().unwrap().max_bytes, 64 << 30);
        let settings = home.path().join("settings.json");
        std::fs::write(&settings, r#"{"max_image_gib": 2}"#).unwrap();
        let limits = images.unpack_limits().unwrap();
        assert_eq!(limits.max_bytes, 2 << 30);
        assert_eq!(limits.max_entries, 1_000_000);
        assert_eq!(limits.keep_free, None);
        std::fs::write(&settings, r#"{"max_image_gib": 0}"#).unwrap();
        let err = images.unpack_limits().unwrap_err().to_string();
        assert!(err.contains("`max_image_gib`"), "{err}");
    }

    #[test]
    fn refusals_name_the_layer_the_limit_and_the_setting() {
        let home = std::path::Path::new("/home/div");
        let digest = Digest::sha256_of(b"layer");
        let too_large = |limit| EnsureError::TooLarge {
            reference: "127.0.0.1:5000/bomb:1".to_owned(),
            index: 2,
            layers: 3,
            layer: digest.clone(),
            limit,
        };
        let e = refusal(&too_large(Limit::Size { max: 64 << 30 }), home);
        assert!(matches!(e, ResolveError::Unusable(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "the image cannot be used: layer 2 of 3 (`{digest}`) of `127.0.0.1:5000/bomb:1` unpacks past the limit of 64 GiB on an image's unpacked size: refused, nothing of the image kept; `max_image_gib` in `/home/div/settings.json` sets that limit"
            )
        );
        let e = refusal(
            &too_large(Limit::FreeSpace {
                available: 3 << 30,
                keep_free: 1 << 30,
            }),
            home,
        );
        assert!(matches!(e, ResolveError::NoRoom(_)), "{e:?}");
        assert!(
            e.to_string().ends_with("unpacks past the free space of the image cache's filesystem (3 GiB free) less the 1 GiB kept free for everything else there: refused, nothing of the image kept"),
            "{e}"
        );
        let e = refusal(&too_large(Limit::Entries { max: 10 }), home);
        assert!(matches!(e, ResolveError::Unusable(_)), "{e:?}");
        let e = refusal(
            &EnsureError::DiffIdMismatch {
                reference: "r".to_owned(),
                index: 1,
                layers: 1,
                layer: digest.clone(),
                expected: Box::new(Digest::sha256_of(b"a")),
                found: Box::new(Digest::sha256_of(b"b")),
            },
            home,
        );
        assert!(matches!(e, ResolveError::Unusable(_)), "{e:?}");
        assert!(e.to_string().contains("its diff_id is"), "{e}");
    }

    #[test]
    fn pull_never_refuses_an_image_the_cache_lacks_before_anything() {
        let home = tempfile::tempdir().unwrap();
        let never = Some(div_api::PullPolicy::Never);
        let images = Images::open(home.path(), Default::default()).unwrap();
        let e = images
            .refuse_uncached(Some("127.0.0.1:5000/app:t"), never)
            .unwrap_err();
        assert!(matches!(e, ResolveError::NotCached(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "`127.0.0.1:5000/app:t` is not in this machine's image cache, and --pull never forbids pulling it: pull it once with --pull missing (the default) or --pull always; `div image ls` lists what is cached"
        );
        // Another policy, or this machine's own system standing in: nothing to refuse.
        assert!(
            images
                .refuse_uncached(Some("127.0.0.1:5000/app:t"), None)
                .is_ok()
        );
        assert!(images.refuse_uncached(None, never).is_ok());
        // The default image, pulled by the server's setting, is asked about like any other.
        let pulling = Images::open(
            home.path(),
            super::ImageSettings {
                default_image: DefaultImage::Pull,
                ..Default::default()
            },
        )
        .unwrap();
        let e = pulling.refuse_uncached(None, never).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("`{}` is not", div_spec::DEFAULT_IMAGE)),
            "{e}"
        );
    }

    #[test]
    fn only_an_unnamed_default_image_is_stood_in_for() {
        let default = div_spec::DEFAULT_IMAGE;
        assert_eq!(to_pull(None, DefaultImage::Host), None);
        assert_eq!(to_pull(None, DefaultImage::Pull), Some(default));
        // Named, the default image is pulled whatever the setting: never replaced.
        assert_eq!(to_pull(Some(default), DefaultImage::Host), Some(default));
        assert_eq!(to_pull(Some(default), DefaultImage::Pull), Some(default));
        assert_eq!(
            to_pull(Some("busybox"), DefaultImage::Host),
            Some("busybox")
        );
        assert_eq!(
            host_stands_in_line(default),
            "div: no image pulled: this machine's own system stands in for pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime (DIVERGENT_DEFAULT_IMAGE=host; set it to pull to run in the image itself)"
        );
        // A name read back from a record is never more than one line.
        assert!(!host_stands_in_line("a\nb").contains('\n'));
    }

    #[test]
    fn mount_points_for_name_resolution_are_made_and_never_through_a_link() {
        let root = tempfile::tempdir().unwrap();
        assert!(name_resolution_mount_points(root.path()));
        assert!(root.path().join("etc/resolv.conf").is_file());
        assert!(root.path().join("etc/hosts").is_file());

        // An image whose /etc/hosts points outside its tree: nothing is written there.
        let outside = tempfile::tempdir().unwrap();
        let image = tempfile::tempdir().unwrap();
        std::fs::create_dir(image.path().join("etc")).unwrap();
        symlink(outside.path().join("hosts"), image.path().join("etc/hosts")).unwrap();
        assert!(!name_resolution_mount_points(image.path()));
        assert!(!outside.path().join("hosts").exists());

        // An /etc that is a link to a directory outside: left alone.
        let image = tempfile::tempdir().unwrap();
        symlink(outside.path(), image.path().join("etc")).unwrap();
        assert!(!name_resolution_mount_points(image.path()));
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    }
}
