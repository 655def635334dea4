//! The upload plan sends only what the volume lacks, each content once, resuming partials.

use std::collections::BTreeMap;

use div_ship::{ShipOptions, Shipment, UploadPlan};

use crate::support::write;

fn shipment() -> (tempfile::TempDir, Shipment) {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "a.py", "same");
    write(tmp.path(), "copy/a.py", "same");
    write(tmp.path(), "data.bin", "0123456789");
    write(tmp.path(), "empty", "");
    let shipment = div_ship::collect(tmp.path(), &ShipOptions::default()).unwrap();
    (tmp, shipment)
}

fn hash(content: &str) -> String {
    blake3::hash(content.as_bytes()).to_hex().to_string()
}

#[test]
fn everything_missing_sends_each_content_once() {
    let (tmp, shipment) = shipment();
    let missing = vec![hash("same"), hash("0123456789"), hash("")];
    let plan = UploadPlan::new(&shipment, &missing, &BTreeMap::new());
    assert_eq!(
        (plan.total_files, plan.total_bytes, plan.already_there_bytes),
        (3, 14, 0)
    );
    assert_eq!(
        plan.blobs[0].path,
        tmp.path().canonicalize().unwrap().join("a.py")
    );
    assert_eq!(
        plan.blobs.iter().map(|b| b.len).collect::<Vec<_>>(),
        [4, 10, 0]
    );
}

#[test]
fn nothing_missing_sends_nothing() {
    let (_tmp, shipment) = shipment();
    let plan = UploadPlan::new(&shipment, &[], &BTreeMap::new());
    assert_eq!(
        (plan.total_files, plan.total_bytes, plan.already_there_bytes),
        (0, 0, 14)
    );
    assert!(plan.blobs.is_empty());
}

#[test]
fn partial_blobs_resume_where_they_stopped() {
    let (_tmp, shipment) = shipment();
    let missing = vec![hash("0123456789"), "f".repeat(64)];
    let partial = BTreeMap::from([(hash("0123456789"), 6)]);
    let plan = UploadPlan::new(&shipment, &missing, &partial);
    assert_eq!(plan.blobs.len(), 1);
    let blob = &plan.blobs[0];
    assert_eq!((blob.offset, blob.len, blob.size), (6, 4, 10));
    assert_eq!((plan.total_bytes, plan.already_there_bytes), (4, 10));
}

#[test]
fn an_offset_past_the_end_restarts_the_blob() {
    let (_tmp, shipment) = shipment();
    let missing = vec![hash("same")];
    let partial = BTreeMap::from([(hash("same"), 99)]);
    let plan = UploadPlan::new(&shipment, &missing, &partial);
    assert_eq!((plan.blobs[0].offset, plan.blobs[0].len), (0, 4));
}
