//! How an [`crate::HttpControlPlane`] behaves: its [`Options`] and the bearer [`Token`] it
//! sends.

use std::fmt;
use std::time::Duration;

/// A bearer token. Never shown: `Debug` and `Display` print `<redacted>`, and the client
/// scrubs it from every error message.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wrap a token the caller read (from its settings; this crate reads no environment).
    pub fn new(token: impl Into<String>) -> Token {
        Token(token.into())
    }
    /// The token itself, to put on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How an [`HttpControlPlane`] behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sent as `Authorization: Bearer <token>` when set.
    pub token: Option<Token>,
    /// How long one request may take, retries included. For the operations that resume
    /// across dropped connections (an upload, a file read, a log stream), how long each may go
    /// without progress: bytes the server took, bytes written, a whole log frame (the
    /// server beats every few seconds while following).
    pub deadline: Duration,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// The first retry's backoff; each next one doubles, up to `max_backoff`, with jitter.
    pub initial_backoff: Duration,
    /// The longest wait between two tries.
    pub max_backoff: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            token: None,
            deadline: Duration::from_secs(30),
            user_agent: format!("div/{}", env!("CARGO_PKG_VERSION")),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}
