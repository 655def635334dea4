//! The serve loop: opens the [`Server`], reconciles, listens on the Unix socket (and
//! loopback TCP, and the team's listener, over TLS where it has a certificate), runs the
//! scheduler beside it, and serves each connection with hyper.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use crate::http::{Access, Shared, handle};
use crate::runs::scheduler;
use crate::server::Server;
use crate::{ServerError, ServerOptions};

/// Aborts its task when dropped, so the scheduler stops with `serve` even when `serve`'s
/// future is dropped rather than shut down.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn serve_connection<S>(
    conns: &mut tokio::task::JoinSet<()>,
    stream: S,
    shared: Arc<Shared>,
    access: Access,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Those that ended are let go as new ones come.
    while conns.try_join_next().is_some() {}
    conns.spawn(serve_stream(stream, shared, access));
}

/// One connection, served until it closes.
async fn serve_stream<S>(stream: S, shared: Arc<Shared>, access: Access)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let service =
        hyper::service::service_fn(move |req| handle(Arc::clone(&shared), access.clone(), req));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .await;
}

/// How long a TLS handshake may take before its connection is dropped: a client that opens
/// connections and never speaks holds nothing for long.
const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// A team listener's connection: its TLS handshake first where it serves TLS (on a task of
/// its own, so a slow one holds up no other), then its requests.
fn serve_team(
    conns: &mut tokio::task::JoinSet<()>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    while conns.try_join_next().is_some() {}
    conns.spawn(async move {
        let access = Access::Team {
            peer,
            tls: tls.is_some(),
        };
        match tls {
            Some(acceptor) => {
                if let Ok(Ok(stream)) =
                    tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await
                {
                    serve_stream(stream, shared, access).await;
                }
            }
            None => serve_stream(stream, shared, access).await,
        }
    });
}

/// Serves the control plane until `shutdown`: opens the server, reconciles, listens, runs the
/// scheduler beside the connections, and on shutdown lets the work in flight end before the
/// store is closed.
pub(crate) async fn serve(
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let (server, home_lock) = Server::open(&options)?;
    let server = Arc::new(server);
    let home_held = crate::server::HomeHeld::new(Arc::clone(&server), home_lock);
    start(&server).await;
    let (unix, socket) = unix_listener(&server.home)?;
    let tcp = tcp_listener(&options).await?;
    let team = team_listener(&options, &server.home).await?;
    let scheduler = spawn_scheduler(Arc::clone(&server), options.tick);
    let shared = Arc::new(Shared {
        server: Arc::clone(&server),
        uploads: Default::default(),
        dashboard: Default::default(),
        slowdown: Default::default(),
        sessions: Default::default(),
    });
    let mut conns = tokio::task::JoinSet::new();
    let accept = async {
        loop {
            tokio::select! {
                conn = unix.accept() => {
                    if let Ok((stream, _)) = conn {
                        serve_connection(&mut conns, stream, Arc::clone(&shared), Access::Owner);
                    }
                }
                conn = async {
                    match &team {
                        Some((l, _)) => l.accept().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let (Ok((stream, peer)), Some((_, tls))) = (conn, &team) {
                        serve_team(&mut conns, stream, peer, Arc::clone(&shared), tls.clone());
                    }
                }
                conn = async {
                    match &tcp {
                        Some((l, _)) => l.accept().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let (Ok((stream, peer)), Some((_, token))) = (conn, &tcp) {
                        let access = Access::Shared { token: Arc::clone(token), peer };
                        serve_connection(&mut conns, stream, Arc::clone(&shared), access);
                    }
                }
            }
        }
    };
    tokio::select! {
        () = shutdown => {}
        () = accept => {}
    }
    let _ = std::fs::remove_file(&socket);
    // Stopping: no new pass of the scheduler, no connection served any more (a request cut
    // here is one the client retries), then the blocking work already started.
    drop(scheduler);
    conns.abort_all();
    while conns.join_next().await.is_some() {}
    drop(shared);
    stop(server).await;
    drop(home_held);
    Ok(())
}

/// Before anything is answered: a pass of the scheduler reconciles the runs, and what earlier
/// servers left on their way in or out (stages, puts, partial uploads idle for an hour) is
/// listed, so nothing of this server's is among it, and removed meanwhile.
async fn start(server: &Arc<Server>) {
    {
        let s = Arc::clone(server);
        let _ = tokio::task::spawn_blocking(move || scheduler::tick(&s)).await;
    }
    let leftovers = {
        let s = Arc::clone(server);
        tokio::task::spawn_blocking(move || {
            crate::volumes::leftovers::Leftovers::list(&s.home, std::time::SystemTime::now())
        })
        .await
        .unwrap_or_default()
    };
    if !leftovers.is_empty() {
        tracing::info!(
            count = leftovers.len(),
            "removing what an earlier server left in the volumes' folders"
        );
        drop(crate::server::spawn_work(server, move |_| {
            leftovers.remove()
        }));
    }
}

/// The owner's Unix socket (0600) in the state directory, and its path.
fn unix_listener(
    home: &std::path::Path,
) -> Result<(tokio::net::UnixListener, std::path::PathBuf), ServerError> {
    let socket = crate::socket_path(home);
    let _ = std::fs::remove_file(&socket);
    let unix = tokio::net::UnixListener::bind(&socket).map_err(|source| ServerError::Listen {
        addr: socket.display().to_string(),
        source,
    })?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).map_err(
        |source| ServerError::Home {
            path: home.to_path_buf(),
            source,
        },
    )?;
    Ok((unix, socket))
}

/// The loopback TCP listener with its token, where the options ask for one.
async fn tcp_listener(
    options: &ServerOptions,
) -> Result<Option<(tokio::net::TcpListener, Arc<String>)>, ServerError> {
    let Some(t) = &options.tcp else {
        return Ok(None);
    };
    if !t.addr.ip().is_loopback() {
        return Err(ServerError::NotLoopback(t.addr));
    }
    let listener = tokio::net::TcpListener::bind(t.addr)
        .await
        .map_err(|source| ServerError::Listen {
            addr: t.addr.to_string(),
            source,
        })?;
    Ok(Some((listener, Arc::new(t.token.clone()))))
}

/// The team's listener (docs/team.md), where the options or `home/settings.json` ask for one:
/// TLS with their certificate and key, or plain HTTP on a loopback address only.
async fn team_listener(
    options: &ServerOptions,
    home: &std::path::Path,
) -> Result<Option<(tokio::net::TcpListener, Option<tokio_rustls::TlsAcceptor>)>, ServerError> {
    let team = match &options.team {
        Some(team) => team.clone(),
        None => match crate::settings::Settings::read(home) {
            Ok(settings) => match settings.team() {
                Some(team) => team,
                None => return Ok(None),
            },
            Err(e) => return Err(ServerError::TeamSettings(e.to_string())),
        },
    };
    let tls = match &team.tls {
        Some(files) => Some(tokio_rustls::TlsAcceptor::from(
            crate::http::tls::server_config(files)?,
        )),
        None if team.addr.ip().is_loopback() => None,
        None => return Err(ServerError::PlainHttp(team.addr)),
    };
    let listener = tokio::net::TcpListener::bind(team.addr)
        .await
        .map_err(|source| ServerError::Listen {
            addr: team.addr.to_string(),
            source,
        })?;
    tracing::info!(addr = %team.addr, tls = tls.is_some(), "serving the team");
    Ok(Some((listener, tls)))
}

/// The scheduler's passes, every `tick` or when kicked, until dropped.
fn spawn_scheduler(server: Arc<Server>, tick: std::time::Duration) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        loop {
            if let Ok(Ok(true)) = crate::server::spawn_work(&server, scheduler::tick).await {
                server.changed.notify_waiters();
            }
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = server.kick.notified() => {}
            }
        }
    }))
}

/// The blocking work already started (a commit, a pass) is let end, for a while, so that none
/// is cut between its files and its record; then the store is closed before the home is let
/// go, whatever still holds the server (a task of the dashboard, a log stream's): `state.db`
/// self-contained, its log copied in and emptied, and no connection of this server's left to
/// touch the next one's log.
async fn stop(server: Arc<Server>) {
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    while server.busy() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let closed = tokio::task::spawn_blocking(move || server.store.close()).await;
    if let Ok(Err(e)) = closed {
        tracing::warn!("the state database did not close cleanly: {e}");
    }
}

/// How long a stopping server waits for the blocking work in flight to end.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
