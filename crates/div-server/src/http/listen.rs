//! The serve loop: opens the [`Server`], reconciles, listens on the Unix socket (and
//! loopback TCP), runs the scheduler beside it, and serves each connection with hyper.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use crate::http::{Shared, handle};
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

fn serve_connection<S>(stream: S, shared: Arc<Shared>, token: Option<Arc<String>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let io = hyper_util::rt::TokioIo::new(stream);
        let service =
            hyper::service::service_fn(move |req| handle(Arc::clone(&shared), token.clone(), req));
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await;
    });
}

pub(crate) async fn serve(
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let (server, home_lock) = Server::open(&options)?;
    let home = server.home.clone();
    let server = Arc::new(server);
    // Reconcile before answering anything.
    {
        let s = Arc::clone(&server);
        let _ = tokio::task::spawn_blocking(move || scheduler::tick(&s)).await;
    }

    let socket = crate::socket_path(&home);
    let _ = std::fs::remove_file(&socket);
    let unix = tokio::net::UnixListener::bind(&socket).map_err(|source| ServerError::Listen {
        addr: socket.display().to_string(),
        source,
    })?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).map_err(
        |source| ServerError::Home {
            path: home.clone(),
            source,
        },
    )?;
    let tcp = match &options.tcp {
        Some(t) => {
            if !t.addr.ip().is_loopback() {
                return Err(ServerError::NotLoopback(t.addr));
            }
            let listener = tokio::net::TcpListener::bind(t.addr)
                .await
                .map_err(|source| ServerError::Listen {
                    addr: t.addr.to_string(),
                    source,
                })?;
            Some((listener, Arc::new(t.token.clone())))
        }
        None => None,
    };

    let scheduler = {
        let server = Arc::clone(&server);
        let tick = options.tick;
        AbortOnDrop(tokio::spawn(async move {
            loop {
                let s = Arc::clone(&server);
                if let Ok(Ok(true)) = tokio::task::spawn_blocking(move || scheduler::tick(&s)).await
                {
                    server.changed.notify_waiters();
                }
                tokio::select! {
                    () = tokio::time::sleep(tick) => {}
                    () = server.kick.notified() => {}
                }
            }
        }))
    };
    let shared = Arc::new(Shared {
        server: Arc::clone(&server),
        uploads: Default::default(),
        dashboard: Default::default(),
    });
    let accept = async {
        loop {
            tokio::select! {
                conn = unix.accept() => {
                    if let Ok((stream, _)) = conn {
                        serve_connection(stream, Arc::clone(&shared), None);
                    }
                }
                conn = async {
                    match &tcp {
                        Some((l, _)) => l.accept().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let (Ok((stream, _)), Some((_, token))) = (conn, &tcp) {
                        serve_connection(stream, Arc::clone(&shared), Some(Arc::clone(token)));
                    }
                }
            }
        }
    };
    tokio::select! {
        () = shutdown => {}
        () = accept => {}
    }
    drop(scheduler);
    let _ = std::fs::remove_file(&socket);
    // `state.db` self-contained once the server stops: the WAL copied in and emptied.
    {
        let s = Arc::clone(&server);
        let _ = tokio::task::spawn_blocking(move || s.store.checkpoint()).await;
    }
    drop(home_lock);
    Ok(())
}
