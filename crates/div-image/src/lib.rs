//! OCI images for div: parse a reference, pull it from a registry with every blob verified
//! as it streams in, cache blobs by digest, and unpack each image's layers once into a root
//! filesystem a sandbox can run in.
//!
//! Main types: [`ImageRef`] (a normalised reference), [`ImageStore`] (the cache:
//! [`ensure`](ImageStore::ensure), [`list`](ImageStore::list),
//! [`prune`](ImageStore::prune), [`disk_usage`](ImageStore::disk_usage)), [`Image`] (a
//! root filesystem and its [`ImageConfig`]), [`Credentials`] (from docker's and podman's
//! files, found by the caller), [`Unpacker`] (layers onto a directory, whiteouts and all,
//! within [`UnpackLimits`]).
//!
//! The library prints nothing and reads no environment variable: progress goes to the
//! [`ProgressSink`] it is given, and credentials come from [`CredentialSources`] the caller
//! fills.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use div_image::{Credentials, ImageRef, ImageStore, NoProgress, Platform};
//! let store = ImageStore::open("/var/lib/div/images")?;
//! let image = store
//!     .ensure(&"busybox".parse::<ImageRef>()?, &Platform::host(), &Credentials::none(), &NoProgress)
//!     .await?;
//! println!("{} at {}", image.digest, image.rootfs.display());
//! # Ok(()) }
//! ```

mod auth;
mod disk;
mod entry;
mod hash;
mod inflate;
mod layers;
mod manifest;
mod platform;
mod progress;
mod push;
mod reference;
mod registry;
mod store;
mod unpack;
mod user;

pub use auth::{AuthFileError, CredentialSources, Credentials, Login};
pub use manifest::{Descriptor, ImageConfig};
pub use platform::{Platform, PlatformError};
pub use progress::{NoProgress, Progress, ProgressSink};
pub use push::{PushError, Pusher};
pub use reference::{Algorithm, DOCKER_HUB, Digest, ImageRef, RefError};
pub use registry::RegistryOptions;
pub use store::error::{EnsureError, StoreError};
pub use store::{
    DiskUsage, Image, ImageInfo, ImageSource, ImageStore, PruneOptions, PruneReport, PullPolicy,
    StoreOptions,
};
pub use unpack::{LayerStats, Limit, UnpackError, UnpackLimits, Unpacker};
pub use user::{UserError, UserIds};
