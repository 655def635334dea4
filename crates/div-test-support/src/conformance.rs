//! The conformance suite: named checks any [`ControlPlane`] must pass, run the same way
//! against the in-memory fake, a client talking to wiremock-free servers, and the real
//! `div-server`.
//!
//! Why one long file: each check is short and independent, and the suite is read as a list, in
//! the order it runs, against every implementation; splitting it would only scatter that list.

use std::time::Duration;

use bytes::Bytes;
use div_api::{
    ApiError, BlobSource, CommitTree, ControlPlane, CreateRun, EntryKind, ErrorKind, ListRuns,
    LogEvent, PruneImages, Run, TreeEntry, VolumeEntry,
};

/// What the suite needs to know about the control plane under test.
#[derive(Debug, Clone)]
pub struct ConformanceContext {
    /// A SKU that places a quick run (`cpu`).
    pub sku: String,
    /// GPUs to ask for (0 for `cpu`).
    pub gpus: u32,
    /// A command that ends quickly, printing `expected_output` and exiting with
    /// `expected_exit_code`.
    pub command: String,
    /// Bytes the quick run's log holds (other lines, such as a notice, may surround them).
    pub expected_output: Vec<u8>,
    /// The quick run's exit code.
    pub expected_exit_code: i32,
    /// Whether runs really execute (a fake's stay queued until stopped).
    pub runs_execute: bool,
    /// The project runs are placed in.
    pub project: String,
    /// Prefixed to every volume, secret and run name, so suites can share a server.
    pub prefix: String,
    /// How long to wait for a quick run to end.
    pub run_deadline: Duration,
}

impl Default for ConformanceContext {
    fn default() -> Self {
        ConformanceContext {
            sku: "cpu".to_owned(),
            gpus: 0,
            command: "echo hello; exit 3".to_owned(),
            expected_output: b"hello\n".to_vec(),
            expected_exit_code: 3,
            runs_execute: false,
            project: "conformance".to_owned(),
            prefix: "conf".to_owned(),
            run_deadline: Duration::from_secs(60),
        }
    }
}

/// What the suite found: each check's name, and why it failed when it did.
#[derive(Debug, Default)]
pub struct ConformanceReport {
    pub passed: Vec<&'static str>,
    pub failed: Vec<(&'static str, String)>,
}

impl ConformanceReport {
    /// Panic listing every failed check, if any failed.
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.failed.is_empty() {
            let lines: Vec<String> = self
                .failed
                .iter()
                .map(|(name, why)| format!("  {name}: {why}"))
                .collect();
            panic!(
                "{} of {} conformance checks failed:\n{}",
                self.failed.len(),
                self.failed.len() + self.passed.len(),
                lines.join("\n")
            );
        }
    }
}

type CheckResult = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

/// Turn an unexpected API error into a check failure.
fn api(what: &str) -> impl Fn(ApiError) -> String + '_ {
    move |e| format!("{what}: {:?}: {}", e.kind(), e.message())
}

/// Check that `result` failed with `kind` (and `code`, when given).
fn expect_error<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, ApiError>,
    kind: ErrorKind,
    code: Option<&str>,
) -> Result<ApiError, String> {
    match result {
        Ok(v) => Err(format!("{what}: expected a {kind:?} error, got {v:?}")),
        Err(e) if e.kind() != kind => Err(format!(
            "{what}: expected a {kind:?} error, got {:?}: {}",
            e.kind(),
            e.message()
        )),
        Err(e) if code.is_some() && e.code() != code => Err(format!(
            "{what}: expected code {code:?}, got {:?}: {}",
            e.code(),
            e.message()
        )),
        Err(e) => Ok(e),
    }
}

fn hash(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// Run every check against `cp`; never stops at the first failure.
pub async fn conformance(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> ConformanceReport {
    let mut report = ConformanceReport::default();
    macro_rules! check {
        ($name:literal, $f:expr) => {
            match $f.await {
                Ok(()) => report.passed.push($name),
                Err(why) => report.failed.push(($name, why)),
            }
        };
    }
    check!(
        "catalogue_offers_the_sku",
        catalogue_offers_the_sku(cp, ctx)
    );
    check!(
        "volumes_create_idempotent",
        volumes_create_idempotent(cp, ctx)
    );
    check!(
        "blob_missing_upload_not_missing",
        blob_missing_upload_not_missing(cp, ctx)
    );
    check!("partial_upload_resume", partial_upload_resume(cp, ctx));
    check!("hash_mismatch_refused", hash_mismatch_refused(cp, ctx));
    check!("commit_tree_read_back", commit_tree_read_back(cp, ctx));
    check!(
        "commit_missing_blob_refused",
        commit_missing_blob_refused(cp, ctx)
    );
    check!(
        "commit_at_root_replaces_files_never_folders",
        commit_at_root_replaces_files_never_folders(cp, ctx)
    );
    check!("bad_paths_refused", bad_paths_refused(cp, ctx));
    check!("secrets_without_values", secrets_without_values(cp, ctx));
    check!(
        "images_listed_and_pruned",
        images_listed_and_pruned(cp, ctx)
    );
    check!("create_run_idempotent", create_run_idempotent(cp, ctx));
    check!("get_run_by_name_and_id", get_run_by_name_and_id(cp, ctx));
    check!("not_found_kinds", not_found_kinds(cp, ctx));
    check!("unknown_sku_refused", unknown_sku_refused(cp, ctx));
    check!(
        "validation_refuses_as_creation_and_creates_nothing",
        validation_refuses_as_creation_and_creates_nothing(cp, ctx)
    );
    check!(
        "names_outside_their_rules_refused",
        names_outside_their_rules_refused(cp, ctx)
    );
    check!(
        "stop_ended_run_unchanged",
        stop_ended_run_unchanged(cp, ctx)
    );
    check!("log_of_ended_run", log_of_ended_run(cp, ctx));
    report
}

/// A quick run's request.
pub fn quick_run(ctx: &ConformanceContext, name: Option<String>) -> CreateRun {
    CreateRun {
        project: ctx.project.clone(),
        name,
        entrypoint: ctx.command.clone(),
        command: ctx.command.clone(),
        sku: ctx.sku.clone(),
        gpus: ctx.gpus,
        cpu: None,
        memory_gib: None,
        max_spend_cents: None,
        image: None,
        pull: None,
        env: Vec::new(),
        checks: Vec::new(),
        code: None,
        telemetry_layout: None,
        extra: Default::default(),
    }
}

/// A key unique to this suite run.
fn key(ctx: &ConformanceContext, what: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{what}-{t:x}-{n}", ctx.prefix)
}

async fn catalogue_offers_the_sku(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let catalogue = cp.catalogue().await.map_err(api("catalogue"))?;
    ensure!(
        catalogue.skus.iter().any(|s| s.name == ctx.sku),
        "the catalogue does not offer `{}`",
        ctx.sku
    );
    Ok(())
}

async fn volumes_create_idempotent(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
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

async fn blob_missing_upload_not_missing(
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

async fn partial_upload_resume(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
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

async fn hash_mismatch_refused(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
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

/// The image cache, where there is one: a prune removes only images it listed, the listing
/// after it lacks them, and a second prune removes nothing. (A prune removes only images no
/// queued or running run uses, so suites sharing a control plane lose none they need.) A
/// control plane without an image cache answers both `NotFound`.
async fn images_listed_and_pruned(cp: &dyn ControlPlane, _ctx: &ConformanceContext) -> CheckResult {
    let prune = PruneImages::default();
    let before = match cp.list_images().await {
        Ok(cache) => cache,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            expect_error(
                "prune_images without an image cache",
                cp.prune_images(&prune).await,
                ErrorKind::NotFound,
                None,
            )?;
            return Ok(());
        }
        Err(e) => return Err(api("list_images")(e)),
    };
    let pruned = cp.prune_images(&prune).await.map_err(api("prune_images"))?;
    let listed = |digest: &String| before.images.iter().any(|i| &i.digest == digest);
    ensure!(
        pruned.images.iter().all(listed),
        "pruned images it did not list: {:?} of {:?}",
        pruned.images,
        before.images
    );
    let after = cp
        .list_images()
        .await
        .map_err(api("list_images after a prune"))?;
    ensure!(
        after
            .images
            .iter()
            .all(|i| !pruned.images.contains(&i.digest)),
        "images pruned are still listed: {:?}",
        after.images
    );
    ensure!(
        after.path == before.path,
        "the cache moved from `{}` to `{}`",
        before.path,
        after.path
    );
    let again = cp
        .prune_images(&prune)
        .await
        .map_err(api("prune_images again"))?;
    ensure!(
        again.images.is_empty(),
        "a second prune removed {:?}",
        again.images
    );
    Ok(())
}

async fn commit_tree_read_back(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let volume = format!("{}-code", ctx.prefix);
    cp.create_volume(&volume)
        .await
        .map_err(api("create_volume"))?;
    let main = Bytes::from(format!("print('hello')  # {}\n", key(ctx, "main")).into_bytes());
    let script = Bytes::from_static(b"#!/bin/sh\necho run\n");
    for data in [&main, &script] {
        let h = hash(data);
        cp.upload_blob(
            &volume,
            &h,
            0,
            data.len() as u64,
            BlobSource::Bytes(data.clone()),
        )
        .await
        .map_err(api("upload_blob"))?;
    }
    let file = |path: &str, data: &Bytes, executable| TreeEntry {
        path: path.to_owned(),
        kind: EntryKind::File,
        executable,
        size: data.len() as u64,
        hash: Some(hash(data)),
        target: None,
    };
    let tree_path = format!("code/{}", &hash(&main)[..8]);
    let tree = CommitTree {
        path: tree_path.clone(),
        entries: vec![
            file("train.py", &main, false),
            file("bin/run.sh", &script, true),
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

async fn commit_missing_blob_refused(
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
async fn commit_at_root_replaces_files_never_folders(
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

async fn bad_paths_refused(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
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

async fn secrets_without_values(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let name = format!("{}_SECRET", ctx.prefix.to_uppercase().replace('-', "_"));
    let value = key(ctx, "value");
    let info = cp
        .set_secret(&name, &value)
        .await
        .map_err(api("set_secret"))?;
    ensure!(info.name == name, "set `{}`, asked `{name}`", info.name);
    cp.set_secret(&name, "second value")
        .await
        .map_err(api("set_secret again"))?;
    let listed = cp.list_secrets().await.map_err(api("list_secrets"))?;
    let count = listed.iter().filter(|s| s.name == name).count();
    ensure!(count == 1, "`{name}` listed {count} times");
    let text = serde_json::to_string(&listed).map_err(|e| e.to_string())?;
    ensure!(
        !text.contains(&value) && !text.contains("second value"),
        "a listing shows a secret's value: {text}"
    );
    cp.delete_secret(&name)
        .await
        .map_err(api("delete_secret"))?;
    let listed = cp.list_secrets().await.map_err(api("list_secrets"))?;
    ensure!(
        !listed.iter().any(|s| s.name == name),
        "`{name}` listed after delete"
    );
    expect_error(
        "delete a deleted secret",
        cp.delete_secret(&name).await,
        ErrorKind::NotFound,
        Some("not_found"),
    )?;
    Ok(())
}

async fn create_run_idempotent(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let k = key(ctx, "idem");
    let body = quick_run(ctx, None);
    let first = cp.create_run(&k, &body).await.map_err(api("create_run"))?;
    let second = cp
        .create_run(&k, &body)
        .await
        .map_err(api("create_run again"))?;
    ensure!(
        first.id == second.id,
        "the same key placed two runs: {} and {}",
        first.id,
        second.id
    );
    let page = cp
        .list_runs(&ListRuns {
            project: Some(ctx.project.clone()),
            ..ListRuns::default()
        })
        .await
        .map_err(api("list_runs"))?;
    let count = page.runs.iter().filter(|r| r.id == first.id).count();
    ensure!(count == 1, "run `{}` listed {count} times", first.id);
    let mut other = body.clone();
    other.command = format!("{} # another", other.command);
    expect_error(
        "the same key with another body",
        cp.create_run(&k, &other).await,
        ErrorKind::Conflict,
        Some("conflict"),
    )?;
    cp.stop_run(&first.id).await.map_err(api("stop_run"))?;
    Ok(())
}

async fn get_run_by_name_and_id(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let placed = cp
        .create_run(&key(ctx, "get"), &quick_run(ctx, None))
        .await
        .map_err(api("create_run"))?;
    let by_id = cp.get_run(&placed.id).await.map_err(api("get_run by id"))?;
    let by_name = cp
        .get_run(&placed.name)
        .await
        .map_err(api("get_run by name"))?;
    ensure!(
        by_id.id == placed.id && by_name.id == placed.id,
        "get by id and by name differ"
    );
    ensure!(by_id.project == ctx.project, "project `{}`", by_id.project);
    ensure!(by_id.command == ctx.command, "command `{}`", by_id.command);
    cp.stop_run(&placed.id).await.map_err(api("stop_run"))?;
    Ok(())
}

async fn not_found_kinds(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let run = format!("{}-no-such-run", ctx.prefix);
    let volume = format!("{}-no-such-volume", ctx.prefix);
    let nf = |what: &str, r: Result<(), ApiError>| {
        expect_error(what, r, ErrorKind::NotFound, Some("not_found")).map(drop)
    };
    nf("get_run", cp.get_run(&run).await.map(drop))?;
    nf("stop_run", cp.stop_run(&run).await.map(drop))?;
    nf("result", cp.result(&run).await.map(drop))?;
    nf("telemetry", cp.telemetry(&run, 0).await.map(drop))?;
    nf("log", cp.log(&run, 0, false).await.map(drop))?;
    nf("list_tree", cp.list_tree(&volume, "").await.map(drop))?;
    nf(
        "missing_blobs",
        cp.missing_blobs(&volume, &[]).await.map(drop),
    )?;
    Ok(())
}

async fn unknown_sku_refused(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let mut body = quick_run(ctx, None);
    body.sku = "z999".to_owned();
    let e = expect_error(
        "create a run on `z999`",
        cp.create_run(&key(ctx, "sku"), &body).await,
        ErrorKind::Refused,
        Some("unknown_sku"),
    )?;
    let accepted = e
        .details()
        .get("accepted")
        .and_then(|a| a.as_array())
        .cloned()
        .unwrap_or_default();
    ensure!(
        accepted
            .iter()
            .any(|s| s.as_str() == Some(ctx.sku.as_str())),
        "details {} do not list `{}` as accepted",
        e.details(),
        ctx.sku
    );
    Ok(())
}

/// `validate_run` answers what `create_run` would, the very same refusal for each thing it
/// refuses (an unknown SKU, a ceiling of nothing, code that is not in a volume, a name taken),
/// and creates nothing: no run, not even the volume its command names.
async fn validation_refuses_as_creation_and_creates_nothing(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let project = format!("{}-validate", ctx.prefix);
    let volume = format!("{}-validate-named", ctx.prefix);
    let mut good = quick_run(ctx, None);
    good.project = project.clone();
    good.command = format!("ls /mnt/{volume} >/dev/null 2>&1; {}", ctx.command);
    cp.validate_run(&good)
        .await
        .map_err(api("validate a run create_run takes"))?;

    let taken = cp
        .create_run(
            &key(ctx, "validate-taken"),
            &quick_run(ctx, Some(format!("{}-validate-taken", ctx.prefix))),
        )
        .await
        .map_err(api("create_run"))?;
    let refused = |what: &'static str, change: &dyn Fn(&mut CreateRun)| {
        let mut body = good.clone();
        change(&mut body);
        (what, body)
    };
    let cases = [
        refused("an unknown SKU", &|b| b.sku = "z999".to_owned()),
        refused("a ceiling of nothing", &|b| b.max_spend_cents = Some(0)),
        refused("code that is not in a volume", &|b| {
            b.code = Some(div_api::CodeRef {
                volume: format!("{}-no-such-volume", ctx.prefix),
                path: "code/0000".to_owned(),
                extra: Default::default(),
            });
        }),
        refused("a name taken", &|b| b.name = Some(taken.name.clone())),
    ];
    for (what, body) in &cases {
        let validated = match cp.validate_run(body).await {
            Ok(()) => return Err(format!("validate {what}: taken, but create_run refuses it")),
            Err(e) => e,
        };
        let created = expect_error(
            &format!("create {what}"),
            cp.create_run(&key(ctx, "validate"), body).await,
            validated.kind(),
            validated.code(),
        )?;
        ensure!(
            created.message() == validated.message() && created.details() == validated.details(),
            "{what}: validate_run says `{}` {}, create_run `{}` {}",
            validated.message(),
            validated.details(),
            created.message(),
            created.details()
        );
    }
    cp.stop_run(&taken.id).await.map_err(api("stop_run"))?;

    let page = cp
        .list_runs(&ListRuns {
            project: Some(project.clone()),
            ..ListRuns::default()
        })
        .await
        .map_err(api("list_runs"))?;
    ensure!(
        page.runs.is_empty(),
        "validating placed runs in `{project}`: {:?}",
        page.runs.iter().map(|r| &r.id).collect::<Vec<_>>()
    );
    let volumes = cp.list_volumes().await.map_err(api("list_volumes"))?;
    ensure!(
        !volumes.iter().any(|v| v.name == volume),
        "validating made the volume `{volume}` its command names"
    );
    Ok(())
}

/// Names `div` would never send: markup, `..`, a `/`, capitals, 300 characters.
fn names_div_never_sends() -> [String; 5] {
    [
        "<img id=x src=x>".to_owned(),
        "../../etc".to_owned(),
        "a/b".to_owned(),
        "UPPER".to_owned(),
        "a".repeat(300),
    ]
}

/// A project, run or volume name outside its rule is refused (422 `invalid`, the message
/// saying the rule: "1 to 63 …") by every route that takes one, and nothing is made: a run's
/// project, its name and its code's volume, whether it is placed or only validated; every
/// volume route; the runs of a project.
async fn names_outside_their_rules_refused(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let refused = |what: String, result: Result<(), ApiError>| -> CheckResult {
        let e = expect_error(&what, result, ErrorKind::Refused, Some("invalid"))?;
        ensure!(
            e.message().contains("63"),
            "{what}: the refusal does not say the rule: {}",
            e.message()
        );
        Ok(())
    };
    let data = Bytes::from_static(b"x\n");
    let h = hash(&data);
    let tree = CommitTree {
        path: "code/0000".to_owned(),
        entries: vec![TreeEntry {
            path: "a.txt".to_owned(),
            kind: EntryKind::File,
            executable: false,
            size: 2,
            hash: Some(h.clone()),
            target: None,
        }],
    };
    for bad in names_div_never_sends() {
        let mut run = quick_run(ctx, None);
        run.project = bad.clone();
        refused(
            format!("place a run in the project `{bad}`"),
            cp.create_run(&key(ctx, "names"), &run).await.map(drop),
        )?;
        refused(
            format!("validate a run in the project `{bad}`"),
            cp.validate_run(&run).await,
        )?;
        let mut run = quick_run(ctx, Some(bad.clone()));
        refused(
            format!("place a run named `{bad}`"),
            cp.create_run(&key(ctx, "names"), &run).await.map(drop),
        )?;
        run.name = None;
        run.code = Some(div_api::CodeRef {
            volume: bad.clone(),
            path: "code/0000".to_owned(),
            extra: Default::default(),
        });
        refused(
            format!("place a run of code in the volume `{bad}`"),
            cp.create_run(&key(ctx, "names"), &run).await.map(drop),
        )?;
        refused(
            format!("list the runs of the project `{bad}`"),
            cp.list_runs(&ListRuns {
                project: Some(bad.clone()),
                ..ListRuns::default()
            })
            .await
            .map(drop),
        )?;
        let v = bad.as_str();
        refused(
            format!("make the volume `{v}`"),
            cp.create_volume(v).await.map(drop),
        )?;
        refused(
            format!("ask what the volume `{v}` lacks"),
            cp.missing_blobs(v, std::slice::from_ref(&h))
                .await
                .map(drop),
        )?;
        refused(
            format!("upload a blob to the volume `{v}`"),
            cp.upload_blob(v, &h, 0, 2, BlobSource::Bytes(data.clone()))
                .await,
        )?;
        refused(
            format!("commit a tree to the volume `{v}`"),
            cp.commit_tree(v, &tree).await.map(drop),
        )?;
        // A control plane that stages no trees says `None` to any volume.
        match cp.stage_tree(v, &tree).await {
            Ok(None) => {}
            other => refused(format!("stage a tree in the volume `{v}`"), other.map(drop))?,
        }
        refused(
            format!("list the volume `{v}`"),
            cp.list_tree(v, "").await.map(drop),
        )?;
        let mut sink = Vec::new();
        refused(
            format!("read a file of the volume `{v}`"),
            cp.read_file(v, "a.txt", &mut sink).await.map(drop),
        )?;
        refused(
            format!("delete the volume `{v}`"),
            cp.delete_volume(v).await,
        )?;
    }
    let bad = names_div_never_sends();
    let page = cp
        .list_runs(&ListRuns {
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .map_err(api("list_runs"))?;
    ensure!(
        !page
            .runs
            .iter()
            .any(|r| bad.contains(&r.project) || bad.contains(&r.name)),
        "a refused name placed a run"
    );
    let volumes = cp.list_volumes().await.map_err(api("list_volumes"))?;
    ensure!(
        !volumes.iter().any(|v| bad.contains(&v.name)),
        "a refused name made a volume"
    );
    Ok(())
}

/// Place a quick run and wait for it to end (stopping it when runs do not execute).
async fn ended_run(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
    what: &str,
) -> Result<Run, String> {
    let placed = cp
        .create_run(&key(ctx, what), &quick_run(ctx, None))
        .await
        .map_err(api("create_run"))?;
    if !ctx.runs_execute {
        return cp.stop_run(&placed.id).await.map_err(api("stop_run"));
    }
    let deadline = tokio::time::Instant::now() + ctx.run_deadline;
    loop {
        let run = cp.get_run(&placed.id).await.map_err(api("get_run"))?;
        if run.status.is_terminal() {
            return Ok(run);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "run `{}` still `{}` after {:?}",
                run.id, run.status, ctx.run_deadline
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn stop_ended_run_unchanged(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let ended = ended_run(cp, ctx, "stop").await?;
    let stopped = cp
        .stop_run(&ended.id)
        .await
        .map_err(api("stop an ended run"))?;
    ensure!(
        stopped.status == ended.status
            && stopped.exit_code == ended.exit_code
            && stopped.ended_at == ended.ended_at
            && stopped.spent_cents == ended.spent_cents,
        "stopping an ended run changed it: {ended:?} became {stopped:?}"
    );
    Ok(())
}

/// Read a whole log stream: its bytes, and the run from its `End`.
async fn read_log(
    cp: &dyn ControlPlane,
    run: &str,
    offset: u64,
    follow: bool,
) -> Result<(Vec<u8>, Option<Run>), String> {
    let mut stream = cp.log(run, offset, follow).await.map_err(api("log"))?;
    let mut bytes = Vec::new();
    let mut end = None;
    while let Some(event) = stream.next().await {
        match event.map_err(api("log stream"))? {
            LogEvent::Chunk { offset: at, data } => {
                ensure!(
                    at == offset + bytes.len() as u64,
                    "a chunk at {at}, expected {}",
                    offset + bytes.len() as u64
                );
                bytes.extend_from_slice(&data);
            }
            LogEvent::Tail { .. } => return Err("an ended run's log ended with `tail`".to_owned()),
            LogEvent::End(run) => end = Some(*run),
        }
    }
    Ok((bytes, end))
}

async fn log_of_ended_run(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> CheckResult {
    let ended = ended_run(cp, ctx, "log").await?;
    let (all, end) = read_log(cp, &ended.id, 0, true).await?;
    let end = end.ok_or("the log stream ended without `end`")?;
    ensure!(end.id == ended.id, "`end` carries run `{}`", end.id);
    ensure!(
        end.status.is_terminal(),
        "`end` carries a `{}` run",
        end.status
    );
    if ctx.runs_execute {
        ensure!(
            all.windows(ctx.expected_output.len().max(1))
                .any(|w| w == ctx.expected_output.as_slice()),
            "the log {:?} does not hold {:?}",
            String::from_utf8_lossy(&all),
            String::from_utf8_lossy(&ctx.expected_output)
        );
        ensure!(
            end.exit_code == Some(ctx.expected_exit_code),
            "the run exited {:?}, not {}",
            end.exit_code,
            ctx.expected_exit_code
        );
    }
    let (again, end) = read_log(cp, &ended.id, 0, false).await?;
    ensure!(again == all, "a second read of the log differs");
    ensure!(
        end.is_some(),
        "without follow, an ended run's log still ends with `end`"
    );
    let middle = all.len() as u64 / 2;
    let (rest, _) = read_log(cp, &ended.id, middle, false).await?;
    ensure!(
        rest == all[middle as usize..],
        "the log from byte {middle} is not the rest of it"
    );
    Ok(())
}
