//! Large files: sent in pieces and arriving whole, the progress bar moving within one, a big
//! top-level file named.

use super::quickstart;
use crate::support::{DIV, World, text};

/// A file larger than a piece goes in several requests, each from where the last ended, and
/// arrives whole on the local control plane (which checks its hash).
#[test]
fn a_large_file_is_sent_in_pieces_and_arrives_whole() {
    let local = quickstart();
    let size = 70_000_000usize;
    let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    std::fs::write(local.project().join("big.bin"), &bytes).expect("write");
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--",
        "python3",
        "-c",
        "import zlib; d = open('big.bin', 'rb').read(); print(len(d), zlib.crc32(d))",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let crc = crc32(&bytes);
    assert!(stdout.contains(&format!("{size} {crc}")), "{stdout}");
}

/// CRC-32 (IEEE), as Python's `zlib.crc32`.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// On a terminal, the progress bar moves while one large file is sent, in the shipping
/// line's units (`40.0 MB`, not `38.15 MiB`).
#[tokio::test]
async fn the_progress_bar_moves_within_a_large_file_in_the_shipping_lines_units() {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};
    let world = World::new().await;
    let queued = crate::support::run(div_api::RunStatus::Queued);
    world
        .mount_placing(
            &queued,
            &[],
            &crate::support::run(div_api::RunStatus::Succeeded),
        )
        .await;
    let size = 40_000_000usize;
    let content = vec![7u8; size];
    std::fs::write(world.project().join("weights.bin"), &content).expect("write");
    let hash = blake3::hash(&content).to_hex().to_string();
    Mock::given(method("POST"))
        .and(path_regex("^/v1/volumes/[^/]+/blobs/missing$"))
        .respond_with(div_test_support::mock::json_response(
            200,
            &serde_json::json!({ "missing": [hash] }),
        ))
        .with_priority(1)
        .mount(&world.server)
        .await;
    Mock::given(method("PUT"))
        .and(path_regex("^/v1/volumes/[^/]+/blobs/[0-9a-f]+$"))
        .respond_with(ResponseTemplate::new(204).set_delay(std::time::Duration::from_secs(1)))
        .mount(&world.server)
        .await;

    let mut script = tokio::process::Command::new("script");
    script.env_clear();
    for (key, value) in world.command(&[]).as_std().get_envs() {
        if let Some(value) = value {
            script.env(key, value);
        }
    }
    let on_terminal = script
        .env("TERM", "xterm")
        .args(["-qfec", &format!("{DIV} run -d train.py"), "/dev/null"])
        .current_dir(world.project())
        .output()
        .await
        .expect("script runs div on a pty");
    let transcript = String::from_utf8_lossy(&on_terminal.stdout);
    assert_eq!(on_terminal.status.code(), Some(0), "{transcript}");
    assert!(
        transcript.contains("40.0 MB → very-cool-classifier-code/"),
        "{transcript}"
    );
    assert!(transcript.contains("/40.0 MB"), "{transcript}");
    assert!(!transcript.contains("MiB"), "{transcript}");

    let puts: Vec<String> = world
        .server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.method.as_str() == "PUT")
        .map(|r| r.url.query().unwrap_or_default().to_string())
        .collect();
    let piece = div_core::UPLOAD_PIECE_BYTES;
    assert_eq!(
        puts,
        [
            format!("offset=0&total={size}"),
            format!("offset={piece}&total={size}")
        ]
    );
}

/// A big file at the top level: while it hashes, a terminal shows how far hashing got; the
/// large-shipment warning names the file itself, not a placeholder.
#[tokio::test]
async fn a_big_top_level_file_shows_hashing_and_is_named_in_the_hint() {
    let world = World::new().await;
    std::fs::create_dir_all(world.project().join("src")).expect("mkdir");
    std::fs::write(world.project().join("src/model.py"), "x = 1\n").expect("write");
    // Sparse: 2 GB to hash, nothing on disk. Hashing it takes seconds (a debug build reads
    // well under 1 GB/s), past the 0.7 s after which the line shows, as the upload test's
    // 2 s answer is.
    let big = std::fs::File::create(world.project().join("weights.bin")).expect("create");
    big.set_len(2_000_000_000).expect("set_len");

    let mut script = tokio::process::Command::new("script");
    script.env_clear();
    for (key, value) in world.command(&[]).as_std().get_envs() {
        if let Some(value) = value {
            script.env(key, value);
        }
    }
    let on_terminal = script
        .env("TERM", "xterm")
        .args([
            "-qfec",
            &format!("{DIV} run --dry-run train.py"),
            "/dev/null",
        ])
        .current_dir(world.project())
        .output()
        .await
        .expect("script runs div on a pty");
    let transcript = String::from_utf8_lossy(&on_terminal.stdout);
    assert_eq!(on_terminal.status.code(), Some(0), "{transcript}");
    assert!(transcript.contains("hashing what to ship "), "{transcript}");
    assert!(
        transcript.contains("warning: this ships 2.0 GB, 2.0 GB of it in `weights.bin`"),
        "{transcript}"
    );
    assert!(
        transcript.contains("a `.gitignore` that names `weights.bin` leave it out"),
        "{transcript}"
    );
    assert!(!transcript.contains("the data"), "{transcript}");
}
