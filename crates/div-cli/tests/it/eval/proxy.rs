//! A TCP proxy in front of the local control plane's Unix socket that counts the bytes `div`
//! sends through it: what "nothing is uploaded" is measured with.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct CountingProxy {
    pub(crate) url: String,
    sent: Arc<AtomicU64>,
}

impl CountingProxy {
    /// A proxy on `127.0.0.1` forwarding every connection to `socket`.
    pub(crate) fn start(socket: PathBuf) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = UnixStream::connect(&socket) else {
                    continue;
                };
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || forward(client, server, &counter));
            }
        });
        CountingProxy { url, sent }
    }

    /// Bytes sent to the control plane so far: request lines, headers and bodies.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }
}

fn forward(client: TcpStream, server: UnixStream, sent: &AtomicU64) {
    let (Ok(mut client_in), Ok(mut server_out)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = std::thread::spawn(move || {
        let mut server_in = server;
        let mut client_out = client;
        let _ = std::io::copy(&mut server_in, &mut client_out);
        let _ = client_out.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match client_in.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                sent.fetch_add(n as u64, Ordering::SeqCst);
                if server_out.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = server_out.shutdown(Shutdown::Write);
    let _ = back.join();
}
