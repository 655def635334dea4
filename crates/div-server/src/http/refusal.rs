//! Each service's errors as the API answers them: the one place an operation's error gets its
//! [`ErrorCode`], so its HTTP status, and the details a client reads. The words are the
//! errors' own (`Display`).

use serde_json::json;

use super::error::{ErrorCode, HttpError};
use crate::audit::AuditError;
use crate::fault::StateError;
use crate::images::{CacheError, ResolveError};
use crate::members::{AddMemberError, MemberError, Right};
use crate::models::{
    EvaluationError, PushModelError, RemoveModelError, ResolveModelError, UnknownModel,
};
use crate::org::SetLimitError;
use crate::runs::{CreateRunError, RunError};
use crate::secrets::{DeleteSecretError, SetSecretError};
use crate::store::StoreError;
use crate::volumes::{
    CommitError, CreateVolumeError, DeleteVolumeError, LookupError, PathRefused, ReadError,
    RetentionError, UploadError,
};

/// An error answered with `code` and its own words.
fn said(code: ErrorCode, e: &impl std::fmt::Display) -> HttpError {
    HttpError::new(code, e.to_string())
}

impl From<StateError> for HttpError {
    fn from(e: StateError) -> HttpError {
        match e {
            StateError::Store(e) => e.into(),
            StateError::Io(e) => e.into(),
            StateError::DiskFull(what) => HttpError::disk_full(what),
            StateError::Task(_) => said(ErrorCode::Internal, &e),
        }
    }
}

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> HttpError {
        if e.is_disk_full() {
            return HttpError::disk_full("writing the state database");
        }
        HttpError::internal(div_api::error_chain(&e))
    }
}

impl From<std::io::Error> for HttpError {
    fn from(e: std::io::Error) -> HttpError {
        if crate::fault::io_full(&e) {
            return HttpError::disk_full("writing the state directory");
        }
        HttpError::internal(format!("the state directory failed: {e}"))
    }
}

impl From<SetSecretError> for HttpError {
    fn from(e: SetSecretError) -> HttpError {
        match e {
            SetSecretError::State(e) => e.into(),
            SetSecretError::Vanished => said(ErrorCode::Internal, &e),
            SetSecretError::BadName(_)
            | SetSecretError::BadValue(_)
            | SetSecretError::TooMuch { .. } => said(ErrorCode::Invalid, &e),
        }
    }
}

impl From<DeleteSecretError> for HttpError {
    fn from(e: DeleteSecretError) -> HttpError {
        match e {
            DeleteSecretError::State(e) => e.into(),
            DeleteSecretError::NoSecret(_) => said(ErrorCode::NotFound, &e),
        }
    }
}

impl From<PathRefused> for HttpError {
    fn from(e: PathRefused) -> HttpError {
        said(ErrorCode::Invalid, &e)
    }
}

impl From<LookupError> for HttpError {
    fn from(e: LookupError) -> HttpError {
        match e {
            LookupError::NoVolume(e) => said(ErrorCode::NotFound, &e),
            LookupError::State(e) => e.into(),
        }
    }
}

impl From<CreateVolumeError> for HttpError {
    fn from(e: CreateVolumeError) -> HttpError {
        match e {
            CreateVolumeError::BadName(_) => said(ErrorCode::Invalid, &e),
            CreateVolumeError::NoVolume(_) => said(ErrorCode::NotFound, &e),
            CreateVolumeError::State(e) => e.into(),
        }
    }
}

impl From<DeleteVolumeError> for HttpError {
    fn from(e: DeleteVolumeError) -> HttpError {
        match e {
            DeleteVolumeError::NoVolume(_) => said(ErrorCode::NotFound, &e),
            DeleteVolumeError::KeepsModels { .. } => said(ErrorCode::Conflict, &e),
            DeleteVolumeError::State(e) => e.into(),
        }
    }
}

impl From<UploadError> for HttpError {
    fn from(e: UploadError) -> HttpError {
        match e {
            UploadError::NoVolume(_) | UploadError::NoStage(_) => said(ErrorCode::NotFound, &e),
            UploadError::NotAPack(_) => said(ErrorCode::Malformed, &e),
            UploadError::TooLargeForAPack { .. }
            | UploadError::LongerThanItsTotal { .. }
            | UploadError::NotTheStagedSize { .. } => said(ErrorCode::Invalid, &e),
            UploadError::HashMismatch {
                ref expected,
                ref actual,
                ..
            } => said(ErrorCode::HashMismatch, &e)
                .with_details(json!({ "expected": expected, "actual": actual })),
            UploadError::State(e) => e.into(),
        }
    }
}

impl From<CommitError> for HttpError {
    fn from(e: CommitError) -> HttpError {
        match e {
            CommitError::NoVolume(_) | CommitError::NoStage(_) | CommitError::NoSource(_) => {
                said(ErrorCode::NotFound, &e)
            }
            CommitError::NotAFolderOrFile(_)
            | CommitError::Empty(_)
            | CommitError::TooManyEntries(_) => said(ErrorCode::Invalid, &e),
            CommitError::Path(e) => e.into(),
            CommitError::BadTree(_) | CommitError::NoHash(_) | CommitError::Written(_) => {
                said(ErrorCode::Invalid, &e)
            }
            CommitError::NotSent(ref missing) => {
                said(ErrorCode::Invalid, &e).with_details(json!({ "missing": missing }))
            }
            CommitError::AnotherTree { .. }
            | CommitError::Exists { .. }
            | CommitError::NotAFolder { .. }
            | CommitError::OnTheWay { .. }
            | CommitError::StillWriting(_) => said(ErrorCode::Conflict, &e),
            CommitError::PutRefused { ref path, .. } => {
                said(ErrorCode::Conflict, &e).with_details(json!({ "path": path }))
            }
            CommitError::State(e) => e.into(),
        }
    }
}

impl From<ReadError> for HttpError {
    fn from(e: ReadError) -> HttpError {
        match e {
            ReadError::NoVolume(_)
            | ReadError::NoEntry { .. }
            | ReadError::NoFile { .. }
            | ReadError::AnotherTree { .. }
            | ReadError::NoTree { .. } => said(ErrorCode::NotFound, &e),
            ReadError::Path(e) => e.into(),
            ReadError::State(e) => e.into(),
        }
    }
}

impl From<RetentionError> for HttpError {
    fn from(e: RetentionError) -> HttpError {
        match e {
            RetentionError::Settings(_) => said(ErrorCode::Internal, &e),
            RetentionError::State(e) => e.into(),
        }
    }
}

impl From<ResolveError> for HttpError {
    fn from(e: ResolveError) -> HttpError {
        match e {
            ResolveError::NotAReference { .. }
            | ResolveError::NotCached(_)
            | ResolveError::Logins(_)
            | ResolveError::Unusable(_)
            | ResolveError::User { .. } => said(ErrorCode::Invalid, &e),
            ResolveError::Unreachable {
                ref registry,
                host_stands_in,
                ..
            } => said(ErrorCode::Invalid, &e).with_details(json!({
                "registry_unreachable": registry,
                "host_stands_in": host_stands_in,
            })),
            ResolveError::NoRoom(_) => said(ErrorCode::InsufficientStorage, &e),
            ResolveError::Settings(_) | ResolveError::Cache(_) => said(ErrorCode::Internal, &e),
            ResolveError::State(e) => e.into(),
        }
    }
}

impl From<CacheError> for HttpError {
    fn from(e: CacheError) -> HttpError {
        said(ErrorCode::Internal, &e)
    }
}

impl From<CreateRunError> for HttpError {
    fn from(e: CreateRunError) -> HttpError {
        use CreateRunError as E;
        match e {
            E::NotJson(_) | E::NoKey => said(ErrorCode::Malformed, &e),
            E::UnknownSku { ref accepted, .. } => {
                said(ErrorCode::UnknownSku, &e).with_details(json!({ "accepted": accepted }))
            }
            E::TooManyCores { host, .. } => {
                said(ErrorCode::Invalid, &e).with_details(json!({ "cores": host }))
            }
            E::TooMuchMemory { host, .. } => {
                said(ErrorCode::Invalid, &e).with_details(json!({ "memory_gib": host }))
            }
            E::Image(e) => e.into(),
            E::UsageLimit { ref usage, .. } => said(ErrorCode::UsageLimitReached, &e)
                .with_details(serde_json::to_value(usage).unwrap_or_default()),
            E::MemberLimit { ref usage, .. } => said(ErrorCode::UsageLimitReached, &e)
                .with_details(serde_json::to_value(usage).unwrap_or_default()),
            E::NameTaken(_) | E::KeyReused(_) => said(ErrorCode::Conflict, &e),
            // An unknown model or version is a value the run cannot have: 422, like an
            // unknown SKU, never a 404 of the route.
            E::Model(e) => match e {
                ResolveModelError::State(e) => e.into(),
                e => said(ErrorCode::Invalid, &e),
            },
            E::State(e) => e.into(),
            E::Unreadable(_)
            | E::NoProject
            | E::Name(_)
            | E::CodePath(_)
            | E::Size(_)
            | E::TooManyGpus { .. }
            | E::MaxSpend(_)
            | E::Check(_)
            | E::EnvName(_)
            | E::Env(_)
            | E::NoCode { .. }
            | E::Unplaceable(_) => said(ErrorCode::Invalid, &e),
        }
    }
}

impl From<RunError> for HttpError {
    fn from(e: RunError) -> HttpError {
        match e {
            RunError::NoRun(_) => said(ErrorCode::NotFound, &e),
            RunError::BadCursor(_) => said(ErrorCode::Malformed, &e),
            RunError::BadProject(_) => said(ErrorCode::Invalid, &e),
            RunError::NotYours {
                ref owner,
                role,
                ref actor,
                ..
            } => said(ErrorCode::Forbidden, &e).with_details(json!({
                "right": Right::StopAnyRun.as_str(),
                "role": role.as_str(),
                "needs": Right::StopAnyRun.least_role().as_str(),
                "member": actor,
                "placed_by": owner,
            })),
            RunError::State(e) => e.into(),
        }
    }
}

impl From<AddMemberError> for HttpError {
    fn from(e: AddMemberError) -> HttpError {
        match e {
            AddMemberError::BadName(_) | AddMemberError::Reserved | AddMemberError::Account(_) => {
                said(ErrorCode::Invalid, &e)
            }
            AddMemberError::Taken(_) => said(ErrorCode::Conflict, &e),
            AddMemberError::State(e) => e.into(),
        }
    }
}

impl From<MemberError> for HttpError {
    fn from(e: MemberError) -> HttpError {
        match e {
            MemberError::NoMember(_) => said(ErrorCode::NotFound, &e),
            MemberError::BadLimit(_) | MemberError::Account(_) => said(ErrorCode::Invalid, &e),
            MemberError::State(e) => e.into(),
        }
    }
}

impl From<AuditError> for HttpError {
    fn from(e: AuditError) -> HttpError {
        match e {
            AuditError::BadCursor(_) => said(ErrorCode::Malformed, &e),
            AuditError::State(e) => e.into(),
        }
    }
}

impl From<SetLimitError> for HttpError {
    fn from(e: SetLimitError) -> HttpError {
        match e {
            SetLimitError::Negative(_) => said(ErrorCode::Invalid, &e),
            SetLimitError::Settings(_) => said(ErrorCode::Internal, &e),
            SetLimitError::Write { ref source, .. } if crate::fault::io_full(source) => {
                HttpError::disk_full("writing the settings")
            }
            SetLimitError::Write { .. } => said(ErrorCode::Internal, &e),
        }
    }
}

impl From<UnknownModel> for HttpError {
    fn from(e: UnknownModel) -> HttpError {
        said(ErrorCode::NotFound, &e)
    }
}

impl From<ResolveModelError> for HttpError {
    fn from(e: ResolveModelError) -> HttpError {
        match e {
            ResolveModelError::NotAReference(_) => said(ErrorCode::Invalid, &e),
            ResolveModelError::Unknown(e) => e.into(),
            ResolveModelError::State(e) => e.into(),
        }
    }
}

impl From<PushModelError> for HttpError {
    fn from(e: PushModelError) -> HttpError {
        match e {
            PushModelError::BadName(_) => said(ErrorCode::Invalid, &e),
            PushModelError::Tree(e) => e.into(),
            PushModelError::State(e) => e.into(),
        }
    }
}

impl From<RemoveModelError> for HttpError {
    fn from(e: RemoveModelError) -> HttpError {
        match e {
            RemoveModelError::Resolve(e) => e.into(),
            RemoveModelError::InUse { .. } => said(ErrorCode::Conflict, &e),
            RemoveModelError::Tree(e) => e.into(),
            RemoveModelError::State(e) => e.into(),
        }
    }
}

impl From<EvaluationError> for HttpError {
    fn from(e: EvaluationError) -> HttpError {
        match e {
            EvaluationError::NoEvaluation(_) => said(ErrorCode::NotFound, &e),
            EvaluationError::Resolve(e) => e.into(),
            EvaluationError::State(e) => e.into(),
        }
    }
}
