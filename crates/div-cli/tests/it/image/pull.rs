//! What `div run --image` and `div image` say: the pull's lines before the run's header, a
//! refusal and its exit code, where a moved tag's image came from (`--pull`), `--pull`'s
//! words; the cache listed and pruned. What the server does (the run's root, refusals, the
//! cache, the default image, `pull`) is div-server's `image::pull`.

use std::path::Path;

use div_image::Credentials;
use div_test_support::image::{Built, Registry, file, push};

use super::{build, busybox_layer, project, registry};
use crate::support::text;

/// `div run --image`: the pull's progress on stderr before the run's header, the run's log
/// (its first line naming the image and its digest) on stdout, a successful exit; an image
/// that does not exist: the registry's answer on stderr, a failing exit, nothing run.
#[test]
fn div_run_image_says_the_pull_before_the_header_and_a_refusal_as_it_fails() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--no-upload",
        "--",
        "cat /etc/os-release",
    ]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The pull's progress, before the header line.
    let pulling = stderr
        .find(&format!("pulling {image}: 1 layer, "))
        .expect("a pulling line");
    let ready = stderr
        .find(&format!("image {image} ready (sha256:"))
        .expect("a ready line");
    let header = stderr.find("  CPU  ").expect("the header line");
    assert!(pulling < ready && ready < header, "{stderr}");
    let trees = local.rootfs();
    assert_eq!(trees.len(), 1, "one image unpacked: {trees:?}");
    let digest = trees[0]
        .parent()
        .and_then(Path::file_name)
        .map(|h| format!("sha256:{}", h.to_string_lossy()))
        .expect("a digest");
    // The run's log, its first line naming the image and its digest.
    assert!(
        stderr.contains(&format!("image {image} ready ({digest})")),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("div: image {image} ({digest})\n")),
        "{stdout}"
    );
    assert!(stdout.contains("ID=divtest"), "{stdout}");

    let nothing = format!("{}/tools/nothing:1", reg.addr);
    let out = local.div(&["run", "--gpu", "cpu", "--image", &nothing, "--", "echo ran"]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "the registry `{}` has no image `{nothing}`",
            reg.addr
        )),
        "{stderr}"
    );
}

/// What `div run` says of a tag that moved at the registry, as `--pull` says to use it: the
/// cache's image and when its tag resolved, a pull, an image already cached; `div image ls`'s
/// rows for the tag and the image it no longer names; `--pull never` refused before anything
/// ships; a word `--pull` does not take.
#[test]
fn div_run_says_where_a_moved_tag_s_image_came_from() {
    let Some(layer) = busybox_layer() else {
        return;
    };
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let marked = |which: &str| {
        build(
            &[
                layer.clone(),
                vec![file("etc/which", &format!("image {which}\n"))],
            ],
            serde_json::json!({"Env": ["PATH=/bin"]}),
        )
    };
    let (a, b) = (marked("A"), marked("B"));
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(push(
        &reg.addr,
        "tools/moving",
        "t",
        &a,
        &Credentials::none(),
    ));
    rt.block_on(push(
        &reg.addr,
        "tools/other",
        "1",
        &a,
        &Credentials::none(),
    ));
    let local = project();
    let image = format!("{}/tools/moving:t", reg.addr);
    let run = |pull: Option<&str>| {
        let mut args = vec!["run", "--gpu", "cpu", "--image", &image];
        if let Some(pull) = pull {
            args.extend(["--pull", pull]);
        }
        args.extend(["--no-upload", "--", "cat /etc/which"]);
        let out = local.div(&args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{pull:?}: {stdout}\n{stderr}");
        (stdout, stderr)
    };
    let (a_digest, b_digest) = (a.manifest_digest.to_string(), b.manifest_digest.to_string());

    let (_, stderr) = run(None);
    assert!(
        stderr.contains(&format!("image {image} ready ({a_digest})")),
        "{stderr}"
    );

    // The tag moves to B at the registry.
    rt.block_on(push(
        &reg.addr,
        "tools/moving",
        "t",
        &b,
        &Credentials::none(),
    ));
    for pull in [None, Some("missing")] {
        let (_, stderr) = run(pull);
        assert!(
            stderr.contains(&format!(
                "image {image}: {a_digest} from the cache, as the tag resolved at "
            )) && stderr.contains("(--pull always looks for a newer one)"),
            "{pull:?}: {stderr}"
        );
        assert!(!stderr.contains("pulling "), "{stderr}");
    }
    let (_, stderr) = run(Some("always"));
    assert!(
        stderr.contains(&format!("pulling {image}: 2 layers, ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("image {image} ready ({b_digest})")),
        "{stderr}"
    );
    // Asked again, the registry has it unchanged.
    let (_, stderr) = run(Some("always"));
    assert!(
        stderr.contains(&format!(
            "image {image}: {b_digest}, as the registry has it now, already cached"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("pulling "), "{stderr}");

    // `div image ls`: the tag's digest and when it resolved; what each pull downloaded (B's
    // shared busybox layer came with A, so B downloaded less than its size).
    let out = local.div(&["image", "ls"]);
    let listed = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        listed.starts_with("IMAGE\tDIGEST\tRESOLVED\tDOWNLOADED\tUNPACKED\n"),
        "{listed}"
    );
    let row = |first: &str| -> Vec<String> {
        listed
            .lines()
            .find(|l| l.starts_with(&format!("{first}\t")))
            .unwrap_or_else(|| panic!("no row for {first}: {listed}"))
            .split('\t')
            .map(str::to_owned)
            .collect()
    };
    let size = |built: &Built, skip: &[div_image::Digest]| -> u64 {
        (built.manifest.len() + built.config.1.len()) as u64
            + built
                .blobs
                .iter()
                .filter(|(d, _)| !skip.contains(d))
                .map(|(_, bytes)| bytes.len() as u64)
                .sum::<u64>()
    };
    let tagged = row(&image);
    assert_eq!(tagged[1], b_digest[..19], "{listed}");
    assert!(
        tagged[2].ends_with('Z') && tagged[2].contains('T'),
        "{listed}"
    );
    let b_downloaded = size(&b, &a.layers);
    assert_eq!(tagged[3], div_spec::format_bytes(b_downloaded), "{listed}");
    assert!(b_downloaded < size(&b, &[]), "a shared layer");
    // A keeps no tag (`<none>`) and what it downloaded: all of it.
    let untagged = row("<none>");
    assert_eq!(untagged[1], a_digest[..19], "{listed}");
    assert_eq!(untagged[2], "-", "{listed}");
    assert_eq!(
        untagged[3],
        div_spec::format_bytes(size(&a, &[])),
        "{listed}"
    );

    // `--pull never` with nothing cached: refused before anything ships.
    let other = format!("{}/tools/other:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &other,
        "--pull",
        "never",
        "train.py::main",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "`{other}` is not in this machine's image cache, and --pull never forbids pulling it: pull it once with --pull missing (the default) or --pull always"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains('→'), "nothing shipped: {stderr}");
    // A word `--pull` does not take is refused by the parser, with the ones it does.
    let out = local.div(&[
        "run",
        "--image",
        &other,
        "--pull",
        "sometimes",
        "--",
        "true",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[possible values: missing, always, never]"),
        "{stderr}"
    );
}

#[test]
fn div_image_lists_the_cache_and_prunes_it() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    let out = local.div(&["image", "ls"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("0 images cached in"),
        "{}",
        text(&out.stderr)
    );
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = local.div(&["image", "ls"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("IMAGE\tDIGEST\tRESOLVED\tDOWNLOADED\tUNPACKED\n"),
        "{stdout}"
    );
    let row = stdout.lines().nth(1).unwrap_or_default();
    let fields: Vec<&str> = row.split('\t').collect();
    assert_eq!(fields.len(), 5, "{row}");
    assert_eq!(fields[0], image, "{row}");
    assert!(fields[1].starts_with("sha256:"), "{row}");
    // Pulled by this cache: when the tag resolved, and what came down (all of it here).
    assert!(fields[2].ends_with('Z'), "{row}");
    assert!(fields[3].ends_with('B'), "{row}");
    assert!(stderr.contains("1 image cached in"), "{stderr}");
    assert!(stderr.contains(" on disk ("), "{stderr}");

    let out = local.div(&["image", "prune"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("removed 1 image and 3 blobs"),
        "the manifest, config and layer: {stderr}"
    );
    assert!(local.rootfs().is_empty(), "{:?}", local.rootfs());
    let out = local.div(&["image", "ls"]);
    assert!(
        text(&out.stderr).contains("0 images cached in"),
        "{}",
        text(&out.stderr)
    );
}
