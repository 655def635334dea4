//! Volumes, blobs and trees: made once, uploads resumed and checked, trees committed and
//! read back as `cp` would write them, bad paths refused.

use bytes::Bytes;
use div_api::{BlobSource, CommitTree, ControlPlane, EntryKind, ErrorKind, TreeEntry, VolumeEntry};

use super::check::{CheckResult, api, ensure, expect_error, file_entry, hash, upload_whole};
use super::context::{ConformanceContext, key};

pub(crate) async fn volumes_create_idempotent(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let name = format!("{}-vol", ctx.prefix);
    let first = cp
        .create_volume(&name)
        .await
        .map_err(api("create_volume"))?;
    let second = cp
        .create_volume(&name)
        .await
        .map_err(api("create_volume again"))?;
    ensure!(
        first.name == name,
        "created `{}`, asked `{name}`",
        first.name
    );
    ensure!(
        first.created_at == second.created_at,
        "a second create made a new volume ({} then {})",
        first.created_at,
        second.created_at
    );
    let listed = cp.list_volumes().await.map_err(api("list_volumes"))?;
    let count = listed.iter().filter(|v| v.name == name).count();
    ensure!(count == 1, "`{name}` listed {count} times");
    cp.delete_volume(&name)
        .await
        .map_err(api("delete_volume"))?;
    let listed = cp.list_volumes().await.map_err(api("list_volumes"))?;
    ensure!(
        !listed.iter().any(|v| v.name == name),
        "`{name}` listed after delete"
    );
    expect_error(
        "delete a deleted volume",
        cp.delete_volume(&name).await,
        ErrorKind::NotFound,
        Some("not_found"),
    )?;
    Ok(())
}

pub(crate) async fn blob_missing_upload_not_missing(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-blobs", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let data = Bytes::from(key(ctx, "blob").into_bytes());
    let h = hash(&data);
    let missing = cp
        .missing_blobs(&volume, std::slice::from_ref(&h))
        .await
        .map_err(api("missing_blobs"))?;
    ensure!(
        missing.missing == vec![h.clone()],
        "a new blob is not missing: {missing:?}"
    );
    cp.upload_blob(
        &volume,
        &h,
        0,
        data.len() as u64,
        BlobSource::Bytes(data.clone()),
    )
    .await
    .map_err(api("upload_blob"))?;
    let missing = cp
        .missing_blobs(&volume, std::slice::from_ref(&h))
        .await
        .map_err(api("missing_blobs"))?;
    ensure!(
        missing.missing.is_empty(),
        "an uploaded blob is still missing: {missing:?}"
    );
    Ok(())
}

pub(crate) async fn partial_upload_resume(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-partial", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let data = Bytes::from(format!("{}{}", key(ctx, "partial"), "x".repeat(200)).into_bytes());
    let total = data.len() as u64;
    let half = total / 2;
    let h = hash(&data);
    cp.upload_blob(
        &volume,
        &h,
        0,
        total,
        BlobSource::Bytes(data.slice(..half as usize)),
    )
    .await
    .map_err(api("upload the first half"))?;
    let missing = cp
        .missing_blobs(&volume, std::slice::from_ref(&h))
        .await
        .map_err(api("missing_blobs"))?;
    ensure!(
        missing.missing == vec![h.clone()],
        "a half-sent blob is not missing: {missing:?}"
    );
    ensure!(
        missing.partial.get(&h) == Some(&half),
        "the partial size is {:?}, not {half}",
        missing.partial.get(&h)
    );
    let wrong = cp
        .upload_blob(
            &volume,
            &h,
            half + 1,
            total,
            BlobSource::Bytes(data.slice(half as usize + 1..)),
        )
        .await;
    let e = expect_error(
        "upload past the partial",
        wrong,
        ErrorKind::Conflict,
        Some("offset_mismatch"),
    )?;
    ensure!(
        e.details().get("received").and_then(|v| v.as_u64()) == Some(half),
        "offset_mismatch details {} do not say `received: {half}`",
        e.details()
    );
    cp.upload_blob(
        &volume,
        &h,
        half,
        total,
        BlobSource::Bytes(data.slice(half as usize..)),
    )
    .await
    .map_err(api("upload the rest"))?;
    let missing = cp
        .missing_blobs(&volume, std::slice::from_ref(&h))
        .await
        .map_err(api("missing_blobs"))?;
    ensure!(
        missing.missing.is_empty(),
        "a resumed blob is still missing: {missing:?}"
    );
    Ok(())
}

pub(crate) async fn hash_mismatch_refused(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-mismatch", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let data = Bytes::from(key(ctx, "mismatch").into_bytes());
    let claimed = hash(b"something else entirely");
    let result = cp
        .upload_blob(
            &volume,
            &claimed,
            0,
            data.len() as u64,
            BlobSource::Bytes(data),
        )
        .await;
    expect_error(
        "upload under the wrong hash",
        result,
        ErrorKind::Refused,
        Some("hash_mismatch"),
    )?;
    let missing = cp
        .missing_blobs(&volume, std::slice::from_ref(&claimed))
        .await
        .map_err(api("missing_blobs"))?;
    ensure!(
        missing.missing == vec![claimed.clone()],
        "a refused blob is not missing"
    );
    ensure!(
        missing.partial.is_empty(),
        "a refused blob kept a partial: {missing:?}"
    );
    Ok(())
}

pub(crate) async fn commit_tree_read_back(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-code", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let main = Bytes::from(format!("print('hello')  # {}\n", key(ctx, "main")).into_bytes());
    let script = Bytes::from_static(b"#!/bin/sh\necho run\n");
    upload_whole(cp, &volume, &[&main, &script]).await?;
    let tree_path = format!("code/{}", &hash(&main)[..8]);
    let tree = CommitTree {
        path: tree_path.clone(),
        entries: vec![
            file_entry("train.py", &main, false),
            file_entry("bin/run.sh", &script, true),
            TreeEntry {
                path: "link.py".to_owned(),
                kind: EntryKind::Symlink,
                executable: false,
                size: 0,
                hash: None,
                target: Some("train.py".to_owned()),
            },
        ],
    };
    let committed = cp
        .commit_tree(&volume, &tree)
        .await
        .map_err(api("commit_tree"))?;
    ensure!(
        committed.path == tree_path,
        "committed at `{}`",
        committed.path
    );
    ensure!(
        committed.files == 2,
        "committed {} files, not 2",
        committed.files
    );
    ensure!(
        committed.bytes == (main.len() + script.len()) as u64,
        "committed {} bytes",
        committed.bytes
    );
    cp.commit_tree(&volume, &tree)
        .await
        .map_err(api("commit the same tree again"))?;

    for asked in ["", tree_path.as_str()] {
        let entries = cp
            .list_tree(&volume, asked)
            .await
            .map_err(api("list_tree"))?;
        let find = |p: &str| {
            entries
                .iter()
                .find(|e| e.path == format!("{tree_path}/{p}"))
        };
        let train = find("train.py").ok_or(format!(
            "`train.py` not listed under `{asked}`: {entries:?}"
        ))?;
        ensure!(
            train.kind == "file" && train.size == main.len() as u64,
            "train.py listed as {train:?}"
        );
        let run = find("bin/run.sh").ok_or(format!("`bin/run.sh` not listed: {entries:?}"))?;
        ensure!(
            run.executable,
            "bin/run.sh lost its executable bit: {run:?}"
        );
        let link = find("link.py").ok_or(format!("`link.py` not listed: {entries:?}"))?;
        ensure!(
            link.kind == "symlink" && link.target.as_deref() == Some("train.py"),
            "link.py listed as {link:?}"
        );
    }
    let mut out: Vec<u8> = Vec::new();
    let n = cp
        .read_file(&volume, &format!("{tree_path}/train.py"), &mut out)
        .await
        .map_err(api("read_file"))?;
    ensure!(
        n == main.len() as u64 && out == main,
        "read back {n} bytes that differ"
    );
    expect_error(
        "read a file that is not there",
        cp.read_file(&volume, &format!("{tree_path}/nope.py"), &mut Vec::new())
            .await,
        ErrorKind::NotFound,
        Some("not_found"),
    )?;
    Ok(())
}

pub(crate) async fn commit_missing_blob_refused(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-code", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let never = hash(key(ctx, "never-sent").as_bytes());
    let tree = CommitTree {
        path: format!("code/{}", &never[..8]),
        entries: vec![TreeEntry {
            path: "a.py".to_owned(),
            kind: EntryKind::File,
            executable: false,
            size: 3,
            hash: Some(never.clone()),
            target: None,
        }],
    };
    let e = expect_error(
        "commit with a blob never sent",
        cp.commit_tree(&volume, &tree).await,
        ErrorKind::Refused,
        Some("invalid"),
    )?;
    let listed = e
        .details()
        .get("missing")
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    ensure!(
        listed.iter().any(|m| m.as_str() == Some(never.as_str())),
        "details {} do not list the missing blob",
        e.details()
    );
    Ok(())
}

/// A tree committed at `""` (what `div storage put` sends) is put into the volume's root as
/// `cp` would: a path it lacks is written, the same content again is fine, other content at a
/// path it holds replaces it; a file where the root holds a folder (or a folder where it holds
/// a file) refuses the whole commit with a conflict naming that path, before anything is
/// written.
pub(crate) async fn commit_at_root_replaces_files_never_folders(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-put", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let first = Bytes::from(format!("first {}\n", key(ctx, "put")).into_bytes());
    let other = Bytes::from(format!("other {}\n", key(ctx, "put")).into_bytes());
    for data in [&first, &other] {
        cp.upload_blob(
            &volume,
            &hash(data),
            0,
            data.len() as u64,
            BlobSource::Bytes(data.clone()),
        )
        .await
        .map_err(api("upload_blob"))?;
    }
    let file = |path: &str, data: &Bytes| TreeEntry {
        path: path.to_owned(),
        kind: EntryKind::File,
        executable: false,
        size: data.len() as u64,
        hash: Some(hash(data)),
        target: None,
    };
    let at_root = |entries| CommitTree {
        path: String::new(),
        entries,
    };
    let paths = |entries: Vec<VolumeEntry>| -> Vec<String> {
        let mut p: Vec<String> = entries
            .into_iter()
            .filter(|e| e.kind != "dir")
            .map(|e| e.path)
            .collect();
        p.sort();
        p
    };
    let tree = at_root(vec![file("data/a.txt", &first)]);
    let committed = cp
        .commit_tree(&volume, &tree)
        .await
        .map_err(api("commit at the root"))?;
    ensure!(
        committed.path.is_empty() && committed.files == 1,
        "committed {committed:?}"
    );
    cp.commit_tree(&volume, &tree)
        .await
        .map_err(api("the same commit at the root again"))?;
    cp.commit_tree(
        &volume,
        &at_root(vec![file("data/a.txt", &other), file("data/b.txt", &other)]),
    )
    .await
    .map_err(api("other content at a path the root holds (replaced)"))?;
    let mut read = Vec::new();
    cp.read_file(&volume, "data/a.txt", &mut read)
        .await
        .map_err(api("read_file"))?;
    ensure!(
        read == other.as_ref(),
        "`data/a.txt` holds {:?}, not the content put over it",
        String::from_utf8_lossy(&read)
    );
    let e = expect_error(
        "a file where the root holds a folder",
        cp.commit_tree(
            &volume,
            &at_root(vec![file("data", &first), file("c.txt", &first)]),
        )
        .await,
        ErrorKind::Conflict,
        Some("conflict"),
    )?;
    ensure!(
        e.details().get("path").and_then(|p| p.as_str()) == Some("data"),
        "the conflict names `data`: {}",
        e.details()
    );
    let e = expect_error(
        "a folder where the root holds a file",
        cp.commit_tree(
            &volume,
            &at_root(vec![file("c.txt", &first), file("data/a.txt/x", &first)]),
        )
        .await,
        ErrorKind::Conflict,
        Some("conflict"),
    )?;
    ensure!(
        e.details().get("path").and_then(|p| p.as_str()) == Some("data/a.txt"),
        "the conflict names `data/a.txt`: {}",
        e.details()
    );
    let listed = paths(cp.list_tree(&volume, "").await.map_err(api("list_tree"))?);
    ensure!(
        listed == ["data/a.txt", "data/b.txt"],
        "the volume's root holds {listed:?}, not `data/a.txt` and `data/b.txt` (a refused commit wrote nothing)"
    );
    cp.delete_volume(&volume)
        .await
        .map_err(api("delete_volume"))?;
    Ok(())
}

pub(crate) async fn bad_paths_refused(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let volume = format!("{}-code", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let data = Bytes::from_static(b"x\n");
    let h = hash(&data);
    cp.upload_blob(&volume, &h, 0, 2, BlobSource::Bytes(data))
        .await
        .map_err(api("upload_blob"))?;
    for bad in ["../escape.py", "/etc/passwd", "a/../../b", "a//b", ""] {
        let tree = CommitTree {
            path: format!("code/{}", &hash(bad.as_bytes())[..8]),
            entries: vec![TreeEntry {
                path: bad.to_owned(),
                kind: EntryKind::File,
                executable: false,
                size: 2,
                hash: Some(h.clone()),
                target: None,
            }],
        };
        expect_error(
            &format!("commit the path `{bad}`"),
            cp.commit_tree(&volume, &tree).await,
            ErrorKind::Refused,
            Some("invalid"),
        )?;
    }
    Ok(())
}
