//! Pulls: from a loopback registry, refused when the image does not exist, the named default
//! never replaced, a moved tag pulled again as `--pull` says; the cache listed and pruned.

use std::path::Path;

use div_image::Credentials;
use div_test_support::image::{Built, Registry, file, push};

use super::{build, busybox_layer, first_line_digest, project, refusing_proxy, registry};
use crate::support::text;

#[test]
fn a_run_in_an_image_pulled_from_a_loopback_registry_has_the_image_as_its_root() {
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
        "cat /etc/os-release; pwd; echo \"$GREETING\"; echo \"id=$DIVERGENT_RUN_ID\"; id -u; ls /",
    ]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let trees = local.rootfs();
    assert_eq!(trees.len(), 1, "one image unpacked: {trees:?}");
    // The pull's progress, before the header line.
    let pulling = stderr
        .find(&format!("pulling {image}: 1 layer, "))
        .expect("a pulling line");
    let ready = stderr
        .find(&format!("image {image} ready (sha256:"))
        .expect("a ready line");
    let header = stderr.find("  CPU  ").expect("the header line");
    assert!(pulling < ready && ready < header, "{stderr}");
    let digest = trees[0]
        .parent()
        .and_then(Path::file_name)
        .map(|h| format!("sha256:{}", h.to_string_lossy()))
        .expect("a digest");
    // The first log line names the image and its digest.
    assert!(
        stdout.contains(&format!("div: image {image} ({digest})")),
        "{stdout}"
    );
    // `/` is the image's: its os-release, its working directory, its Env under runtime.md's.
    assert!(stdout.contains("ID=divtest"), "{stdout}");
    assert!(stdout.contains("\n/work\n"), "{stdout}");
    assert!(stdout.contains("hello from the image"), "{stdout}");
    assert!(stdout.contains("id=r_"), "runtime.md's rows win: {stdout}");
    assert!(!stdout.contains("the image's, overridden"), "{stdout}");
    assert!(stdout.contains("\n0\n"), "root by default: {stdout}");
    let listed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "0")
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with(' ') && !l.contains(':'))
        .collect();
    assert!(
        listed.contains(&"bin") && listed.contains(&"work"),
        "{listed:?}"
    );
    // Nothing of this machine's own system: no /usr, /var, /home.
    for host_only in ["usr", "var", "home", "lib"] {
        assert!(!listed.contains(&host_only), "{host_only}: {listed:?}");
    }
}

#[test]
fn an_image_that_does_not_exist_is_refused_and_no_run_is_created() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/nothing:1", reg.addr);
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", "echo ran"]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "the registry `{}` has no image `{image}`",
            reg.addr
        )),
        "{stderr}"
    );
    let ls = local.div(&["ls", "--json"]);
    let listed = text(&ls.stdout);
    assert!(!listed.contains("\"id\""), "no run: {listed}");
    let runs = local.home().join("runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).expect("runs").next().is_none(),
        "a run directory was left"
    );
}

#[test]
fn an_explicitly_named_default_image_is_pulled_never_replaced() {
    // Every HTTPS request the control plane makes goes to a proxy that records and refuses
    // it: a pull of the default image reaches for Docker Hub, and fails, offline.
    let (proxy, seen) = refusing_proxy();
    let env = [
        ("HTTPS_PROXY", proxy.as_str()),
        ("https_proxy", proxy.as_str()),
        ("NO_PROXY", "127.0.0.1,localhost"),
    ];
    let local = project();
    let image = "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime";

    // Named, the default image is pulled like any other (the server's setting is `host`,
    // out of the box): it cannot be reached, so the run is refused before it exists.
    let out = local.div_with(
        &[
            "run",
            "--gpu",
            "cpu",
            "--image",
            image,
            "--no-upload",
            "--",
            "echo ran",
        ],
        &env,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "cannot reach the registry `docker.io` for `docker.io/{image}`"
        )),
        "{stderr}"
    );
    let asked = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        !asked.is_empty()
            && asked
                .iter()
                .all(|l| l.starts_with("CONNECT ") && l.contains("docker.io:443")),
        "the pull went to Docker Hub, through the proxy: {asked:?}"
    );
    let ls = local.div_with(&["ls", "--json"], &env);
    assert!(
        !text(&ls.stdout).contains("\"id\""),
        "no run: {}",
        text(&ls.stdout)
    );
    let runs = local.home().join("runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).expect("runs").next().is_none(),
        "a run directory was left"
    );

    // Unnamed, this machine's own system stands in for it, offline, and the run's first log
    // line (which `div run` prints) says so; the run's record names the default image.
    let before = seen.lock().unwrap_or_else(|e| e.into_inner()).len();
    let out = local.div_with(
        &[
            "run",
            "--gpu",
            "cpu",
            "--no-upload",
            "--json",
            "--",
            "echo ran",
        ],
        &env,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "\ndiv: no image pulled: this machine's own system stands in for {image} (DIVERGENT_DEFAULT_IMAGE=host; set it to pull to run in the image itself)\nran\n"
        )),
        "{stderr}"
    );
    let run: serde_json::Value = serde_json::from_str(&stdout).expect("the run as JSON");
    assert_eq!(run["image"], image, "{run}");
    assert_eq!(
        seen.lock().unwrap_or_else(|e| e.into_inner()).len(),
        before,
        "nothing was pulled"
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

#[test]
fn a_tag_that_moved_is_pulled_again_as_pull_says() {
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

    let (stdout, _) = run(None);
    assert!(stdout.contains("\nimage A\n"), "{stdout}");
    assert_eq!(
        first_line_digest(&stdout, &image).as_deref(),
        Some(a_digest.as_str())
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
        let (stdout, stderr) = run(pull);
        assert!(stdout.contains("\nimage A\n"), "{pull:?}: {stdout}");
        assert_eq!(
            first_line_digest(&stdout, &image).as_deref(),
            Some(a_digest.as_str())
        );
        assert!(
            stderr.contains(&format!(
                "image {image}: {a_digest} from the cache, as the tag resolved at "
            )) && stderr.contains("(--pull always looks for a newer one)"),
            "{pull:?}: {stderr}"
        );
        assert!(!stderr.contains("pulling "), "{stderr}");
    }
    let (stdout, stderr) = run(Some("always"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");
    assert_eq!(
        first_line_digest(&stdout, &image).as_deref(),
        Some(b_digest.as_str())
    );
    assert!(
        stderr.contains(&format!("pulling {image}: 2 layers, ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("image {image} ready ({b_digest})")),
        "{stderr}"
    );
    // From now on the tag names B in the cache too; asking again finds it unchanged.
    let (stdout, _) = run(Some("missing"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");
    let (stdout, stderr) = run(Some("always"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "image {image}: {b_digest}, as the registry has it now, already cached"
        )),
        "{stderr}"
    );
    let (stdout, _) = run(Some("never"));
    assert!(stdout.contains("\nimage B\n"), "{stdout}");

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

    // `--pull never` with nothing cached: refused before anything is created or shipped.
    let runs_before = std::fs::read_dir(local.home().join("runs"))
        .expect("runs")
        .count();
    let trees_before = local.rootfs();
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
    let runs_after = std::fs::read_dir(local.home().join("runs"))
        .expect("runs")
        .count();
    assert_eq!(runs_after, runs_before, "no run created");
    assert_eq!(local.rootfs(), trees_before, "nothing pulled");
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
