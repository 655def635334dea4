//! [`HttpError`]: a refusal or failure as the server answers it, `{"error": {"code", "message",
//! "details"}}`, with its [`ErrorCode`] deciding the HTTP status.
//!
//! Not to be confused with `div_api::ApiError`, the client's reading of such an answer, nor
//! with div-cli's `Failure`, what the command line prints. The services' own errors become
//! one in `refusal`.

use serde_json::Value;

use crate::fault::DISK_FULL;

/// What went wrong, as the API names it. Each code has one HTTP status; the wire code is
/// the contract's (`docs/api/openapi.yaml`, `ErrorDetail.code`), so several situations that
/// the contract calls `invalid` keep that name on the wire and differ by status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorCode {
    /// 400 `invalid`: the request itself is malformed (not JSON, a header or parameter
    /// missing or unreadable).
    Malformed,
    /// 413 `invalid`: the request body is larger than the server reads.
    TooLarge,
    /// 416 `invalid`: a range starts at or past the end of the file.
    RangeNotSatisfiable,
    /// 422 `invalid`: well formed, but a value is not one the server takes.
    Invalid,
    /// 422 `unknown_sku`: a SKU this machine does not offer.
    UnknownSku,
    /// 422 `hash_mismatch`: an upload's bytes do not hash to its name.
    HashMismatch,
    /// 409 `offset_mismatch`: an upload resumed from another byte than the server holds.
    OffsetMismatch,
    /// 409 `conflict`: the name, key or path is taken by something else.
    Conflict,
    /// 404 `not_found`.
    NotFound,
    /// 402 `usage_limit_reached`: the org's usage limit for the month is reached.
    UsageLimitReached,
    /// 401 `unauthorized`: no valid bearer token.
    Unauthorized,
    /// 403 `forbidden`: the token's role lacks the right the request needs.
    Forbidden,
    /// 429 `too_many_attempts`: too many bad tokens from this address; it waits.
    TooManyAttempts,
    /// 507 `insufficient_storage`: the disk under the state directory is full.
    InsufficientStorage,
    /// 500 `internal`: the server failed.
    Internal,
}

impl ErrorCode {
    /// The HTTP status it answers with.
    pub(crate) fn status(self) -> u16 {
        match self {
            ErrorCode::Malformed => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::TooManyAttempts => 429,
            ErrorCode::NotFound => 404,
            ErrorCode::UsageLimitReached => 402,
            ErrorCode::OffsetMismatch | ErrorCode::Conflict => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::RangeNotSatisfiable => 416,
            ErrorCode::Invalid | ErrorCode::UnknownSku | ErrorCode::HashMismatch => 422,
            ErrorCode::Internal => 500,
            ErrorCode::InsufficientStorage => 507,
        }
    }

    /// The code on the wire.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Malformed
            | ErrorCode::TooLarge
            | ErrorCode::RangeNotSatisfiable
            | ErrorCode::Invalid => "invalid",
            ErrorCode::UnknownSku => "unknown_sku",
            ErrorCode::HashMismatch => "hash_mismatch",
            ErrorCode::OffsetMismatch => "offset_mismatch",
            ErrorCode::Conflict => "conflict",
            ErrorCode::NotFound => "not_found",
            ErrorCode::UsageLimitReached => "usage_limit_reached",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::TooManyAttempts => "too_many_attempts",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::Internal => "internal",
        }
    }
}

/// A refusal or failure, as the API's error body.
#[derive(Debug)]
pub(crate) struct HttpError {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    /// An object, or `null` for none (then absent on the wire).
    pub(crate) details: Value,
}

impl HttpError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> HttpError {
        HttpError {
            code,
            message: message.into(),
            details: Value::Null,
        }
    }
    /// 400: the request is malformed.
    pub(crate) fn malformed(message: impl Into<String>) -> HttpError {
        HttpError::new(ErrorCode::Malformed, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> HttpError {
        HttpError::new(ErrorCode::NotFound, message)
    }
    pub(crate) fn internal(message: impl Into<String>) -> HttpError {
        HttpError::new(ErrorCode::Internal, message)
    }
    /// 507: the disk under the control plane's home is full.
    pub(crate) fn disk_full(what: &str) -> HttpError {
        HttpError::new(
            ErrorCode::InsufficientStorage,
            format!("{DISK_FULL} while {what}; free some space and try again"),
        )
    }
    pub(crate) fn with_details(mut self, details: Value) -> HttpError {
        self.details = details;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode::{self, *};

    const ALL: [ErrorCode; 15] = [
        Malformed,
        TooLarge,
        RangeNotSatisfiable,
        Invalid,
        UnknownSku,
        HashMismatch,
        OffsetMismatch,
        Conflict,
        NotFound,
        UsageLimitReached,
        Unauthorized,
        Forbidden,
        TooManyAttempts,
        InsufficientStorage,
        Internal,
    ];

    #[test]
    fn every_wire_code_is_in_the_contracts_enum() {
        let contract = include_str!("../../../../docs/api/openapi.yaml");
        let line = contract
            .lines()
            .find(|l| l.trim_start().starts_with("enum: [not_found"))
            .expect("ErrorDetail.code's enum");
        let allowed: Vec<&str> = line
            .trim()
            .trim_start_matches("enum: [")
            .trim_end_matches(']')
            .split(", ")
            .collect();
        for code in ALL {
            assert!(
                allowed.contains(&code.as_str()),
                "{code:?} answers `{}`, which docs/api/openapi.yaml does not list",
                code.as_str()
            );
        }
    }

    #[test]
    fn each_code_has_its_status() {
        let table: Vec<(u16, &str)> = ALL.iter().map(|c| (c.status(), c.as_str())).collect();
        assert_eq!(
            table,
            [
                (400, "invalid"),
                (413, "invalid"),
                (416, "invalid"),
                (422, "invalid"),
                (422, "unknown_sku"),
                (422, "hash_mismatch"),
                (409, "offset_mismatch"),
                (409, "conflict"),
                (404, "not_found"),
                (402, "usage_limit_reached"),
                (401, "unauthorized"),
                (403, "forbidden"),
                (429, "too_many_attempts"),
                (507, "insufficient_storage"),
                (500, "internal"),
            ]
        );
    }
}
