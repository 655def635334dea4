//! Volumes in the fake: made, listed, deleted; blobs (what a volume lacks, uploads resumed
//! and checked, packs); trees staged and committed (at `""` as `cp` would write them);
//! listings and files read.

use bytes::Bytes;
use div_api::{
    ApiError, BlobSource, ByteSink, CommitTree, CommittedTree, ControlPlane, EntryKind, ErrorKind,
    MissingBlobs, Route, StagedTree, Volume, VolumeEntry,
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::state::{
    FAKE_TIME, FakeControlPlane, FakeFile, FakeStages, FakeVolume, good_path, invalid, not_found,
    volume_name,
};

pub(crate) async fn list_volumes(fake: &FakeControlPlane) -> Result<Vec<Volume>, ApiError> {
    fake.called(Route::ListVolumes);
    Ok(fake
        .state()
        .volumes
        .iter()
        .map(|(name, v)| Volume {
            name: name.clone(),
            created_at: v.created_at.clone(),
            size_bytes: v.files.values().map(|f| f.data.len() as u64).sum(),
            extra: Default::default(),
        })
        .collect())
}

pub(crate) async fn create_volume(fake: &FakeControlPlane, name: &str) -> Result<Volume, ApiError> {
    fake.called(Route::CreateVolume);
    // The server's rule: a volume name (div-spec's).
    volume_name(name)?;
    let mut state = fake.state();
    let v = state
        .volumes
        .entry(name.to_owned())
        .or_insert_with(|| FakeVolume {
            created_at: FAKE_TIME.to_owned(),
            ..FakeVolume::default()
        });
    Ok(Volume {
        name: name.to_owned(),
        created_at: v.created_at.clone(),
        size_bytes: v.files.values().map(|f| f.data.len() as u64).sum(),
        extra: Default::default(),
    })
}

pub(crate) async fn delete_volume(fake: &FakeControlPlane, name: &str) -> Result<(), ApiError> {
    fake.called(Route::DeleteVolume);
    volume_name(name)?;
    fake.state()
        .volumes
        .remove(name)
        .map(drop)
        .ok_or_else(|| not_found("volume", name))
}

pub(crate) async fn missing_blobs(
    fake: &FakeControlPlane,
    volume: &str,
    hashes: &[String],
) -> Result<MissingBlobs, ApiError> {
    fake.called(Route::MissingBlobs);
    volume_name(volume)?;
    let state = fake.state();
    let v = state
        .volumes
        .get(volume)
        .ok_or_else(|| not_found("volume", volume))?;
    let missing: Vec<String> = hashes
        .iter()
        .filter(|h| !v.blobs.contains_key(*h))
        .cloned()
        .collect();
    let partial = missing
        .iter()
        .filter_map(|h| v.partial.get(h).map(|p| (h.clone(), p.len() as u64)))
        .collect();
    Ok(MissingBlobs {
        missing,
        partial,
        extra: Default::default(),
    })
}

pub(crate) async fn upload_blob(
    fake: &FakeControlPlane,
    volume: &str,
    hash: &str,
    offset: u64,
    total: u64,
    data: BlobSource,
) -> Result<(), ApiError> {
    fake.called(Route::UploadBlob);
    volume_name(volume)?;
    let bytes = match data {
        BlobSource::Bytes(b) => b.to_vec(),
        BlobSource::File { path, offset, len } => {
            let all = std::fs::read(&path).map_err(|e| {
                ApiError::new(
                    ErrorKind::Io,
                    format!("could not read `{}`: {e}", path.display()),
                )
            })?;
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(all.len());
            let end = usize::try_from(offset + len)
                .unwrap_or(usize::MAX)
                .min(all.len());
            all[start..end].to_vec()
        }
    };
    let mut state = fake.state();
    let v = state
        .volumes
        .get_mut(volume)
        .ok_or_else(|| not_found("volume", volume))?;
    if v.blobs.contains_key(hash) {
        return Ok(());
    }
    let have = v.partial.get(hash).map_or(0, |p| p.len() as u64);
    if offset != have {
        return Err(ApiError::from_server(
            ErrorKind::Conflict,
            "offset_mismatch".to_owned(),
            format!("blob `{hash}` has {have} bytes, not {offset}"),
            json!({ "received": have }),
        ));
    }
    let partial = v.partial.entry(hash.to_owned()).or_default();
    partial.extend_from_slice(&bytes);
    if partial.len() as u64 > total {
        v.partial.remove(hash);
        return Err(invalid(
            format!("blob `{hash}` is longer than {total} bytes"),
            Value::Null,
        ));
    }
    if partial.len() as u64 == total {
        let whole = v.partial.remove(hash).unwrap_or_default();
        let actual = blake3::hash(&whole).to_hex().to_string();
        if actual != hash {
            return Err(ApiError::from_server(
                ErrorKind::Refused,
                "hash_mismatch".to_owned(),
                format!("blob `{hash}` hashes to `{actual}`"),
                json!({ "actual": actual }),
            ));
        }
        v.blobs.insert(hash.to_owned(), Bytes::from(whole));
    }
    Ok(())
}

pub(crate) async fn stage_tree(
    fake: &FakeControlPlane,
    volume: &str,
    tree: &CommitTree,
) -> Result<Option<StagedTree>, ApiError> {
    fake.called(Route::StageTree);
    if fake.stages == FakeStages::None {
        return Ok(None);
    }
    volume_name(volume)?;
    let mut hashes: Vec<String> = tree
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .filter_map(|e| e.hash.clone())
        .collect();
    hashes.sort();
    hashes.dedup();
    // No volume: no stage, as a server answers (404, which the client takes as `None`).
    let Ok(missing) = fake.missing_blobs(volume, &hashes).await else {
        return Ok(None);
    };
    let mut state = fake.state();
    state.staged += 1;
    let id = format!("stage-{}", state.staged);
    state
        .stages
        .insert(id.clone(), (volume.to_owned(), tree.clone()));
    Ok(Some(StagedTree {
        id,
        missing: missing.missing,
        partial: missing.partial,
        extra: Default::default(),
    }))
}

pub(crate) async fn upload_staged_pack(
    fake: &FakeControlPlane,
    volume: &str,
    stage: &str,
    blobs: &[div_api::PackBlob],
) -> Result<(), ApiError> {
    fake.called(Route::UploadPack);
    volume_name(volume)?;
    {
        let mut state = fake.state();
        if state.stages.get(stage).is_none_or(|(v, _)| v != volume) {
            return Err(not_found("stage", stage));
        }
        state.staged_packs += 1;
    }
    fake.upload_pack(volume, blobs).await
}

pub(crate) async fn commit_stage(
    fake: &FakeControlPlane,
    volume: &str,
    stage: &str,
) -> Result<CommittedTree, ApiError> {
    fake.called(Route::CommitStage);
    volume_name(volume)?;
    let taken = fake.state().stages.remove(stage);
    let tree = match taken {
        Some((v, tree)) if v == volume && fake.stages == FakeStages::Kept => tree,
        _ => return Err(not_found("stage", stage)),
    };
    fake.commit_tree(volume, &tree).await
}

pub(crate) async fn commit_tree(
    fake: &FakeControlPlane,
    volume: &str,
    tree: &CommitTree,
) -> Result<CommittedTree, ApiError> {
    fake.called(Route::CommitTree);
    volume_name(volume)?;
    let mut state = fake.state();
    let v = state
        .volumes
        .get_mut(volume)
        .ok_or_else(|| not_found("volume", volume))?;
    if !tree.path.is_empty() && !good_path(&tree.path) {
        return Err(invalid(
            format!("bad tree path `{}`", tree.path),
            Value::Null,
        ));
    }
    let bad: Vec<&str> = tree
        .entries
        .iter()
        .filter(|e| !good_path(&e.path))
        .map(|e| e.path.as_str())
        .collect();
    if !bad.is_empty() {
        return Err(invalid(
            format!("bad paths in the tree: `{}`", bad.join("`, `")),
            json!({ "paths": bad }),
        ));
    }
    let missing: Vec<String> = tree
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .filter_map(|e| e.hash.clone())
        .filter(|h| !v.blobs.contains_key(h))
        .collect();
    if !missing.is_empty() {
        return Err(invalid(
            format!("{} blobs of the tree were never sent", missing.len()),
            json!({ "missing": missing }),
        ));
    }
    let files = tree
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .count() as u64;
    let bytes = tree.entries.iter().map(|e| e.size).sum();
    let committed = CommittedTree {
        volume: volume.to_owned(),
        path: tree.path.clone(),
        files,
        bytes,
        digest: None,
        extra: Default::default(),
    };
    if tree.path.is_empty() {
        return add_to_root(v, volume, tree, committed);
    }
    if let Some(existing) = v.trees.get(&tree.path) {
        if *existing == tree.entries {
            return Ok(committed);
        }
        return Err(ApiError::from_server(
            ErrorKind::Conflict,
            "conflict".to_owned(),
            format!("`{}` already holds another tree", tree.path),
            Value::Null,
        ));
    }
    for e in &tree.entries {
        let data = e
            .hash
            .as_ref()
            .and_then(|h| v.blobs.get(h).cloned())
            .unwrap_or_default();
        v.files.insert(
            format!("{}/{}", tree.path, e.path),
            FakeFile {
                kind: e.kind,
                data,
                executable: e.executable,
                target: e.target.clone(),
            },
        );
    }
    v.trees.insert(tree.path.clone(), tree.entries.clone());
    Ok(committed)
}

pub(crate) async fn list_tree(
    fake: &FakeControlPlane,
    volume: &str,
    path: &str,
) -> Result<Vec<VolumeEntry>, ApiError> {
    fake.called(Route::ListTree);
    volume_name(volume)?;
    let state = fake.state();
    let v = state
        .volumes
        .get(volume)
        .ok_or_else(|| not_found("volume", volume))?;
    let prefix = path.trim_end_matches('/');
    let under = |p: &str| prefix.is_empty() || p == prefix || p.starts_with(&format!("{prefix}/"));
    Ok(v.files
        .iter()
        .filter(|(p, _)| under(p))
        .map(|(p, f)| VolumeEntry {
            path: p.clone(),
            kind: match f.kind {
                EntryKind::File => "file",
                EntryKind::Symlink => "symlink",
            }
            .to_owned(),
            size: f.data.len() as u64,
            executable: f.executable,
            target: f.target.clone(),
            extra: Default::default(),
        })
        .collect())
}

pub(crate) async fn read_file(
    fake: &FakeControlPlane,
    volume: &str,
    path: &str,
    sink: ByteSink<'_>,
) -> Result<u64, ApiError> {
    fake.called(Route::ReadFile);
    volume_name(volume)?;
    let data = {
        let state = fake.state();
        let v = state
            .volumes
            .get(volume)
            .ok_or_else(|| not_found("volume", volume))?;
        match v.files.get(path) {
            Some(f) if f.kind == EntryKind::File => f.data.clone(),
            _ => return Err(not_found("file", path)),
        }
    };
    sink.write_all(&data)
        .await
        .map_err(|e| ApiError::new(ErrorKind::Io, format!("could not write `{path}`: {e}")))?;
    Ok(data.len() as u64)
}

/// A tree committed at `""` (what `div storage put` sends), as div-server puts it into the
/// volume's root, as `cp` would: each path the volume lacks is written, one it holds with
/// other content (or a link) is replaced, the same content is left as it is; a folder where
/// the tree has a file, or a file or link where it needs a folder, refuses the whole commit
/// with a conflict naming the path, before anything is written.
fn add_to_root(
    v: &mut FakeVolume,
    volume: &str,
    tree: &CommitTree,
    committed: CommittedTree,
) -> Result<CommittedTree, ApiError> {
    let conflict = |path: &str, why: &str| {
        ApiError::from_server(
            ErrorKind::Conflict,
            "conflict".to_owned(),
            format!("`{path}` in volume `{volume}` {why}"),
            json!({ "path": path }),
        )
    };
    let is_folder = |p: &str| v.files.keys().any(|k| k.starts_with(&format!("{p}/")));
    let mut new = Vec::new();
    for e in &tree.entries {
        let parts: Vec<&str> = e.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            match v.files.get(&above).map(|f| f.kind) {
                Some(EntryKind::Symlink) => {
                    return Err(conflict(
                        &above,
                        "is a link (a run may have left it), where the put has a folder; a put never writes through a link",
                    ));
                }
                Some(EntryKind::File) => {
                    return Err(conflict(
                        &above,
                        "is a file, where the put has a folder; a put replaces files, never a file with a folder",
                    ));
                }
                None => {}
            }
        }
        let data = e
            .hash
            .as_ref()
            .and_then(|h| v.blobs.get(h).cloned())
            .unwrap_or_default();
        match v.files.get(&e.path) {
            None if is_folder(&e.path) => {
                return Err(conflict(
                    &e.path,
                    "is a folder, where the put has a file; a put replaces files, never a folder",
                ));
            }
            None => new.push((e, data)),
            Some(f) => {
                let same = f.kind == e.kind
                    && match e.kind {
                        EntryKind::File => f.data == data && f.executable == e.executable,
                        EntryKind::Symlink => f.target == e.target,
                    };
                if !same {
                    new.push((e, data));
                }
            }
        }
    }
    // A committed tree never changes: writing into one is refused, naming it.
    for (e, _) in &new {
        let parts: Vec<&str> = e.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            if v.trees.contains_key(&above) {
                return Err(conflict(
                    &e.path,
                    &format!(
                        "is in the committed tree `{above}`, which never changes (runs were given it by its id); put it under another `--to`"
                    ),
                ));
            }
        }
    }
    for (e, data) in new {
        v.files.insert(
            e.path.clone(),
            FakeFile {
                kind: e.kind,
                data,
                executable: e.executable,
                target: e.target.clone(),
            },
        );
    }
    Ok(committed)
}
