//! The error every [`crate::ControlPlane`] operation returns.

use serde_json::Value;

/// What kind of failure an [`ApiError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The thing asked for does not exist (404, 410), or the route does not take the method
    /// (405: a control plane without it).
    NotFound,
    /// The request was refused as invalid (400/422), or for want of space on the control
    /// plane's disk (507, `insufficient_storage`, not retried); `details()` says more, such
    /// as the accepted SKU list.
    Refused,
    /// The credentials were missing or wrong (401/403).
    Unauthorized,
    /// The request conflicts with what exists (409), like an idempotency key reused with
    /// another body.
    Conflict,
    /// The control plane could not be reached or kept failing (connection errors, 429, 5xx)
    /// after every retry the deadline allowed.
    Unavailable,
    /// The control plane answered something this client cannot read.
    Protocol,
    /// A local I/O failure (reading a file to upload, writing one downloaded).
    Io,
}

/// The error returned by every [`crate::ControlPlane`] operation.
///
/// Opaque: ask [`ApiError::kind`]. It never holds a credential: the client redacts tokens
/// before an error is made.
#[derive(Debug)]
pub struct ApiError {
    // Boxed so a `Result<_, ApiError>` stays small.
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    code: Option<String>,
    message: String,
    details: Value,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl ApiError {
    /// A new error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            inner: Box::new(Inner {
                kind,
                code: None,
                message: message.into(),
                details: Value::Null,
                source: None,
            }),
        }
    }

    /// The error as the server sent it: its stable `code`, `message` and `details`.
    pub fn from_server(kind: ErrorKind, code: String, message: String, details: Value) -> Self {
        ApiError {
            inner: Box::new(Inner {
                kind,
                code: Some(code),
                message,
                details,
                source: None,
            }),
        }
    }

    /// Attach the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.inner.source = Some(Box::new(source));
        self
    }

    /// Attach details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.inner.details = details;
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }
    /// The server's stable error code (`unknown_sku`), when the server sent one.
    pub fn code(&self) -> Option<&str> {
        self.inner.code.as_deref()
    }
    /// What went wrong, for a person.
    pub fn message(&self) -> &str {
        &self.inner.message
    }
    /// The server's details (`{"accepted": [...]}`), or `null`.
    pub fn details(&self) -> &Value {
        &self.inner.details
    }
    pub fn is_not_found(&self) -> bool {
        self.inner.kind == ErrorKind::NotFound
    }
    pub fn is_refused(&self) -> bool {
        self.inner.kind == ErrorKind::Refused
    }
    pub fn is_unauthorized(&self) -> bool {
        self.inner.kind == ErrorKind::Unauthorized
    }
    pub fn is_conflict(&self) -> bool {
        self.inner.kind == ErrorKind::Conflict
    }
    pub fn is_unavailable(&self) -> bool {
        self.inner.kind == ErrorKind::Unavailable
    }
    pub fn is_protocol(&self) -> bool {
        self.inner.kind == ErrorKind::Protocol
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// An error and its causes on one line, `: `-separated; a cause whose words the line already
/// holds is not repeated. The one helper for this in the workspace (div-server uses it too).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
