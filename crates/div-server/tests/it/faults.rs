//! Fault injection: the real server on loopback TCP with a token, the real client, and a
//! proxy between them that cuts, resets and drops connections (`div_test_support::proxy`).

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use div_api::{
    BlobSource, ControlPlane, CreateRun, Endpoint, HttpControlPlane, ListRuns, LogEvent, Options,
    Token, UploadOutcome, upload_blob_resuming,
};
use div_server::{SandboxMode, TcpOptions};
use div_test_support::proxy::{Fault, Proxy, Upstream};

use crate::harness::{Server, options};

const TOKEN: &str = "fault-token";

struct Tcp {
    server: Server,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

/// A server on a temp home listening on a free loopback port as well as its socket.
async fn tcp_server() -> Tcp {
    let dir = tempfile::tempdir().expect("a temp dir");
    let home: PathBuf = dir.path().join("home");
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port");
    let mut opts = options(&home, Some("h100:2"), SandboxMode::Auto);
    opts.tcp = Some(TcpOptions {
        addr,
        token: TOKEN.to_owned(),
    });
    let server = Server::at(opts).await;
    Tcp {
        server,
        addr,
        _dir: dir,
    }
}

/// A client for `url` that retries quickly.
fn client(url: &str) -> HttpControlPlane {
    let options = Options {
        token: Some(Token::new(TOKEN)),
        deadline: Duration::from_secs(30),
        initial_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(20),
        ..Options::default()
    };
    HttpControlPlane::new(Endpoint::parse(url).expect("a valid url"), options)
        .expect("a client for a loopback url")
}

fn run(command: &str) -> CreateRun {
    CreateRun {
        project: "faults".into(),
        name: None,
        entrypoint: command.into(),
        command: command.into(),
        sku: "cpu".into(),
        gpus: 1,
        cpu: None,
        memory_gib: None,
        max_spend_cents: None,
        image: None,
        pull: None,
        env: Vec::new(),
        checks: Vec::new(),
        code: None,
        telemetry_layout: None,
        model: None,
        extra: Default::default(),
    }
}

/// A small deterministic generator (xorshift), so each run cuts at the same places.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Reads the whole log through `cp`, checking every chunk starts where the last ended.
async fn read_log(cp: &HttpControlPlane, id: &str) -> (Vec<u8>, bool) {
    let mut stream = cp.log(id, 0, true).await.expect("the log opens");
    let mut out = Vec::new();
    let mut ended = false;
    while let Some(event) = stream.next().await {
        match event.expect("the log stream resumes across cuts") {
            LogEvent::Chunk { offset, data } => {
                assert_eq!(offset, out.len() as u64, "a chunk out of place");
                out.extend_from_slice(&data);
            }
            LogEvent::Tail { .. } => {}
            LogEvent::End(_) => ended = true,
        }
    }
    (out, ended)
}

/// `count` cuts of the response, each after `least` to twice `least` bytes; every third a
/// reset, the others a clean close. Also how many bytes the resets let through: a reset may
/// throw away what the client's kernel held unread, so at most that much may cross again.
fn cuts(count: usize, least: u64, seed: &mut u64) -> (Vec<Fault>, u64) {
    let mut reset_bytes = 0;
    let cuts = (0..count)
        .map(|i| {
            let n = least + next(seed) % least;
            if i % 3 == 0 {
                reset_bytes += n;
                Fault::ResetResponse(n)
            } else {
                Fault::TruncateResponse(n)
            }
        })
        .collect();
    (cuts, reset_bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_stream_cut_100_times_arrives_byte_identical() {
    let tcp = tcp_server().await;
    let direct = client(&format!("http://{}", tcp.addr));
    let proxy = Proxy::start(Upstream::Tcp(tcp.addr)).await;
    // Each cut lets through between 70 kB and 140 kB: more than one whole frame (64 KiB and
    // its header), so every connection delivers something, and 100 of them cannot reach the
    // end of a 14.9 MB log, so all 100 cuts happen during the stream.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let (cuts, _) = cuts(100, 70_000, &mut seed);
    proxy.push(cuts);
    let cut = client(&proxy.url());

    let placed = direct
        .create_run("cut-log", &run("seq 1 2000000"))
        .await
        .expect("the run is placed");
    let (received, ended) = read_log(&cut, &placed.id).await;
    assert!(ended, "the stream ended with the run");
    assert_eq!(proxy.queued(), 0, "all 100 cuts happened during the stream");
    assert_eq!(proxy.faulted(), 100);

    let (whole, _) = read_log(&direct, &placed.id).await;
    let expected: String = (1..=2_000_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(received.len(), whole.len(), "0 bytes lost, 0 duplicated");
    assert!(received == whole, "the cut stream is byte-identical");
    let at = received
        .windows(2)
        .position(|w| w == b"1\n")
        .expect("the command's output is in the log");
    assert!(
        received[at..].starts_with(expected.as_bytes()),
        "every line of seq arrived, in order, once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_run_whose_response_is_dropped_places_exactly_one_run() {
    let tcp = tcp_server().await;
    let direct = client(&format!("http://{}", tcp.addr));
    let proxy = Proxy::start(Upstream::Tcp(tcp.addr)).await;
    // The request is dropped before it arrives, then twice the server places the run and
    // the answer is lost (cut, then reset), then it goes through.
    proxy.push([
        Fault::Drop,
        Fault::TruncateResponse(0),
        Fault::ResetResponse(0),
    ]);
    let cut = client(&proxy.url());
    let placed = cut
        .create_run("one-key", &run("echo once"))
        .await
        .expect("the retries get an answer");
    assert_eq!(proxy.faulted(), 3, "every fault was met");
    assert!(proxy.connections() >= 4);

    let list = direct
        .list_runs(&ListRuns::default())
        .await
        .expect("runs list");
    let ids: Vec<&str> = list.runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [placed.id.as_str()], "exactly one run was placed");
    // The same key again, directly, is the same run.
    let again = direct
        .create_run("one-key", &run("echo once"))
        .await
        .expect("a retry answers");
    assert_eq!(again.id, placed.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_cut_half_way_resumes_without_resending_and_commits_a_correct_tree() {
    let tcp = tcp_server().await;
    let direct = client(&format!("http://{}", tcp.addr));
    let proxy = Proxy::start(Upstream::Tcp(tcp.addr)).await;
    direct
        .create_volume("faults")
        .await
        .expect("a volume is made");

    let mut seed = 7_u64;
    let blob: Vec<u8> = (0..1_000_000).map(|_| next(&mut seed) as u8).collect();
    let hash = blake3::hash(&blob).to_hex().to_string();
    let total = blob.len() as u64;

    // The first connection carries the missing-blobs question, then the upload (the client
    // keeps it alive); after 500 kB the link goes silent, and dies once the server has
    // written what arrived.
    proxy.push([Fault::StallRequest(500_000)]);
    let cut = client(&proxy.url());
    let blob_bytes = BlobSource::Bytes(blob.clone().into());
    let (h2, cut2) = (hash.clone(), cut.clone());
    let upload =
        tokio::spawn(async move { upload_blob_resuming(&cut2, "faults", &h2, &blob_bytes).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let arrived = loop {
        let missing = direct
            .missing_blobs("faults", std::slice::from_ref(&hash))
            .await
            .expect("missing blobs answers");
        let partial = missing.partial.get(&hash).copied().unwrap_or(0);
        if partial > 498_000 {
            break partial;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never held the first half: {partial}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    proxy.release_stalled();
    let outcome = upload
        .await
        .expect("the upload task ends")
        .expect("the upload resumes");
    // The client asks what arrived and goes on from there inside `upload_blob`, so the
    // outcome says where the call began; what crossed the proxy says what was sent.
    assert!(matches!(outcome, UploadOutcome::Sent { .. }), "{outcome:?}");
    assert!(arrived < total);
    // What crossed the proxy: the cut half, then only the rest (plus headers and questions).
    let sent = proxy.bytes_up();
    assert!(
        sent < total + 20_000,
        "{sent} bytes went up for a {total}-byte blob: something was sent twice"
    );

    let (back, n) =
        crate::harness::commit_and_read_back(&direct, "faults", "code/resumed", &hash, total).await;
    assert_eq!(n, total);
    assert!(
        back == blob,
        "the committed file is the blob, byte for byte"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_connections_still_answer() {
    let tcp = tcp_server().await;
    let proxy = Proxy::start(Upstream::Tcp(tcp.addr)).await;
    proxy.set_default(Fault::Delay(Duration::from_millis(30)));
    let slow = client(&proxy.url());
    let placed = slow
        .create_run("slow", &run("echo slow"))
        .await
        .expect("a slow link still places the run");
    let (log, ended) = read_log(&slow, &placed.id).await;
    assert!(ended);
    assert!(Bytes::from(log).ends_with(b"slow\n"));
    drop(tcp.server);
}

/// A 6 MB file of a volume read through a proxy that cuts the response 30 times: the read
/// resumes each time from the last byte written (`range` with `if-range`), arrives
/// byte-identical, and what crossed the proxy is the file about once, not again from the
/// start each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_read_cut_30_times_resumes_and_arrives_byte_identical() {
    let tcp = tcp_server().await;
    let direct = client(&format!("http://{}", tcp.addr));
    direct.create_volume("data").await.expect("the volume");
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let data: Vec<u8> = (0..6_000_000).map(|_| next(&mut seed) as u8).collect();
    let on_disk = tcp.server.home.join("volumes/data/big.bin");
    std::fs::write(&on_disk, &data).expect("the file");

    let proxy = Proxy::start(Upstream::Tcp(tcp.addr)).await;
    let (cuts, may_cross_again) = cuts(30, 100_000, &mut seed);
    proxy.push(cuts);
    let cut = client(&proxy.url());
    let mut out = Vec::new();
    let n = cut
        .read_file("data", "big.bin", &mut out)
        .await
        .expect("the read resumes to the end");
    assert_eq!(proxy.faulted(), 30, "every cut happened during the read");
    assert_eq!(n, data.len() as u64);
    assert!(out == data, "byte-identical: 0 bytes lost, 0 duplicated");
    let down = proxy.bytes_down();
    // Headers: 31 answers of well under 1 kB.
    let most = data.len() as u64 + may_cross_again + 31 * 1024;
    assert!(
        down <= most,
        "{down} bytes crossed the proxy for a {} byte file (at most {most}): only what a reset lost crossed again",
        data.len()
    );
}
