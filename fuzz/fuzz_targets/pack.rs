//! The blob pack's reader, on what any client sends to `POST /v1/volumes/{name}/blobs/pack`:
//! arbitrary bytes never panic it; and a pack framed from any blobs reads back as them.
#![no_main]

use div_api::{PackBlob, pack_frame, parse_pack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&[u8], Vec<Vec<u8>>)| {
    let (bytes, blobs) = input;
    let _ = parse_pack(bytes);
    let blobs: Vec<PackBlob> = blobs
        .into_iter()
        .map(|data| PackBlob {
            hash: blake3::hash(&data).to_hex().to_string(),
            data,
        })
        .collect();
    let body = pack_frame(&blobs);
    let read = parse_pack(&body).expect("a pack the framer made reads back");
    assert_eq!(read.len(), blobs.len());
    for ((hash, data), blob) in read.iter().zip(&blobs) {
        assert_eq!(*hash, blob.hash);
        assert_eq!(*data, blob.data.as_slice());
    }
});
