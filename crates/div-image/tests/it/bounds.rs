//! What unpacking may take, and the config's diff_ids: attacks performed through `Unpacker`
//! and, end to end, through `ImageStore::ensure` from the loopback registry.
//!
//! The bombs are gzip members concatenated (one member of 1 MiB of zeros, repeated), which
//! is one valid gzip stream to any reader of multi-member gzip, as layers are read: a
//! gigabyte of zeros costs a megabyte and no time to make.

use std::io::Read as _;
use std::path::Path;

use div_image::{
    Credentials, Digest, EnsureError, ImageRef, ImageStore, Limit, NoProgress, Platform,
    PullPolicy, StoreOptions, UnpackError, UnpackLimits, Unpacker,
};
use sha2::Digest as _;

use crate::support::{Built, E, OCI_MANIFEST, Registry, fast_options, file, gzip, push, tar};

const MIB: u64 = 1 << 20;
const GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const PLAIN: &str = "application/vnd.oci.image.layer.v1.tar";

/// A gzip layer whose tar holds one file, `zeros`, of `mib` MiB of zero bytes, and the
/// layer's uncompressed tar stream's sha256 (its diff_id) when `diff_id` is set (hashing is
/// slow in a debug build: only what a test needs).
fn zero_bomb(mib: u64, diff_id: bool) -> (Vec<u8>, Option<Digest>) {
    let mut h = tar::Header::new_gnu();
    h.set_path("zeros").expect("a short name");
    h.set_size(mib * MIB);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h.set_cksum();
    let mib_of_zeros = vec![0u8; MIB as usize];
    let member = {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut enc, &mib_of_zeros).expect("gzip");
        enc.finish().expect("gzip")
    };
    // The header, the zeros (a whole number of 512-byte blocks), the two end blocks.
    let mut out = gzip(h.as_bytes());
    for _ in 0..mib {
        out.extend_from_slice(&member);
    }
    out.extend_from_slice(&gzip(&[0u8; 1024]));
    let digest = diff_id.then(|| {
        let mut s = sha2::Sha256::new();
        s.update(h.as_bytes());
        for _ in 0..mib {
            s.update(&mib_of_zeros);
        }
        s.update([0u8; 1024]);
        hex_digest(&s.finalize())
    });
    (out, digest)
}

fn hex_digest(bytes: &[u8]) -> Digest {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}").parse().expect("a digest")
}

/// A GNU sparse entry `sparse` of `real` bytes, holes but for its last 512 (written `x`): its
/// tar stream is 2 KiB, what it unpacks to is `real` bytes.
fn sparse_tar(real: u64) -> Vec<u8> {
    fn octal(field: &mut [u8; 12], n: u64) {
        let text = format!("{n:011o}\0");
        field.copy_from_slice(text.as_bytes());
    }
    let mut h = tar::Header::new_gnu();
    h.set_path("sparse").expect("a short name");
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_size(512);
    h.set_mode(0o644);
    let gnu = h.as_gnu_mut().expect("a GNU header");
    octal(&mut gnu.sparse[0].offset, real - 512);
    octal(&mut gnu.sparse[0].numbytes, 512);
    gnu.set_real_size(real);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(&[b'x'; 512]);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// An image of `layers` (blob, media type, diff_id the config names), as the registry will
/// hold it.
fn image_of(layers: &[(Vec<u8>, &str, Digest)]) -> Built {
    let descs: Vec<serde_json::Value> = layers
        .iter()
        .map(|(data, media_type, _)| {
            serde_json::json!({
                "mediaType": media_type,
                "digest": Digest::sha256_of(data).to_string(),
                "size": data.len(),
            })
        })
        .collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids":
            layers.iter().map(|(_, _, d)| d.to_string()).collect::<Vec<_>>()},
    }))
    .expect("json");
    let cd = Digest::sha256_of(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": cd.to_string(), "size": config.len()},
        "layers": descs,
    }))
    .expect("json");
    Built {
        manifest_digest: Digest::sha256_of(&manifest),
        blobs: layers
            .iter()
            .map(|(data, _, _)| (Digest::sha256_of(data), data.clone()))
            .collect(),
        config: (cd, config),
        manifest,
        layers: layers
            .iter()
            .map(|(data, _, _)| Digest::sha256_of(data))
            .collect(),
    }
}

/// A small honest gzip layer, its diff_id.
fn small_layer(name: &'static str) -> (Vec<u8>, &'static str, Digest) {
    let raw = tar(&[E::Dir("etc", 0o755), file(name, "an honest layer")]);
    let diff_id = Digest::sha256_of(&raw);
    (gzip(&raw), GZIP, diff_id)
}

fn store(dir: &Path, unpack: UnpackLimits) -> ImageStore {
    ImageStore::open_with(
        dir,
        StoreOptions {
            registry: fast_options(),
            pull_policy: PullPolicy::Always,
            unpack,
        },
    )
    .expect("open the store")
}

/// Bytes free on the filesystem under `p`, as unpacking counts them.
fn available(p: &Path) -> u64 {
    let st = rustix::fs::statvfs(p).expect("statvfs");
    st.f_bavail * st.f_frsize
}

/// Names in a folder of the cache.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("a folder")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

/// Nothing of an image is kept as unpacked: no tree, no record, nothing under way in `tmp/`.
fn assert_nothing_unpacked(store: &ImageStore) {
    assert_eq!(names(&store.root().join("tmp")), Vec::<String>::new());
    assert_eq!(
        names(&store.root().join("images/sha256")),
        Vec::<String>::new()
    );
    assert!(store.list().expect("list").is_empty());
    // Nor a layer: even a layer that was whole joins the layer store only with its image.
    assert_eq!(
        names(&store.root().join("layers/sha256")),
        Vec::<String>::new()
    );
}

fn limits(max_bytes: u64) -> UnpackLimits {
    UnpackLimits {
        max_bytes,
        ..UnpackLimits::default()
    }
}

#[test]
fn a_decompression_bomb_stops_at_the_byte_limit() {
    // 1 GiB of zeros in about 1 MiB of gzip.
    let (bomb, _) = zero_bomb(1024, false);
    assert!(bomb.len() < 2 * MIB as usize, "{} bytes", bomb.len());
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::with_limits(dir.path(), limits(16 * MIB));
    let err = u
        .apply(flate2::read::MultiGzDecoder::new(&bomb[..]))
        .unwrap_err();
    assert!(
        matches!(err, UnpackError::Limit(Limit::Size { max }) if max == 16 * MIB),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the layer unpacks past the limit of 16 MiB on an image's unpacked size"
    );
    // Written up to the limit, never past it.
    let written = std::fs::metadata(dir.path().join("zeros")).unwrap().len();
    assert!(written <= 16 * MIB, "{written}");
}

#[test]
fn a_sparse_entry_counts_what_it_writes_not_what_it_carries() {
    let layer = sparse_tar(1 << 30);
    assert_eq!(layer.len(), 2048);
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::with_limits(dir.path(), limits(8 * MIB));
    let err = u.apply(&layer[..]).unwrap_err();
    assert!(
        matches!(err, UnpackError::Limit(Limit::Size { .. })),
        "{err:?}"
    );
    let written = std::fs::metadata(dir.path().join("sparse")).unwrap().len();
    assert!(written <= 8 * MIB, "{written}");

    // Within the limit it unpacks whole, holes as zeros.
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::with_limits(dir.path(), limits(8 * MIB));
    u.apply(&sparse_tar(MIB)[..]).unwrap();
    let data = std::fs::read(dir.path().join("sparse")).unwrap();
    assert_eq!(data.len() as u64, MIB);
    assert!(data[..(MIB - 512) as usize].iter().all(|b| *b == 0));
    assert!(data[(MIB - 512) as usize..].iter().all(|b| *b == b'x'));
}

#[test]
fn the_byte_limit_counts_every_layer_of_an_image_together() {
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::with_limits(dir.path(), limits(3 * MIB));
    let mib = |name: &'static str| tar(&[E::File(name, 0o644, vec![7u8; MIB as usize])]);
    u.apply(&mib("a")[..]).unwrap();
    u.apply(&mib("b")[..]).unwrap();
    // The third file's contents fit (3 MiB), but its layer's stream, headers and all, does
    // not: every decompressed byte is counted too.
    let err = u.apply(&mib("c")[..]).unwrap_err();
    assert!(
        matches!(err, UnpackError::Limit(Limit::Size { .. })),
        "{err:?}"
    );
    let c = std::fs::metadata(dir.path().join("c")).map_or(0, |m| m.len());
    assert!(c < MIB, "{c}");
}

#[test]
fn a_layer_of_too_many_entries_stops_at_the_entry_limit() {
    let names: Vec<&'static str> = (0..101)
        .map(|i| &*Box::leak(format!("f{i}").into_boxed_str()))
        .collect();
    let entries: Vec<E> = names
        .iter()
        .map(|n| E::File(n, 0o644, Vec::new()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::with_limits(
        dir.path(),
        UnpackLimits {
            max_entries: 100,
            ..UnpackLimits::default()
        },
    );
    let err = u.apply(&tar(&entries)[..]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the layer unpacks past the limit of 100 entries (files, folders, links) in an image"
    );
    // The 101st entry was never made.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 100);
}

#[test]
fn unpacking_leaves_the_margin_of_free_space() {
    let dir = tempfile::tempdir().unwrap();
    // Keep all but 8 MiB of what is free: the bomb may take 8 MiB at most.
    let keep_free = available(dir.path()) - 8 * MIB;
    let mut u = Unpacker::with_limits(
        dir.path(),
        UnpackLimits {
            keep_free: Some(keep_free),
            ..UnpackLimits::default()
        },
    );
    let (bomb, _) = zero_bomb(1024, false);
    let err = u
        .apply(flate2::read::MultiGzDecoder::new(&bomb[..]))
        .unwrap_err();
    let UnpackError::Limit(Limit::FreeSpace {
        available,
        keep_free: k,
    }) = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(k, keep_free);
    let text = err.to_string();
    assert!(
        text.starts_with("the layer unpacks past the free space of the image cache's filesystem (")
            && text.ends_with(" kept free for everything else there"),
        "{text}"
    );
    // What it may take is what was free as it began, less the margin: 8 MiB, or more where
    // other tests freed space on the same disk meanwhile. Or less, where others took space
    // meanwhile (the fault suite fills disks beside this suite): then it stopped at a look at
    // the disk on the way, and what it saw free there (`available`) left less than one more
    // piece (the unpacker's 64 KiB buffer) above the margin.
    let written = std::fs::metadata(dir.path().join("zeros")).map_or(0, |m| m.len());
    let piece = 64 * 1024;
    assert!(
        written <= available.saturating_sub(keep_free) || available < keep_free + piece,
        "wrote {written} bytes, saw {available} free, kept {keep_free} free"
    );
    assert!(
        available.saturating_sub(keep_free) < 64 * MIB,
        "{available}"
    );
}

#[test]
fn the_margin_kept_free_is_1_gib_or_5_percent_of_a_small_filesystem() {
    assert_eq!(UnpackLimits::keep_free_of(1 << 40), 1 << 30);
    assert_eq!(UnpackLimits::keep_free_of(20 << 30), 1 << 30);
    assert_eq!(UnpackLimits::keep_free_of(256 * MIB), 256 * MIB / 20);
    let d = UnpackLimits::default();
    assert_eq!(
        (d.max_bytes, d.max_entries, d.keep_free),
        (64 << 30, 1_000_000, None)
    );
}

#[test]
fn a_layer_s_diff_id_is_the_digest_of_its_whole_stream() {
    let mut raw = tar(&[file("a", "1")]);
    // Bytes after the archive's end are part of the stream the diff_id names.
    raw.extend_from_slice(&[0u8; 4096]);
    let dir = tempfile::tempdir().unwrap();
    let mut u = Unpacker::new(dir.path());
    let gz = gzip(&raw);
    let (stats, diff_id) = u
        .apply_hashed(
            flate2::read::MultiGzDecoder::new(&gz[..]),
            div_image::Algorithm::Sha256,
        )
        .unwrap();
    assert_eq!(stats.entries, 1);
    assert_eq!(diff_id, Digest::sha256_of(&raw));
    let mut read_back = String::new();
    std::fs::File::open(dir.path().join("a"))
        .unwrap()
        .read_to_string(&mut read_back)
        .unwrap();
    assert_eq!(read_back, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decompression_bomb_layer_is_refused_and_nothing_is_kept() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    // 64 MiB of zeros in 64 KiB of gzip, with its true diff_id: a well-made image, refused
    // for its size alone.
    let (bomb, diff_id) = zero_bomb(64, true);
    assert!(bomb.len() < 128 << 10, "{} bytes", bomb.len());
    let bomb_digest = Digest::sha256_of(&bomb);
    let image = image_of(&[small_layer("etc/one"), (bomb, GZIP, diff_id.unwrap())]);
    push(&reg.addr, "attacks/bomb", "1", &image, &Credentials::none()).await;
    let good = image_of(&[small_layer("etc/good")]);
    push(&reg.addr, "attacks/good", "1", &good, &Credentials::none()).await;

    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path(), limits(16 * MIB));
    let r: ImageRef = format!("{}/attacks/bomb:1", reg.addr).parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnsureError::TooLarge {
                index: 2,
                layers: 2,
                limit: Limit::Size { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "layer 2 of 2 (`{bomb_digest}`) of `{r}` unpacks past the limit of 16 MiB on an image's unpacked size: refused, nothing of the image kept"
        )
    );
    assert_nothing_unpacked(&store);

    // The same store pulls a good image after.
    let ok: ImageRef = format!("{}/attacks/good:1", reg.addr).parse().unwrap();
    let got = store
        .ensure(&ok, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(got.rootfs.join("etc/good")).unwrap(),
        "an honest layer"
    );
    assert_eq!(names(&store.root().join("tmp")), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_never_takes_the_margin_of_free_space() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let (bomb, _) = zero_bomb(1024, false);
    let image = image_of(&[(bomb, GZIP, Digest::sha256_of(b"not checked: refused first"))]);
    push(
        &reg.addr,
        "attacks/bomb",
        "big",
        &image,
        &Credentials::none(),
    )
    .await;

    let cache = tempfile::tempdir().unwrap();
    // Keep all but 16 MiB of what is free (the 1 MiB blob is downloaded first).
    let keep_free = available(cache.path()) - 16 * MIB;
    let store = store(
        cache.path(),
        UnpackLimits {
            keep_free: Some(keep_free),
            ..UnpackLimits::default()
        },
    );
    let r: ImageRef = format!("{}/attacks/bomb:big", reg.addr).parse().unwrap();
    let err = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap_err();
    let EnsureError::TooLarge {
        index: 1,
        limit: Limit::FreeSpace { keep_free: k, .. },
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(*k, keep_free);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "layer 1 of 1 (`{}`) of `{r}` unpacks past the free space of the image cache's filesystem (",
            image.layers[0]
        )) && text.ends_with("kept free for everything else there: refused, nothing of the image kept"),
        "{text}"
    );
    assert_nothing_unpacked(&store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_whose_diff_id_is_wrong_is_refused_and_nothing_is_kept() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let (one, _, one_id) = small_layer("etc/one");
    let (two, _, two_id) = small_layer("etc/two");
    let plain = tar(&[file("plain", "uncompressed")]);
    let plain_id = Digest::sha256_of(&plain);
    let cases = [
        // The blobs are right; the config's diff_ids are swapped: they match none of the
        // layers they name.
        (
            "swapped",
            image_of(&[
                (one.clone(), GZIP, two_id.clone()),
                (two.clone(), GZIP, one_id.clone()),
            ]),
            1,
            Digest::sha256_of(&one),
            two_id.clone(),
            one_id.clone(),
        ),
        // The second layer's diff_id is wrong.
        (
            "second",
            image_of(&[
                (one.clone(), GZIP, one_id.clone()),
                (two.clone(), GZIP, Digest::sha256_of(b"another stream")),
            ]),
            2,
            Digest::sha256_of(&two),
            Digest::sha256_of(b"another stream"),
            two_id.clone(),
        ),
        // An uncompressed layer: its diff_id is its blob's digest, or it is refused.
        (
            "plain",
            image_of(&[(plain.clone(), PLAIN, one_id.clone())]),
            1,
            plain_id.clone(),
            one_id.clone(),
            plain_id.clone(),
        ),
    ];
    let cache = tempfile::tempdir().unwrap();
    let store = store(cache.path(), UnpackLimits::default());
    for (tag, image, index, layer, expected, found) in cases {
        push(&reg.addr, "attacks/diff", tag, &image, &Credentials::none()).await;
        let r: ImageRef = format!("{}/attacks/diff:{tag}", reg.addr).parse().unwrap();
        let err = store
            .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
            .await
            .unwrap_err();
        let layers = image.layers.len();
        assert_eq!(
            err.to_string(),
            format!(
                "layer {index} of {layers} (`{layer}`) of `{r}` unpacks to `{found}`, but the image's config says its diff_id is `{expected}`: refused, nothing of the image kept"
            ),
            "{tag}"
        );
        assert!(matches!(err, EnsureError::DiffIdMismatch { .. }), "{err:?}");
        assert_nothing_unpacked(&store);
    }

    // The same blobs with their true diff_ids pull and unpack.
    let honest = image_of(&[
        (one, GZIP, one_id),
        (two, GZIP, two_id),
        (plain, PLAIN, plain_id),
    ]);
    push(
        &reg.addr,
        "attacks/diff",
        "honest",
        &honest,
        &Credentials::none(),
    )
    .await;
    let r: ImageRef = format!("{}/attacks/diff:honest", reg.addr).parse().unwrap();
    let got = store
        .ensure(&r, &amd64(), &Credentials::none(), &NoProgress)
        .await
        .unwrap();
    for name in ["etc/one", "etc/two", "plain"] {
        assert!(got.rootfs.join(name).is_file(), "{name}");
    }
}

fn amd64() -> Platform {
    "linux/amd64".parse().expect("a platform")
}
