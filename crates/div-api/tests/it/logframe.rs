//! The log framing: every split of the bytes decodes the same; bad headers are refused.

use bytes::Bytes;
use div_api::RunStatus;
use div_api::logframe::{self, Decoder, Frame, FrameError};
use div_test_support::mock::sample_run;

/// Decode `wire` fed in pieces of `step` bytes; chunks merged into one byte string.
fn decode(wire: &[u8], step: usize) -> Result<(Vec<u8>, Vec<String>), FrameError> {
    let mut decoder = Decoder::new();
    let mut log = Vec::new();
    let mut others = Vec::new();
    for piece in wire.chunks(step) {
        decoder.push(piece);
        while let Some(frame) = decoder.next_frame()? {
            match frame {
                Frame::Chunk { offset, data } => {
                    assert_eq!(offset, log.len() as u64, "chunks arrive in order");
                    log.extend_from_slice(&data);
                }
                Frame::Beat => others.push("beat".to_owned()),
                Frame::Tail { offset } => others.push(format!("tail {offset}")),
                Frame::End(run) => others.push(format!("end {}", run.name)),
            }
        }
    }
    assert!(decoder.is_idle(), "nothing left over");
    Ok((log, others))
}

#[test]
fn every_split_decodes_the_same() {
    let run = sample_run("run-k4t9", RunStatus::Succeeded);
    let mut wire = Vec::new();
    wire.extend_from_slice(&logframe::encode_chunk(0, b"hello\n"));
    wire.extend_from_slice(logframe::BEAT);
    wire.extend_from_slice(&logframe::encode_chunk(6, b""));
    wire.extend_from_slice(&logframe::encode_chunk(6, &[0, 255, b'\n', 7]));
    wire.extend_from_slice(&logframe::encode_tail(10));
    wire.extend_from_slice(&logframe::encode_end(&run));
    for step in 1..=wire.len() {
        let (log, others) = decode(&wire, step).expect("well-formed");
        assert_eq!(log, b"hello\n\0\xff\n\x07", "step {step}");
        assert_eq!(others, ["beat", "tail 10", "end run-k4t9"], "step {step}");
    }
}

#[test]
fn chunk_header_alone_matches_encode_chunk() {
    let mut by_parts = logframe::chunk_header(42, 3).into_bytes();
    by_parts.extend_from_slice(b"abc");
    assert_eq!(Bytes::from(by_parts), logframe::encode_chunk(42, b"abc"));
}

fn check(wire: &str, expect: &str) {
    let got = match decode(wire.as_bytes(), wire.len().max(1)) {
        Ok((log, others)) => format!("ok {:?} {others:?}", String::from_utf8_lossy(&log)),
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(got, expect, "{wire:?}");
}

#[test]
fn headers() {
    check("chunk 0 2\nhi", r#"ok "hi" []"#);
    check("tail 7\n", r#"ok "" ["tail 7"]"#);
    check("beat\n", r#"ok "" ["beat"]"#);
    check("chunk 0\n", "error: bad log frame header `chunk 0`");
    check("chunk -1 2\n", "error: bad log frame header `chunk -1 2`");
    check("chunk 0 2 3\n", "error: bad log frame header `chunk 0 2 3`");
    check("chunk +0 2\n", "error: bad log frame header `chunk +0 2`");
    check("beat \n", "error: bad log frame header `beat `");
    check("hello\n", "error: bad log frame header `hello`");
    check(
        "chunk 18446744073709551615 2\n",
        "error: bad log frame header `chunk 18446744073709551615 2`",
    );
    check(
        &"x".repeat(100),
        "error: log frame header longer than 64 bytes",
    );
    check(
        "end 99999999999\n",
        "error: log `end` frame of 99999999999 bytes is larger than 16777216",
    );
    check("end 2\n{}", "error: log `end` frame does not hold a run");
}
