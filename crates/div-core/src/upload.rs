//! Sending a shipment to a volume and committing its tree: what `div run` does with the
//! code and `div storage put` with its files. Only what the volume lacks is sent, small
//! files in packs, large ones in pieces, partial blobs resumed.

use div_api::{BlobSource, CommitTree, ControlPlane};
use div_ship::{PlannedBlob, Shipment, UploadPlan};

use crate::error::RunError;
use crate::event::{Event, EventSink};

/// What an upload's failures say it was doing, in the words of the command that ran it.
#[derive(Debug)]
pub(crate) struct UploadWords {
    pub(crate) make: &'static str,
    ask: &'static str,
    send: &'static str,
    commit: &'static str,
}

/// A blob larger than this is sent in pieces of this many bytes, each a request of its own,
/// so the progress bar moves while one large file is sent.
pub const UPLOAD_PIECE_BYTES: u64 = 32 << 20;

/// How many bytes of small files one pack carries (at most), and how many files.
const PACK_BYTES: u64 = 8 << 20;
const PACK_BLOBS: usize = 4096;

/// `div run`'s code upload.
pub(crate) const CODE_UPLOAD: UploadWords = UploadWords {
    make: "make the code volume",
    ask: "ask which files the volume lacks",
    send: "upload the code",
    commit: "commit the code",
};

/// `div models push`.
pub(crate) const MODEL_PUSH: UploadWords = UploadWords {
    make: "make the volume models are kept in",
    ask: "ask which files of the model the control plane lacks",
    send: "send the model's files",
    commit: "commit the model's tree",
};

/// `div storage put`.
pub(crate) const STORAGE_PUT: UploadWords = UploadWords {
    make: "make the volume for `div storage put`",
    ask: "ask which files the volume lacks for `div storage put`",
    send: "send the files of `div storage put`",
    commit: "add the files of `div storage put` to the volume",
};

/// Send what `volume` lacks of `shipment` (resuming partial blobs), then commit its tree at
/// `path`, each entry's path under `prefix` when one is given (`div storage put --to`).
/// `digest` is the unprefixed tree's digest when the caller has it already
/// ([`div_ship::Manifest::digests`], taken with the code id).
pub(crate) async fn upload(
    cp: &dyn ControlPlane,
    shipment: &Shipment,
    volume: &str,
    (path, prefix): (&str, &str),
    digest: Option<&str>,
    words: &UploadWords,
    sink: &mut dyn EventSink,
) -> Result<(), RunError> {
    let api = |during: &'static str| move |e| RunError::api(during, e);
    // The same tree already committed there (the project is unchanged since its last run):
    // one short question, and neither the hashes nor the tree are sent, and the volume is
    // not even made again (its answer carries the volume's size, which walks it). Unprefixed,
    // the tree's digest is the manifest's own entries', written once with the code id: no
    // copy of them is made to ask, nor serde_json run over them (20 ms for 40,000 files,
    // docs/performance.md).
    let mut tree = None;
    if !path.is_empty() {
        let digest = if prefix.is_empty() {
            match digest {
                Some(digest) => digest.to_owned(),
                None => shipment.manifest.digests().tree,
            }
        } else {
            div_api::tree_digest(&tree.insert(commit_tree(shipment, path, prefix)).entries)
        };
        if cp
            .tree_held(volume, path, &digest)
            .await
            .map_err(api(words.ask))?
            .is_some()
        {
            sink.event(Event::UploadStarted { bytes: 0, blobs: 0 });
            sink.event(Event::UploadFinished);
            return Ok(());
        }
    }
    let tree = match tree {
        Some(tree) => tree,
        None => commit_tree(shipment, path, prefix),
    };
    // A snapshot is staged where the control plane can: it writes each new file once, in
    // its place, as its pack arrives, and the tree is sent once, before the blobs. The volume
    // is made only when the stage finds none (the answer to making it carries its size, which
    // walks every snapshot it holds: 570,000 files for ten of a big repository's).
    let mut staged = None;
    if !path.is_empty() {
        staged = cp.stage_tree(volume, &tree).await.map_err(api(words.ask))?;
    }
    if staged.is_none() {
        cp.create_volume(volume).await.map_err(api(words.make))?;
        if !path.is_empty() {
            staged = cp.stage_tree(volume, &tree).await.map_err(api(words.ask))?;
        }
    }
    if let Some(stage) = staged {
        let sent = send_missing(cp, shipment, volume, words, sink, Some(&stage)).await;
        let committed = match sent {
            Ok(()) => cp
                .commit_stage(volume, &stage.id)
                .await
                .map_err(api(words.commit)),
            Err(e) => Err(e),
        };
        match committed {
            Ok(_) => {
                sink.event(Event::UploadFinished);
                return Ok(());
            }
            // The stage is gone (the control plane restarted, or it let the stage go), or
            // blobs the volume held when the stage was made were let go before its commit
            // (retention freed the last snapshot holding them): the tree is sent the other
            // way, which asks again what the volume lacks.
            Err(RunError::Api { source, .. })
                if source.is_not_found() || names_missing_blobs(&source) => {}
            Err(e) => return Err(e),
        }
    }
    let mut asked_again = false;
    loop {
        send_missing(cp, shipment, volume, words, sink, None).await?;
        match cp.commit_tree(volume, &tree).await {
            Ok(_) => break,
            // Blobs the volume held when asked were let go before the commit (the server's
            // retention of code snapshots freed the last snapshot holding them): asked again
            // and sent, once.
            Err(e) if !asked_again && names_missing_blobs(&e) => asked_again = true,
            Err(e) => return Err(api(words.commit)(e)),
        }
    }
    sink.event(Event::UploadFinished);
    Ok(())
}

/// The tree `shipment` commits at `path`, each entry's path under `prefix` when one is given.
fn commit_tree(shipment: &Shipment, path: &str, prefix: &str) -> CommitTree {
    CommitTree {
        path: path.to_string(),
        entries: shipment
            .manifest
            .entries
            .iter()
            .map(|e| {
                // The manifest's entries are the API's (one `TreeEntry`): only the path moves.
                let mut entry = e.clone();
                if !prefix.is_empty() {
                    entry.path = format!("{prefix}/{}", e.path);
                }
                entry
            })
            .collect(),
    }
}

/// A commit refused because blobs of its tree are not in the volume.
fn names_missing_blobs(e: &div_api::ApiError) -> bool {
    e.details()
        .get("missing")
        .and_then(|m| m.as_array())
        .is_some_and(|m| !m.is_empty())
}

/// Sends what `volume` lacks of `shipment`: small whole files in packs, the rest one by one,
/// resuming partial blobs. What it lacks is what `stage` says, when the tree is staged (and
/// its packs then go to the stage), else asked.
async fn send_missing(
    cp: &dyn ControlPlane,
    shipment: &Shipment,
    volume: &str,
    words: &UploadWords,
    sink: &mut dyn EventSink,
    stage: Option<&div_api::StagedTree>,
) -> Result<(), RunError> {
    let asked;
    let (missing, partial) = match stage {
        Some(stage) => (&stage.missing, &stage.partial),
        None => {
            asked = ask_missing(cp, shipment, volume, words).await?;
            (&asked.missing, &asked.partial)
        }
    };
    let plan = UploadPlan::new(shipment, missing, partial);
    sink.event(Event::UploadStarted {
        bytes: plan.total_bytes,
        blobs: plan.blobs.len() as u64,
    });
    // Small whole files go together, in packs of up to PACK_BYTES: a project of many small
    // files does not cost a request each. The rest go one by one, resumably.
    let (small, large): (Vec<_>, Vec<_>) = plan
        .blobs
        .iter()
        .partition(|b| b.offset == 0 && b.size <= div_api::PACK_BLOB_MAX_BYTES);
    let packs = Packs {
        cp,
        shipment,
        volume,
        words,
        stage,
    };
    let mut sent = packs.send(pack_groups(&small), sink).await?;
    for blob in large {
        send_large(cp, volume, words, blob, &mut sent, sink).await?;
    }
    Ok(())
}

/// Which of `shipment`'s blobs `volume` lacks, and how much of each it holds already.
async fn ask_missing(
    cp: &dyn ControlPlane,
    shipment: &Shipment,
    volume: &str,
    words: &UploadWords,
) -> Result<div_api::MissingBlobs, RunError> {
    let mut hashes: Vec<String> = shipment
        .manifest
        .entries
        .iter()
        .filter_map(|e| e.hash.clone())
        .collect();
    hashes.sort();
    hashes.dedup();
    cp.missing_blobs(volume, &hashes)
        .await
        .map_err(|e| RunError::api(words.ask, e))
}

/// The small files, hash and path, in groups of a pack each: at most [`PACK_BYTES`] (a file
/// may take a pack past it) and [`PACK_BLOBS`] files.
fn pack_groups(small: &[&PlannedBlob]) -> Vec<Vec<(String, std::path::PathBuf)>> {
    let mut groups: Vec<Vec<(String, std::path::PathBuf)>> = Vec::new();
    let mut group_bytes = 0u64;
    for blob in small {
        if groups
            .last()
            .is_none_or(|g| group_bytes >= PACK_BYTES || g.len() >= PACK_BLOBS)
        {
            groups.push(Vec::new());
            group_bytes = 0;
        }
        if let Some(group) = groups.last_mut() {
            group.push((blob.hash.clone(), blob.path.clone()));
        }
        group_bytes += blob.size;
    }
    groups
}

/// Where packs go: the volume, or its staged tree.
struct Packs<'a> {
    cp: &'a dyn ControlPlane,
    shipment: &'a Shipment,
    volume: &'a str,
    words: &'a UploadWords,
    stage: Option<&'a div_api::StagedTree>,
}

impl Packs<'_> {
    /// Sends a pack of each group; returns the bytes sent. Each pack's files are read on a
    /// blocking thread while the pack before is sent, so the reading here and the writing at
    /// the server overlap.
    async fn send(
        &self,
        groups: Vec<Vec<(String, std::path::PathBuf)>>,
        sink: &mut dyn EventSink,
    ) -> Result<u64, RunError> {
        let Packs {
            cp,
            shipment,
            volume,
            words,
            stage,
        } = *self;
        let api = |during: &'static str| move |e| RunError::api(during, e);
        let mut sent = 0;
        let read = |group: Vec<(String, std::path::PathBuf)>| {
            let kept = shipment.kept.clone();
            tokio::task::spawn_blocking(move || read_pack(group, &kept))
        };
        let got = |reading: Result<_, tokio::task::JoinError>| match reading {
            Ok(read) => read,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(RunError::Read {
                path: shipment.root.clone(),
                source: std::io::Error::other(e),
            }),
        };
        // Two packs are in flight at all times, so the server writes one while it checks the
        // other (its two requests are served on two threads): each that ends is followed at
        // once by the next, whose files are read on a blocking thread two packs ahead.
        let mut groups = groups.into_iter();
        let mut reading: std::collections::VecDeque<_> =
            groups.by_ref().take(2).map(read).collect();
        type Sending<'a> =
            std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, RunError>> + Send + 'a>>;
        type Read = tokio::task::JoinHandle<Result<(Vec<div_api::PackBlob>, u64), RunError>>;
        let send = |reading: Read| -> Sending<'_> {
            Box::pin(async move {
                let (pack, bytes) = got(reading.await)?;
                match stage {
                    Some(stage) => cp.upload_staged_pack(volume, &stage.id, &pack).await,
                    None => cp.upload_pack(volume, &pack).await,
                }
                .map_err(api(words.send))?;
                Ok(bytes)
            })
        };
        let mut slots: [Option<Sending<'_>>; 2] = [None, None];
        loop {
            for slot in slots.iter_mut().filter(|s| s.is_none()) {
                *slot = reading.pop_front().map(send);
                reading.extend(groups.next().map(read));
            }
            if slots.iter().all(Option::is_none) {
                break;
            }
            let (i, done) = std::future::poll_fn(|cx| {
                for (i, slot) in slots.iter_mut().enumerate() {
                    if let Some(sending) = slot
                        && let std::task::Poll::Ready(done) = sending.as_mut().poll(cx)
                    {
                        return std::task::Poll::Ready((i, done));
                    }
                }
                std::task::Poll::Pending
            })
            .await;
            slots[i] = None;
            sent += done?;
            sink.event(Event::UploadProgress { sent });
        }
        Ok(sent)
    }
}

/// Sends a blob too large for a pack, in pieces of [`UPLOAD_PIECE_BYTES`] so that progress
/// shows while it goes; `sent` counts its bytes.
async fn send_large(
    cp: &dyn ControlPlane,
    volume: &str,
    words: &UploadWords,
    blob: &PlannedBlob,
    sent: &mut u64,
    sink: &mut dyn EventSink,
) -> Result<(), RunError> {
    let api = |during: &'static str| move |e| RunError::api(during, e);
    // A large file goes in pieces, so progress shows while it is sent; the client resumes
    // a cut piece itself (div-api's `upload.rs`): one loop, one budget.
    let end = blob.offset + blob.len;
    let mut at = blob.offset;
    while at < end {
        let len = (end - at).min(UPLOAD_PIECE_BYTES);
        let data = BlobSource::File {
            path: blob.path.clone(),
            offset: at,
            len,
        };
        match cp
            .upload_blob(volume, &blob.hash, at, blob.size, data)
            .await
        {
            Ok(_) => {}
            // The server holds another amount of this blob than the plan began from
            // (another upload of the same blob, in this project, was cut or discarded), or
            // it resumed from a partial whose bytes were not the file's (a crash of the
            // server's machine can leave one) and discarded it: send the whole file
            // again, once, from what the server holds.
            Err(e)
                if e.code() == Some("offset_mismatch")
                    || (e.code() == Some("hash_mismatch") && blob.offset > 0) =>
            {
                let whole = BlobSource::File {
                    path: blob.path.clone(),
                    offset: 0,
                    len: blob.size,
                };
                div_api::upload_blob_resuming(cp, volume, &blob.hash, &whole)
                    .await
                    .map_err(api(words.send))?;
                *sent += end - at;
                sink.event(Event::UploadProgress { sent: *sent });
                break;
            }
            Err(e) => return Err(api(words.send)(e)),
        }
        at += len;
        *sent += len;
        sink.event(Event::UploadProgress { sent: *sent });
    }
    Ok(())
}

/// Reads a pack's files: each whole, with the hash it was listed under; from the bytes
/// `kept` when the listing kept them (the bytes it hashed), else from the file.
fn read_pack(
    files: Vec<(String, std::path::PathBuf)>,
    kept: &div_ship::Kept,
) -> Result<(Vec<div_api::PackBlob>, u64), RunError> {
    let mut pack = Vec::with_capacity(files.len());
    let mut bytes = 0u64;
    for (hash, path) in files {
        let data = match kept.get(&hash) {
            Some(data) => data,
            None => std::fs::read(&path)
                .map_err(|source| RunError::Read { path, source })?
                .into(),
        };
        bytes += data.len() as u64;
        pack.push(div_api::PackBlob { hash, data });
    }
    Ok((pack, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pack carries the bytes the listing kept, the ones it hashed, even when the file has
    /// changed since (the server would refuse the file as it is now: its hash is another);
    /// a file whose bytes were not kept is read.
    #[test]
    fn a_pack_carries_the_bytes_kept_from_hashing_not_the_file_as_it_is_now() {
        let tmp = tempfile::tempdir().unwrap();
        let (kept_path, read_path) = (tmp.path().join("kept.py"), tmp.path().join("read.py"));
        std::fs::write(&kept_path, "version 2\n").unwrap();
        std::fs::write(&read_path, "read now\n").unwrap();
        let hash = |b: &[u8]| blake3::hash(b).to_hex().to_string();
        let kept = div_ship::Kept(std::sync::Arc::new(
            [(
                hash(b"version 1\n"),
                bytes::Bytes::from_static(b"version 1\n"),
            )]
            .into_iter()
            .collect(),
        ));
        let (pack, bytes) = read_pack(
            vec![
                (hash(b"version 1\n"), kept_path),
                (hash(b"read now\n"), read_path),
            ],
            &kept,
        )
        .unwrap();
        assert_eq!(&pack[0].data[..], b"version 1\n");
        assert_eq!(&pack[1].data[..], b"read now\n");
        assert_eq!(bytes, 19);
    }

    proptest::proptest! {
        /// The digest taken with the code id (div-ship's own JSON writer) is the one the
        /// control plane compares with (`div_api::tree_digest`, serde_json): for any paths,
        /// targets, sizes and order, or an unchanged project would be sent again, or worse,
        /// another tree taken for it.
        #[test]
        fn the_digest_taken_with_the_code_id_is_the_apis(
            entries in proptest::collection::vec(
                ("\\PC{0,12}", proptest::bool::ANY, proptest::bool::ANY, proptest::num::u64::ANY,
                 "[\\x00-\\x7f\\u{80}-\\u{10ffff}]{0,8}"),
                0..40,
            )
        ) {
            let mut entries: Vec<div_ship::TreeEntry> = entries
                .into_iter()
                .map(|(path, link, executable, size, other)| div_ship::TreeEntry {
                    path,
                    kind: if link { div_ship::EntryKind::Symlink } else { div_ship::EntryKind::File },
                    executable,
                    size,
                    hash: (!link).then(|| other.clone()),
                    target: link.then_some(other),
                })
                .collect();
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            entries.dedup_by(|a, b| a.path == b.path);
            let manifest = div_ship::Manifest { entries };
            let digests = manifest.digests();
            proptest::prop_assert_eq!(&digests.tree, &div_api::tree_digest(&manifest.entries));
            proptest::prop_assert_eq!(&digests.id, &manifest.id());
        }
    }
}
