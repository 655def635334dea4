//! Where a control plane listens: an [`Endpoint`] parsed from `https://…`, `http://…` or
//! `unix:///path`, and the URI of a route on it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use http::Uri;

/// Where a control plane listens: `http://host:port[/prefix]`, `https://…` or
/// `unix:///path/to/socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub(crate) scheme: Scheme,
    /// `host:port` (empty for a socket).
    authority: String,
    /// A path prefix without its trailing `/`, like `/api` (often empty).
    prefix: String,
    pub(crate) socket: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Http,
    Https,
    Unix,
}

/// The error returned by [`Endpoint::parse`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// Not one of the three forms.
    #[error("control plane address `{0}` is not `https://…`, `http://…` or `unix:///path`")]
    Scheme(String),
    /// No host, or one that is not a host.
    #[error("control plane address `{0}` has no valid host")]
    Host(String),
    /// A `user:password@` part; the address is not repeated, it holds a credential.
    #[error("the control plane address holds credentials (`user@host`); pass the token separately")]
    Credentials,
    /// A query or fragment.
    #[error("control plane address `{0}` has a query or fragment")]
    Query(String),
    /// A socket path that is not absolute.
    #[error("socket path in `{0}` is not absolute: write `unix:///path/to/socket`")]
    SocketPath(String),
}

impl Endpoint {
    /// Parse `https://…`, `http://…` or `unix:///path/to/socket`.
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        if let Some(path) = text.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(EndpointError::SocketPath(text.to_owned()));
            }
            return Ok(Endpoint::unix(path));
        }
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return Err(EndpointError::Scheme(text.to_owned()));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(EndpointError::Credentials);
        }
        if path.contains(['?', '#']) || authority.contains(['?', '#']) {
            return Err(EndpointError::Query(text.to_owned()));
        }
        if authority.is_empty()
            || authority.contains(char::is_whitespace)
            || http::uri::Authority::from_str(authority).is_err()
        {
            return Err(EndpointError::Host(text.to_owned()));
        }
        if path.contains(char::is_whitespace) {
            return Err(EndpointError::Host(text.to_owned()));
        }
        Ok(Endpoint {
            scheme,
            authority: authority.to_owned(),
            prefix: path.trim_end_matches('/').to_owned(),
            socket: None,
        })
    }

    /// The control plane on the Unix socket at `path`.
    pub fn unix(path: impl Into<PathBuf>) -> Endpoint {
        Endpoint {
            scheme: Scheme::Unix,
            authority: String::new(),
            prefix: String::new(),
            socket: Some(path.into()),
        }
    }

    /// Whether it is a Unix socket.
    pub fn is_unix(&self) -> bool {
        self.scheme == Scheme::Unix
    }

    /// The URI of `path_and_query` (which starts with `/`) on this endpoint.
    pub(crate) fn uri(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let uri = match self.scheme {
            // The connector ignores the host; hyper wants one.
            Scheme::Unix => format!("http://localhost{path_and_query}"),
            Scheme::Http => format!("http://{}{}{path_and_query}", self.authority, self.prefix),
            Scheme::Https => format!("https://{}{}{path_and_query}", self.authority, self.prefix),
        };
        Ok(Uri::try_from(uri)?)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.scheme, &self.socket) {
            (Scheme::Unix, Some(path)) => write!(f, "unix://{}", path.display()),
            (Scheme::Https, _) => write!(f, "https://{}{}", self.authority, self.prefix),
            _ => write!(f, "http://{}{}", self.authority, self.prefix),
        }
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}
