//! What callers show: counts, sizes, the summary line, the biggest things, reading shipped files.

use div_ship::{LARGE_SHIPMENT_BYTES, ShipOptions, human_bytes};

use crate::support::write;

fn check(bytes: u64, expect: &str) {
    assert_eq!(human_bytes(bytes), expect, "{bytes}");
}

#[test]
fn bytes_are_decimal_with_one_decimal() {
    check(0, "0 B");
    check(999, "999 B");
    check(1000, "1.0 KB");
    check(1049, "1.0 KB");
    check(1050, "1.1 KB");
    check(38_200, "38.2 KB");
    check(999_949, "999.9 KB");
    check(999_950, "1.0 MB");
    check(6_000_000_000, "6.0 GB");
    check(u64::MAX, "18.4 EB");
}

#[test]
fn the_summary_line_and_the_biggest_things() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "train.py", &"x".repeat(200));
    write(tmp.path(), "data/a.bin", &"y".repeat(3000));
    write(tmp.path(), "data/b.bin", &"z".repeat(1000));
    write(tmp.path(), "models/m.py", &"w".repeat(2500));
    write(tmp.path(), "telemetry.toml", "[chart]\n");
    let shipment = div_ship::collect(tmp.path(), &ShipOptions::default()).unwrap();
    let line = shipment.summary_line("very-cool-classifier-code");
    let id = shipment.manifest.short_id();
    assert_eq!(id.len(), 8);
    assert_eq!(
        line.replace(&id, "ID"),
        "5 files, 6.7 KB → very-cool-classifier-code/code/ID"
    );
    assert_eq!(
        shipment.largest_files(2),
        [
            ("data/a.bin".to_owned(), 3000),
            ("models/m.py".to_owned(), 2500)
        ]
    );
    assert_eq!(
        shipment.biggest_folders(5),
        [("data/".to_owned(), 4000), ("models/".to_owned(), 2500)]
    );
    assert!(
        shipment.contains("train.py")
            && shipment.contains("./train.py")
            && !shipment.contains("nope.py")
    );
    assert_eq!(shipment.read("telemetry.toml").unwrap(), b"[chart]\n");
    assert_eq!(
        shipment.read("nope").unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    assert!(shipment.large(LARGE_SHIPMENT_BYTES).is_none());
    let large = shipment.large(5000).unwrap();
    insta::assert_snapshot!(format!("{}\nhint: {}", large.message(), large.hint()), @r"
    this ships 6.7 KB, 4.0 KB of it in `data/`
    hint: `git init` and a `.gitignore` that names `data/` leave it out, or send it once with `div storage put` and read it from `/mnt/<volume>`
    ");
}

#[test]
fn identical_code_has_the_same_id_wherever_it_is() {
    let make = || {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "a.py", "print(1)\n");
        write(tmp.path(), "b/c.py", "");
        tmp
    };
    let (one, two) = (make(), make());
    let id = |d: &tempfile::TempDir| {
        div_ship::collect(d.path(), &ShipOptions::default())
            .unwrap()
            .manifest
            .id()
    };
    assert_eq!(id(&one), id(&two));
    assert_eq!(id(&one).len(), 64);
    write(two.path(), "a.py", "print(2)\n");
    assert_ne!(id(&one), id(&two));
}

#[test]
fn the_manifest_is_sorted_bytewise_with_modes_and_json_like_the_api() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    for path in ["b", "a/z", "a.b", "a-b", "Z", "é"] {
        write(tmp.path(), path, "");
    }
    std::fs::set_permissions(tmp.path().join("b"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shipment = div_ship::collect(tmp.path(), &ShipOptions::default()).unwrap();
    let paths: Vec<&str> = shipment
        .manifest
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(paths, ["Z", "a-b", "a.b", "a/z", "b", "é"]);
    let b = shipment.manifest.get("b").unwrap();
    assert!(b.executable && !shipment.manifest.get("Z").unwrap().executable);
    let json = serde_json::to_string(b).unwrap();
    assert_eq!(
        json,
        format!(
            r#"{{"path":"b","kind":"file","executable":true,"size":0,"hash":"{}"}}"#,
            blake3::hash(b"").to_hex()
        )
    );
}

proptest::proptest! {
    /// The biggest files, found in one pass, are what sorting every file by size (ties by
    /// path) and keeping the first `n` gives; links never count.
    #[test]
    fn the_largest_files_are_those_a_full_sort_keeps(
        entries in proptest::collection::btree_map("[a-c]{1,3}(/[a-c]{1,2})?", (0u64..6, proptest::bool::ANY), 0..40),
        n in 0usize..7,
    ) {
        use div_ship::{EntryKind, Manifest, TreeEntry, Shipment};
        let manifest = Manifest {
            entries: entries
                .iter()
                .map(|(path, (size, link))| TreeEntry {
                    path: path.clone(),
                    kind: if *link { EntryKind::Symlink } else { EntryKind::File },
                    executable: false,
                    size: *size,
                    hash: None,
                    target: None,
                })
                .collect(),
        };
        let mut expected: Vec<(String, u64)> = manifest
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| (e.path.clone(), e.size))
            .collect();
        expected.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        expected.truncate(n);
        let shipment = Shipment {
            root: std::path::PathBuf::from("/"),
            source: div_ship::Source::Walk,
            manifest,
            warnings: Vec::new(),
            stats: Default::default(),
            kept: Default::default(),
        };
        proptest::prop_assert_eq!(shipment.largest_files(n), expected);
    }
}
