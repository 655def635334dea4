//! Connections and bodies: the pooled hyper client for each kind of [`Endpoint`] (TCP, TLS
//! or a Unix socket), the body of a blob upload (bytes in memory, or a window of a file read
//! as it is sent), and reading an answer whole, up to a limit.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncSeekExt, ReadBuf};

use crate::BlobSource;
use crate::endpoint::{Endpoint, Scheme};
use crate::error::{ApiError, ErrorKind};

/// The body of every request.
pub(crate) type Body = BoxBody<Bytes, io::Error>;

/// The largest answer read whole (JSON, or an error's body), in bytes.
pub(crate) const MAX_ANSWER: usize = 256 << 20;

/// A pooled client for one endpoint.
#[derive(Clone)]
pub(crate) enum Transport {
    Http(Client<HttpConnector, Body>),
    Https(Client<HttpsConnector<HttpConnector>, Body>),
    Unix(Client<UnixConnector, Body>),
}

impl Transport {
    /// The client for `endpoint`. Fails only when the TLS roots cannot be loaded.
    pub(crate) fn new(endpoint: &Endpoint) -> Result<Transport, ApiError> {
        let builder = || {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_idle_timeout(Duration::from_secs(30));
            b
        };
        Ok(match endpoint.scheme {
            Scheme::Http => Transport::Http(builder().build(HttpConnector::new())),
            Scheme::Https => Transport::Https(builder().build(crate::tls::connector()?)),
            Scheme::Unix => {
                let path = endpoint
                    .socket
                    .clone()
                    .expect("a unix endpoint has a socket path");
                Transport::Unix(builder().build(UnixConnector(Arc::new(path))))
            }
        })
    }

    pub(crate) fn request(&self, req: Request<Body>) -> ResponseFuture {
        match self {
            Transport::Http(c) => c.request(req),
            Transport::Https(c) => c.request(req),
            Transport::Unix(c) => c.request(req),
        }
    }
}

/// Connects every request to one Unix socket.
#[derive(Debug, Clone)]
pub(crate) struct UnixConnector(Arc<PathBuf>);

impl tower_service::Service<Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = Arc::clone(&self.0);
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(&*path).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// An empty body.
pub(crate) fn empty() -> Body {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

/// `bytes` as a body.
pub(crate) fn full(bytes: Bytes) -> Body {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

/// A blob's bytes as a body; a file is opened here and read as the body is sent.
pub(crate) async fn blob(source: &BlobSource) -> Result<Body, ApiError> {
    match source {
        BlobSource::Bytes(bytes) => Ok(full(bytes.clone())),
        BlobSource::File { path, offset, len } => {
            let io_error = |e: io::Error| {
                ApiError::new(
                    ErrorKind::Io,
                    format!("could not read `{}`: {e}", path.display()),
                )
                .with_source(e)
            };
            let mut file = tokio::fs::File::open(path).await.map_err(io_error)?;
            file.seek(io::SeekFrom::Start(*offset))
                .await
                .map_err(io_error)?;
            let buf_len = usize::try_from(*len)
                .unwrap_or(usize::MAX)
                .clamp(1, 256 << 10);
            Ok(FileBody {
                file,
                remaining: *len,
                buf: vec![0; buf_len].into_boxed_slice(),
            }
            .boxed())
        }
    }
}

/// `len` bytes of an open file, as a request body.
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: Box<[u8]>,
}

impl hyper::body::Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.remaining)
            .unwrap_or(usize::MAX)
            .min(this.buf.len());
        let mut read_buf = ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut read_buf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                let n = read_buf.filled().len();
                if n == 0 {
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file ended before the blob did",
                    ))));
                }
                this.remaining -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(
                    read_buf.filled(),
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// Why an answer could not be read whole.
pub(crate) enum ReadFailure {
    /// It is larger than [`MAX_ANSWER`].
    TooLarge,
    /// The connection broke while it arrived.
    Cut(String),
}

/// Read an answer's body whole, refusing past [`MAX_ANSWER`] bytes.
pub(crate) async fn read_whole(body: Incoming) -> Result<Bytes, ReadFailure> {
    match http_body_util::Limited::new(body, MAX_ANSWER)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ReadFailure::TooLarge),
        Err(e) => Err(ReadFailure::Cut(crate::display::error_chain(&*e))),
    }
}
