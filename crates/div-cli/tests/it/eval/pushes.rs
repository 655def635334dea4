//! What a push sends, pushes of one name at once, and a version kept while an eval run of it
//! is going.

use super::proxy::CountingProxy;
use super::{documented_digest, model_folder, project, push, version_line};
use crate::support::text;

/// `--from VOLUME/PATH` makes a version of what a run wrote without sending it again: the
/// bytes `div` sends through a counting proxy are the request's, while pushing the same files
/// from this machine sends them all. The version's digest is the files'.
#[test]
fn push_from_a_volume_sends_no_bytes() {
    let local = project();
    // A run writes a 2 MB checkpoint into the volume `ckpt`, which its command names.
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--",
        "mkdir -p /mnt/ckpt/best/sub && head -c 2000000 /dev/urandom > /mnt/ckpt/best/weights.bin && echo '{}' > /mnt/ckpt/best/sub/config.json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let proxy = CountingProxy::start(local.home().join("server.sock"));
    let through_proxy = |args: &[&str]| {
        local
            .command(args)
            .env("DIVERGENT_API_URL", &proxy.url)
            .output()
            .expect("div runs")
    };

    // The proxy sees what a push from here sends: 2 MB of fresh bytes, sent whole.
    let fresh = local.tmp.path().join("fresh");
    std::fs::create_dir_all(&fresh).expect("mkdir");
    let noise: Vec<u8> = (0..2_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(fresh.join("weights.bin"), noise).expect("write");
    let before = proxy.sent();
    version_line(&through_proxy(&[
        "models",
        "push",
        "fresh-model",
        &fresh.to_string_lossy(),
    ]));
    let from_here = proxy.sent() - before;
    assert!(
        from_here > 2_000_000,
        "pushing 2 MB from here sent only {from_here} bytes: the proxy does not see them"
    );

    let before = proxy.sent();
    let out = through_proxy(&["models", "push", "ckpt-model", "--from", "ckpt/best"]);
    let (version, digest) = version_line(&out);
    let from_volume = proxy.sent() - before;
    assert_eq!(version, "v1");
    assert!(
        from_volume < 16 * 1024,
        "--from sent {from_volume} bytes for a 2 MB checkpoint"
    );

    // The version is the run's files: fetched, they give its digest; pushed from here, they
    // send nothing the control plane holds.
    let fetched = local.tmp.path().join("fetched");
    let out = local.div(&["storage", "get", "ckpt/best", &fetched.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        documented_digest(&fetched),
        digest,
        "the version is the run's files"
    );
    let before = proxy.sent();
    let out = through_proxy(&["models", "push", "same-files", &fetched.to_string_lossy()]);
    assert_eq!(version_line(&out).1, digest);
    let again = proxy.sent() - before;
    assert!(
        again < 16 * 1024,
        "held blobs were sent again: {again} bytes"
    );

    let out = local.div(&["models", "show", "ckpt-model"]);
    assert!(
        text(&out.stdout).contains("ckpt/best"),
        "{}",
        text(&out.stdout)
    );
}

/// Pushes of one name at once, each of another tree: every push makes a whole version, whose
/// digest is one of the trees' (a mixed tree would match none), numbered one after another.
#[test]
fn pushes_at_once_make_whole_versions() {
    let local = project();
    let mut expected = Vec::new();
    let mut folders = Vec::new();
    for n in 0..6 {
        let dir = local.tmp.path().join(format!("tree{n}"));
        model_folder(&dir, &format!("weights-{n}"));
        std::fs::write(dir.join("big.bin"), vec![n as u8; 300_000]).expect("write");
        expected.push(documented_digest(&dir));
        folders.push(dir);
    }
    // Make the model first, so the pushes race on its versions, not on its first one.
    push(&local, "racy", &folders[0]);
    let children: Vec<_> = folders[1..]
        .iter()
        .map(|dir| {
            local
                .command(&["models", "push", "racy", &dir.to_string_lossy()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("div starts")
        })
        .collect();
    let mut pushed: Vec<(String, String)> = children
        .into_iter()
        .map(|c| version_line(&c.wait_with_output().expect("div ends")))
        .collect();
    pushed.sort();
    let numbers: Vec<&str> = pushed.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(numbers, ["v2", "v3", "v4", "v5", "v6"]);
    let mut digests: Vec<&String> = pushed.iter().map(|(_, d)| d).collect();
    digests.sort();
    let mut wanted: Vec<&String> = expected[1..].iter().collect();
    wanted.sort();
    assert_eq!(digests, wanted);

    let out = local.div(&["models", "show", "racy", "--json"]);
    let model: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kept: Vec<&str> = model["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["digest"].as_str())
        .collect();
    assert_eq!(kept.len(), 6, "{kept:?}");
    for d in &expected {
        assert!(kept.contains(&d.as_str()), "{d} kept in {kept:?}");
    }
}

/// A version's files cannot be written by a run, nor its volume removed; a version (or the
/// model) is not removed while an eval run of it is going, the refusal naming the run; once
/// the run ended it is, and its evaluation stays with its digest.
#[test]
fn a_version_in_use_is_kept_until_its_run_ends() {
    let local = project();
    let dir = local.tmp.path().join("m");
    model_folder(&dir, "weights-v1");
    let (_, digest) = push(&local, "held", &dir);
    // Neither a run nor `div storage rm` changes a version's files.
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--",
        "for f in /mnt/div-models/code/held/*/weights.bin; do echo evil > $f; done; touch /mnt/div-models/code/held/new",
    ]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "a run wrote into a model's version"
    );
    let out = local.div(&["storage", "rm", "div-models", "--yes"]);
    assert_eq!(out.status.code(), Some(200), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("keeps the versions of the models held"),
        "{}",
        text(&out.stderr)
    );
    let out = local.div(&["models", "show", "held", "--json"]);
    let model: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(model["versions"][0]["digest"], digest.as_str());
    let out = local.div(&[
        "eval",
        "held",
        "--gpu",
        "cpu",
        "--",
        "cat $DIVERGENT_MODEL_PATH/weights.bin; ls $DIVERGENT_MODEL_PATH",
    ]);
    assert!(
        text(&out.stdout).ends_with("\nweights-v1\nload.sh\nsub\nweights.bin\n"),
        "the version's files changed: {}",
        text(&out.stdout)
    );
    let out = local.div(&[
        "eval", "held:v1", "--gpu", "cpu", "--detach", "--name", "holder", "--", "sleep", "600",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for what in ["held:v1", "held"] {
        let out = local.div(&["models", "rm", what]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(200), "{what}: {stderr}");
        assert!(
            stderr.contains("holder"),
            "{what}: the refusal names the run: {stderr}"
        );
    }
    let out = local.div(&["stop", "holder"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = local.div(&["models", "rm", "held:v1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = local.div(&["eval", "held", "--gpu", "cpu", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(200),
        "no version is left to evaluate"
    );
    let out = local.div(&["evals", "--json"]);
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(records.len(), 2, "{}", text(&out.stdout));
    assert_eq!(records[0]["digest"], digest.as_str());
    assert_eq!(records[0]["run_name"], "holder");
    assert_eq!(records[0]["status"], "canceled");
}
