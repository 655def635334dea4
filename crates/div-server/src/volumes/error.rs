//! What each volume operation can refuse or fail with, one enum per operation. The words are
//! the ones a client shows; `http::refusal` alone decides each one's status.

use crate::fault::{StateError, state_errors};

/// A volume a request names that the control plane does not hold.
#[derive(Debug, thiserror::Error)]
#[error("no volume `{0}`")]
pub(crate) struct NoVolume(pub(crate) String);

/// A path that cannot be where it is asked for.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathRefused {
    #[error("`{0}` is not a path inside the volume")]
    NotInside(String),
    #[error("`{0}` is not a path inside the volume where a tree can be")]
    NoTreeThere(String),
    #[error(
        "`{0}` is not a path inside the volume for a tree of its own (a tree for the volume's root is committed with `POST /v1/volumes/{{name}}/trees`)"
    )]
    NoStageThere(String),
    /// Its escapes do not decode (`div_ship::fs_path`); shown escaped.
    #[error("`{}` is not a valid path", .0.escape_debug())]
    NotValid(String),
}

/// The volume named was looked up: not there, or the store failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookupError {
    #[error(transparent)]
    NoVolume(#[from] NoVolume),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(LookupError);

/// The error returned by `create_volume`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateVolumeError {
    /// The rule for volume names, in its own words.
    #[error("{0}")]
    BadName(String),
    /// Deleted again before it could be read back.
    #[error(transparent)]
    NoVolume(#[from] NoVolume),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(CreateVolumeError);

/// The error returned by `delete_volume`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeleteVolumeError {
    #[error(transparent)]
    NoVolume(#[from] NoVolume),
    /// The models' volume, while it keeps a version of a model.
    #[error(
        "the volume `{volume}` keeps the versions of the models {}: remove them with `div models rm NAME` first",
        models.join(", ")
    )]
    KeepsModels { volume: String, models: Vec<String> },
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(DeleteVolumeError);

/// The error of sending blobs: asking which are missing, a resumable upload's end, a pack.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadError {
    #[error(transparent)]
    NoVolume(#[from] NoVolume),
    /// The pack's body is not a pack (`div_api::parse_pack`'s words).
    #[error("{0}")]
    NotAPack(String),
    #[error(
        "the blob `{hash}` is {size} bytes; a pack carries blobs of at most {} bytes (send a larger one by itself)",
        div_api::PACK_BLOB_MAX_BYTES
    )]
    TooLargeForAPack { hash: String, size: usize },
    #[error(
        "the blob `{hash}` got {size} bytes, more than its total of {total}; the partial upload was discarded"
    )]
    LongerThanItsTotal { hash: String, size: u64, total: u64 },
    /// The bytes do not hash to the blob's name; `kept` says what became of them.
    #[error("the bytes sent for `{expected}` hash to `{actual}`; {kept}")]
    HashMismatch {
        expected: String,
        actual: String,
        kept: &'static str,
    },
    #[error(transparent)]
    NoStage(#[from] NoStage),
    #[error(
        "the tree staged as `{id}` says `{path}` has {expected} bytes, but its blob `{hash}` has {got}; nothing of the pack was kept"
    )]
    NotTheStagedSize {
        id: String,
        path: String,
        expected: u64,
        hash: String,
        got: usize,
    },
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(UploadError);

impl From<LookupError> for UploadError {
    fn from(e: LookupError) -> UploadError {
        match e {
            LookupError::NoVolume(e) => UploadError::NoVolume(e),
            LookupError::State(e) => UploadError::State(e),
        }
    }
}

/// A stage the server does not hold (any more).
#[derive(Debug, thiserror::Error)]
#[error(
    "no stage `{id}` in volume `{volume}` (it was committed, let go, or the server restarted); send the tree again"
)]
pub(crate) struct NoStage {
    pub(crate) volume: String,
    pub(crate) id: String,
}

/// The error of committing a tree: `commit_tree`, `stage_tree` and `commit_stage`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommitError {
    #[error(transparent)]
    NoVolume(#[from] NoVolume),
    #[error(transparent)]
    Path(#[from] PathRefused),
    /// The tree's entries break a rule (div-ship's words).
    #[error("{0}")]
    BadTree(String),
    #[error("the file `{0}` has no hash")]
    NoHash(String),
    /// Blobs of the tree the volume lacks (`details.missing`).
    #[error("{} blob(s) of the tree were not sent", .0.len())]
    NotSent(Vec<String>),
    #[error("`{path}` in volume `{volume}` holds another tree")]
    AnotherTree { volume: String, path: String },
    #[error("`{path}` already exists in volume `{volume}`")]
    Exists { volume: String, path: String },
    #[error(
        "`{above}` in volume `{volume}` is not a folder (a link or a file left there, perhaps by a run); remove it to commit `{path}`"
    )]
    NotAFolder {
        volume: String,
        above: String,
        path: String,
    },
    #[error(
        "`{path}` in volume `{volume}` could not be written: a folder on its way is a link or a file, or something is already there (a run may have left it); remove it to commit `{path}`"
    )]
    OnTheWay { volume: String, path: String },
    /// A root put refused at `path` (`details.path`): `why` finishes the sentence.
    #[error("`{}` in volume `{volume}` {why}", div_ship::display_path(path))]
    PutRefused {
        volume: String,
        path: String,
        why: String,
    },
    /// Linking or writing the tree's files failed (div-ship's words).
    #[error("{0}")]
    Written(String),
    #[error(transparent)]
    NoStage(#[from] NoStage),
    #[error("packs are still being written into the stage `{0}`; commit it once they are answered")]
    StillWriting(String),
    /// A snapshot's source (`VOLUME/PATH`) is not there.
    #[error("nothing is at `{0}`")]
    NoSource(String),
    #[error("`{0}` is neither a folder nor a file")]
    NotAFolderOrFile(String),
    #[error("`{0}` holds no file")]
    Empty(String),
    #[error("the tree has more than {0} entries: refused, nothing kept")]
    TooManyEntries(usize),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(CommitError);

impl From<LookupError> for CommitError {
    fn from(e: LookupError) -> CommitError {
        match e {
            LookupError::NoVolume(e) => CommitError::NoVolume(e),
            LookupError::State(e) => CommitError::State(e),
        }
    }
}

/// The error of reading a volume: its tree's listing, a file, whether a tree is held.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error(transparent)]
    NoVolume(#[from] NoVolume),
    #[error(transparent)]
    Path(#[from] PathRefused),
    #[error("no `{path}` in volume `{volume}`")]
    NoEntry { volume: String, path: String },
    #[error("no file `{}` in volume `{volume}`", div_ship::display_path(path))]
    NoFile { volume: String, path: String },
    #[error("`{path}` in volume `{volume}` holds another tree")]
    AnotherTree { volume: String, path: String },
    #[error("no tree is committed at `{path}` in volume `{volume}`")]
    NoTree { volume: String, path: String },
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(ReadError);

impl From<LookupError> for ReadError {
    fn from(e: LookupError) -> ReadError {
        match e {
            LookupError::NoVolume(e) => ReadError::NoVolume(e),
            LookupError::State(e) => ReadError::State(e),
        }
    }
}

/// The error of a pass of code snapshots' retention, or of recording a staged tree's blobs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RetentionError {
    #[error(transparent)]
    Settings(#[from] crate::settings::SettingsError),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(RetentionError);
