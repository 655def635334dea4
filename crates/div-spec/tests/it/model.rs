//! Model references and a model tree's digest.

use div_spec::{DigestMode, ModelDigest, ModelPin, ModelRef, sha256_hex};

fn parse(text: &str) -> Result<ModelRef, String> {
    text.parse::<ModelRef>().map_err(|e| e.to_string())
}

#[test]
fn a_reference_names_the_latest_a_version_or_a_digest() {
    let r = parse("mask-rcnn").expect("a name");
    assert_eq!((r.name(), r.pin()), ("mask-rcnn", &ModelPin::Latest));
    let r = parse("mask-rcnn:v3").expect("a version");
    assert_eq!(r.pin(), &ModelPin::Version(3));
    let hex = "a".repeat(64);
    let r = parse(&format!("mask-rcnn@sha256:{hex}")).expect("a digest");
    assert_eq!(r.pin(), &ModelPin::Digest(hex.clone()));
    for typed in [
        "mask-rcnn",
        "mask-rcnn:v3",
        &format!("mask-rcnn@sha256:{hex}"),
    ] {
        assert_eq!(parse(typed).expect("parses").to_string(), typed);
    }
}

#[test]
fn a_reference_that_is_not_one_says_what_is_wrong_and_how_to_write_one() {
    let cases = [
        ("Mask", "the name is not one a model can have"),
        ("", "the name is not one a model can have"),
        ("m:3", "a version is written `v` and its number"),
        ("m:v0", "a version's number is 1 or more"),
        ("m:v01", "a version's number is 1 or more"),
        ("m:v", "a version's number is 1 or more"),
        ("m:v99999999999", "a version's number is 1 or more"),
        ("m@abc", "a digest starts with `sha256:`"),
        ("m@sha256:ABC", "a sha256 digest is 64 lowercase hex digits"),
        ("m@sha256:", "a sha256 digest is 64 lowercase hex digits"),
        ("../m", "the name is not one a model can have"),
    ];
    for (typed, why) in cases {
        let e = parse(typed).expect_err(typed);
        assert!(e.contains(why), "{typed}: {e}");
        assert!(
            e.ends_with("starting with a letter or digit"),
            "{typed}: {e}"
        );
    }
}

#[test]
fn the_digest_is_the_sha256_of_its_sorted_lines_as_the_docs_compute_it() {
    let mut d = ModelDigest::new();
    // Added out of order: sorted by path's bytes.
    d.add(b"weights/model.bin", DigestMode::File, &sha256_hex(b"w"));
    d.add(
        b"run.sh",
        DigestMode::Executable,
        &sha256_hex(b"#!/bin/sh\n"),
    );
    d.add(
        b"latest",
        DigestMode::Symlink,
        &sha256_hex(b"weights/model.bin"),
    );
    let text = format!(
        "120000 {} latest\n100755 {} run.sh\n100644 {} weights/model.bin\n",
        sha256_hex(b"weights/model.bin"),
        sha256_hex(b"#!/bin/sh\n"),
        sha256_hex(b"w")
    );
    assert_eq!(
        d.finish(),
        format!("sha256:{}", sha256_hex(text.as_bytes()))
    );
    // Known value: the SHA-256 of nothing, for an empty tree.
    assert_eq!(
        ModelDigest::new().finish(),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

/// A tree for the properties: each entry's path, mode and content.
fn tree() -> impl proptest::strategy::Strategy<Value = Vec<(String, u8, Vec<u8>)>> {
    use proptest::prelude::*;
    proptest::collection::btree_map(
        "[a-z]{1,6}(/[a-z]{1,6}){0,2}",
        (0u8..3, proptest::collection::vec(any::<u8>(), 0..40)),
        1..8,
    )
    .prop_map(|m| m.into_iter().map(|(p, (mode, c))| (p, mode, c)).collect())
}

fn mode(m: u8) -> DigestMode {
    match m {
        0 => DigestMode::File,
        1 => DigestMode::Executable,
        _ => DigestMode::Symlink,
    }
}

fn digest(entries: &[(String, u8, Vec<u8>)]) -> String {
    let mut d = ModelDigest::new();
    for (path, m, content) in entries {
        d.add(path.as_bytes(), mode(*m), &sha256_hex(content));
    }
    d.finish()
}

proptest::proptest! {
    /// The same tree, in any order, has the same digest; and a change of any path, any mode
    /// or any byte gives another.
    #[test]
    fn proptest_a_model_digest_is_the_tree_s_and_nothing_else(
        entries in tree(),
        which in 0usize..8,
        what in 0u8..3,
        byte in proptest::prelude::any::<u8>(),
    ) {
        let d = digest(&entries);
        let mut shuffled = entries.clone();
        shuffled.reverse();
        proptest::prop_assert_eq!(&digest(&shuffled), &d);
        let i = which % entries.len();
        let mut changed = entries.clone();
        match what {
            // Another path (one no other entry has).
            0 => changed[i].0.push_str("/z"),
            // Another mode.
            1 => changed[i].1 = (changed[i].1 + 1) % 3,
            // Another byte: appended, or one flipped.
            _ => match changed[i].2.first_mut() {
                Some(first) if byte != 0 => *first ^= byte,
                _ => changed[i].2.push(byte),
            },
        }
        proptest::prop_assert_ne!(digest(&changed), d);
    }

    /// Whatever a reference parses to prints back as text that parses to it again.
    #[test]
    fn proptest_a_model_reference_round_trips(text in "[a-z0-9._:@v-]{0,20}|[a-z]{1,5}@sha256:[0-9a-f]{64}") {
        if let Ok(r) = text.parse::<ModelRef>() {
            proptest::prop_assert_eq!(r.to_string().parse::<ModelRef>().ok(), Some(r));
        }
    }
}
