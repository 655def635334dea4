//! The log stream's frame decoder, on what a control plane sends. Arbitrary bytes, pushed in
//! arbitrary pieces, never panic the decoder; and a log encoded as chunk frames of any size,
//! pushed in pieces of any size, decodes to the same bytes at the same offsets.
#![no_main]

use div_api::logframe::{self, Decoder, Frame};
use libfuzzer_sys::fuzz_target;

/// Pushes `wire` in pieces of `piece` bytes, decoding as it goes; the chunks' bytes, whether
/// each chunk's offset followed the last, and whether decoding failed.
fn decode(wire: &[u8], piece: usize) -> (Vec<u8>, bool, bool) {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let mut in_order = true;
    for part in wire.chunks(piece.max(1)) {
        decoder.push(part);
        loop {
            match decoder.next_frame() {
                Ok(Some(Frame::Chunk { offset, data })) => {
                    in_order &= offset == out.len() as u64;
                    out.extend_from_slice(&data);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return (out, in_order, true),
            }
        }
    }
    (out, in_order, false)
}

fuzz_target!(|input: (u8, u8, &[u8])| {
    let (chunk, piece, bytes) = input;
    // Whatever a server might send.
    let _ = decode(bytes, usize::from(piece));

    // A real stream of `bytes` as the log.
    let mut wire = Vec::new();
    for (i, part) in bytes.chunks(usize::from(chunk).max(1)).enumerate() {
        let offset = (i * usize::from(chunk).max(1)) as u64;
        wire.extend_from_slice(&logframe::encode_chunk(offset, part));
        if i % 3 == 0 {
            wire.extend_from_slice(logframe::BEAT);
        }
    }
    wire.extend_from_slice(&logframe::encode_tail(bytes.len() as u64));
    let (out, in_order, failed) = decode(&wire, usize::from(piece));
    assert!(!failed, "a stream the encoder made failed to decode");
    assert!(in_order, "offsets out of order");
    assert_eq!(out, bytes, "the log came back different");
});
