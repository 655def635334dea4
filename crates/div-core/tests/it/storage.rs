//! `div storage`: a put is committed at the volume's root (`""`) and writes each file as `cp`
//! would: new ones added, changed ones replaced, never a folder.

use div_api::ControlPlane;
use div_core::{Event, Listing, PutOptions, RunError, VolumePath};
use div_test_support::FakeControlPlane;

use crate::read;

fn put(volume: &str, local: &std::path::Path, to: Option<&str>) -> PutOptions {
    PutOptions {
        volume: volume.into(),
        local: local.to_path_buf(),
        to: to.map(String::from),
    }
}

fn at(typed: &str) -> VolumePath {
    typed.parse().expect("a volume path")
}

/// A folder `data` holding `a.csv` and `sub/b.csv`.
fn data() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("sub")).expect("mkdir");
    std::fs::write(data.join("a.csv"), "1,2\n").expect("write");
    std::fs::write(data.join("sub/b.csv"), "3,4\n").expect("write");
    tmp
}

#[tokio::test]
async fn a_put_lands_at_the_root_and_reads_back() {
    let tmp = data();
    let cp = FakeControlPlane::new();
    let summary = div_core::storage_put(
        &cp,
        &put("mask-data", &tmp.path().join("data"), None),
        &mut |_: Event| {},
    )
    .await
    .expect("put");
    assert!(summary.created_volume);
    assert_eq!((summary.files, summary.bytes), (2, 8));
    let Listing::Entries { entries, .. } = div_core::storage_ls(&cp, Some(&at("mask-data")), true)
        .await
        .expect("ls")
    else {
        panic!("entries");
    };
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["a.csv", "sub/b.csv"], "at the root, not under `/`");
    let out = tempfile::tempdir().expect("a temp dir");
    let got = div_core::storage_get(&cp, &at("mask-data/sub"), &out.path().join("back"))
        .await
        .expect("get");
    assert_eq!(got.files, 1);
    assert_eq!(read(&out.path().join("back/b.csv")), "3,4\n");
}

#[tokio::test]
async fn a_second_put_adds_beside_the_first_and_the_same_one_again_is_fine() {
    let tmp = data();
    let cp = FakeControlPlane::new();
    let data = tmp.path().join("data");
    div_core::storage_put(&cp, &put("d", &data, None), &mut |_: Event| {})
        .await
        .expect("put");
    div_core::storage_put(&cp, &put("d", &data, None), &mut |_: Event| {})
        .await
        .expect("the same put again changes nothing and is not refused");
    div_core::storage_put(
        &cp,
        &put("d", &data.join("a.csv"), Some("copies")),
        &mut |_: Event| {},
    )
    .await
    .expect("a file put beside");
    let paths: Vec<String> = cp
        .list_tree("d", "")
        .await
        .expect("ls")
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(paths, ["a.csv", "copies/a.csv", "sub/b.csv"]);
}

/// Putting a folder again after a file in it changed replaces that file, as `cp` would, and
/// adds the new one; a file where the volume holds a folder is refused whole, naming it.
#[tokio::test]
async fn a_put_replaces_files_as_cp_does_and_never_a_folder() {
    let tmp = data();
    let cp = FakeControlPlane::new();
    let data = tmp.path().join("data");
    div_core::storage_put(&cp, &put("d", &data, None), &mut |_: Event| {})
        .await
        .expect("put");
    std::fs::write(data.join("a.csv"), "changed\n").expect("write");
    std::fs::write(data.join("new.csv"), "new\n").expect("write");
    div_core::storage_put(&cp, &put("d", &data, None), &mut |_: Event| {})
        .await
        .expect("put again");
    let paths: Vec<String> = cp
        .list_tree("d", "")
        .await
        .expect("ls")
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(paths, ["a.csv", "new.csv", "sub/b.csv"]);
    let out = tempfile::tempdir().expect("a temp dir");
    div_core::storage_get(&cp, &at("d/a.csv"), out.path())
        .await
        .expect("get");
    assert_eq!(read(&out.path().join("a.csv")), "changed\n");

    // `sub` is a folder in the volume: a file of that name is refused, and nothing is written.
    let other = tempfile::tempdir().expect("a temp dir");
    std::fs::write(other.path().join("sub"), "a file\n").expect("write");
    std::fs::write(other.path().join("z.csv"), "z\n").expect("write");
    let err = div_core::storage_put(&cp, &put("d", other.path(), None), &mut |_: Event| {})
        .await
        .expect_err("refused");
    let RunError::PutConflict { volume, path, .. } = &err else {
        panic!("a conflict: {err:?}");
    };
    assert_eq!((volume.as_str(), path.as_str()), ("d", "sub"));
    assert_eq!(
        err.to_string(),
        "`sub` in volume `d` is a folder, where the put has a file; a put replaces files, never a folder"
    );
    let paths: Vec<String> = cp
        .list_tree("d", "")
        .await
        .expect("ls")
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(paths, ["a.csv", "new.csv", "sub/b.csv"]);
}

#[tokio::test]
async fn a_volume_is_removed_and_then_is_not_found() {
    let tmp = data();
    let cp = FakeControlPlane::new();
    div_core::storage_put(
        &cp,
        &put("d", &tmp.path().join("data"), None),
        &mut |_: Event| {},
    )
    .await
    .expect("put");
    div_core::storage_rm(&cp, "d").await.expect("removed");
    let err = div_core::storage_rm(&cp, "d").await.expect_err("gone");
    assert!(
        matches!(err, RunError::VolumeNotFound(ref v) if v == "d"),
        "{err:?}"
    );
    let Listing::Volumes(volumes) = div_core::storage_ls(&cp, None, false).await.expect("ls")
    else {
        panic!("volumes");
    };
    assert!(volumes.is_empty());
}
