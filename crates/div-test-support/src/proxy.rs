//! A TCP proxy that injects faults between a client and a server: it drops, delays,
//! truncates and resets connections, one [`Fault`] per accepted connection.
//!
//! The proxy listens on `127.0.0.1:0` and forwards each connection to an [`Upstream`] (a TCP
//! address or a Unix socket). Faults queued with [`Proxy::push`] apply to the next
//! connections, in order; once they are used up, [`Proxy::set_default`] applies (at first
//! [`Fault::Pass`]). Counters say how many connections came and how many bytes went each way.
//!
//! ```
//! use div_test_support::proxy::{Fault, Proxy, Upstream};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let proxy = Proxy::start(Upstream::Tcp(server.local_addr().unwrap())).await;
//! proxy.push([Fault::Drop]);
//! assert!(proxy.url().starts_with("http://127.0.0.1:"));
//! # });
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Where the proxy forwards connections.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket.
    Unix(PathBuf),
}

/// What the proxy does to one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward both ways untouched.
    Pass,
    /// Accept, then close at once: nothing reaches the server.
    Drop,
    /// Hold each chunk this long before forwarding it, both ways.
    Delay(Duration),
    /// Forward the request whole; pass only the first `n` bytes of the response, then close
    /// the client's side cleanly. With `0`, the server did the work and the client hears
    /// nothing (the response is dropped).
    TruncateResponse(u64),
    /// As [`Fault::TruncateResponse`], but reset the client's connection (RST) instead.
    ResetResponse(u64),
    /// Pass only the first `n` bytes of the request to the server, then close both sides.
    TruncateRequest(u64),
    /// Pass only the first `n` bytes of the request, then nothing either way until
    /// [`Proxy::release_stalled`], then close both sides: a link that dies after the server
    /// has taken in what arrived.
    StallRequest(u64),
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<(VecDeque<Fault>, Option<Fault>)>,
    connections: AtomicU64,
    faulted: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    release: Option<tokio::sync::watch::Sender<u64>>,
}

impl Shared {
    fn next_fault(&self) -> Fault {
        let mut q = self
            .queue
            .lock()
            .expect("the fault queue is never poisoned");
        let fault = q.0.pop_front();
        fault.or(q.1).unwrap_or(Fault::Pass)
    }
}

/// A fault-injecting TCP proxy; stops when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`.
    pub async fn start(upstream: Upstream) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding 127.0.0.1:0 works");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let shared = Arc::new(Shared {
            release: Some(tokio::sync::watch::channel(0).0),
            ..Shared::default()
        });
        let s = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                s.connections.fetch_add(1, Ordering::SeqCst);
                let fault = s.next_fault();
                if fault != Fault::Pass {
                    s.faulted.fetch_add(1, Ordering::SeqCst);
                }
                tokio::spawn(handle(client, upstream.clone(), fault, Arc::clone(&s)));
            }
        });
        Proxy { addr, shared, task }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queue faults for the next connections, in order.
    pub fn push(&self, faults: impl IntoIterator<Item = Fault>) {
        let mut q = self
            .shared
            .queue
            .lock()
            .expect("the fault queue is never poisoned");
        q.0.extend(faults);
    }

    /// The fault for connections once the queue is empty.
    pub fn set_default(&self, fault: Fault) {
        let mut q = self
            .shared
            .queue
            .lock()
            .expect("the fault queue is never poisoned");
        q.1 = Some(fault);
    }

    /// How many queued faults have not been used yet.
    pub fn queued(&self) -> usize {
        self.shared
            .queue
            .lock()
            .expect("the fault queue is never poisoned")
            .0
            .len()
    }

    /// Closes every connection held by [`Fault::StallRequest`].
    pub fn release_stalled(&self) {
        if let Some(tx) = &self.shared.release {
            tx.send_modify(|generation| *generation += 1);
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Connections that got a fault other than [`Fault::Pass`].
    pub fn faulted(&self) -> u64 {
        self.shared.faulted.load(Ordering::SeqCst)
    }

    /// Bytes forwarded from clients to the server.
    pub fn bytes_up(&self) -> u64 {
        self.shared.up.load(Ordering::SeqCst)
    }

    /// Bytes forwarded from the server to clients.
    pub fn bytes_down(&self) -> u64 {
        self.shared.down.load(Ordering::SeqCst)
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

async fn connect(upstream: &Upstream) -> std::io::Result<Box<dyn Io>> {
    Ok(match upstream {
        Upstream::Tcp(addr) => Box::new(TcpStream::connect(addr).await?),
        Upstream::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
    })
}

async fn handle(client: TcpStream, upstream: Upstream, fault: Fault, shared: Arc<Shared>) {
    if fault == Fault::Drop {
        drop(client);
        return;
    }
    let Ok(server) = connect(&upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let mut released = shared.release.as_ref().map(|tx| tx.subscribe());
    let stall = matches!(fault, Fault::StallRequest(_));
    let (delay, up_limit, down_limit, reset) = match fault {
        Fault::Pass | Fault::Drop => (None, None, None, false),
        Fault::StallRequest(n) => (None, Some(n), None, false),
        Fault::Delay(d) => (Some(d), None, None, false),
        Fault::TruncateResponse(n) => (None, None, Some(n), false),
        Fault::ResetResponse(n) => (None, None, Some(n), true),
        Fault::TruncateRequest(n) => (None, Some(n), None, false),
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = tokio::io::split(server);
    {
        let up = async {
            pump(&mut cr, &mut sw, delay, up_limit, &shared.up).await;
            if stall && let Some(rx) = &mut released {
                let _ = rx.changed().await;
            }
            if up_limit.is_none() {
                // The client closed its side; the answer may still be coming.
                std::future::pending::<()>().await;
            }
        };
        let down = async {
            pump(&mut sr, &mut cw, delay, down_limit, &shared.down).await;
            if stall {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = up => {}
            () = down => {}
        }
    }
    let client = cr.reunite(cw).expect("the two halves of one stream");
    if reset {
        let _ = client.set_zero_linger();
    }
    drop(client);
}

/// Copy `from` to `to`, at most `limit` bytes, each chunk after `delay`. Returns when `from`
/// ends, a write fails, or the limit is reached.
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    delay: Option<Duration>,
    limit: Option<u64>,
    counter: &AtomicU64,
) {
    let mut sent: u64 = 0;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // Read before checking the limit, so a limit of 0 still waits for the other side.
        let n = match limit {
            Some(l) => n.min(usize::try_from(l - sent).unwrap_or(usize::MAX)),
            None => n,
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        if n > 0 {
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
            let _ = to.flush().await;
        }
        sent += n as u64;
        counter.fetch_add(n as u64, Ordering::SeqCst);
        if limit.is_some_and(|l| sent >= l) {
            return;
        }
    }
}
