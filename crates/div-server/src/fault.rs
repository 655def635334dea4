//! What every service's operation may meet beneath it: the state directory or the store
//! failing ([`StateError`]), and the disk under them full. Each operation's own error enum
//! carries a `State` variant for it; `http::refusal` alone turns it into a status (507 for a
//! full disk, 500 otherwise).

use crate::store::StoreError;

/// The message of a refusal because the control plane's disk is full.
pub(crate) const DISK_FULL: &str = "no space left on the control plane's disk";

/// Whether an I/O error says the disk (or the user's quota on it) is full.
pub(crate) fn io_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// The state directory's files or the state database failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the state directory failed: {0}")]
    Io(#[from] std::io::Error),
    /// The disk filled while doing `what` (`"storing a pack of blobs"`): said as such, not as
    /// the state directory's failure.
    #[error("{DISK_FULL} while {0}")]
    DiskFull(&'static str),
    /// Blocking work the operation waited for ended without an answer.
    #[error("a task failed: {0}")]
    Task(String),
}

impl StateError {
    /// `e`, or the disk full while doing `what` when that is what `e` says.
    pub(crate) fn io_while(what: &'static str, e: std::io::Error) -> StateError {
        if io_full(&e) {
            StateError::DiskFull(what)
        } else {
            StateError::Io(e)
        }
    }
}

/// `From` the store's and the file system's errors, through [`StateError`], for an operation's
/// error enum whose `State` variant holds one: `?` then works on either.
macro_rules! state_errors {
    ($($op:ident),+ $(,)?) => {$(
        impl From<crate::store::StoreError> for $op {
            fn from(e: crate::store::StoreError) -> $op {
                $op::State(crate::fault::StateError::Store(e))
            }
        }
        impl From<std::io::Error> for $op {
            fn from(e: std::io::Error) -> $op {
                $op::State(crate::fault::StateError::Io(e))
            }
        }
    )+};
}
pub(crate) use state_errors;
