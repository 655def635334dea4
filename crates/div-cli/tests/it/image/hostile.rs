//! A run that tries to write its image or the cache, and an image that is a decompression
//! bomb or lies about its layers: refused, while a run beside them finishes whole.

use div_image::Credentials;
use div_test_support::image as image_support;
use div_test_support::image::{E, Registry, file, push};

use super::{Gate, OnSmallDisk, image_of, listing, project, registry, zero_bomb};
use crate::support::text;

#[test]
fn a_hostile_run_cannot_write_its_image_or_the_cache() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    // Pull it (a first run), then take the cache's listing.
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cache = local.home().join("images");
    let before = listing(&cache);
    let home = local.home();
    let attack = format!(
        "for f in /bin/busybox /etc/os-release /etc/passwd /new /work/new /etc/resolv.conf; do \
           (echo pwned > $f) 2>/dev/null && echo \"WROTE $f\"; done; \
         rm -f /bin/sh 2>/dev/null && echo 'REMOVED /bin/sh'; \
         mkdir /etc/x 2>/dev/null && echo 'MADE /etc/x'; \
         ls {home} 2>/dev/null && echo 'SAW THE STATE DIRECTORY'; \
         ls {cache} 2>/dev/null && echo 'SAW THE CACHE'; \
         echo done",
        home = home.display(),
        cache = cache.display(),
    );
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "--", &attack]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("\ndone\n"), "{stdout}");
    for bad in ["WROTE", "REMOVED", "MADE", "SAW THE"] {
        assert!(!stdout.contains(bad), "{stdout}");
    }
    assert_eq!(listing(&cache), before, "the cache changed");
    let os_release =
        std::fs::read_to_string(local.rootfs()[0].join("etc/os-release")).expect("os-release");
    assert!(os_release.starts_with("ID=divtest"), "{os_release}");
}

#[test]
fn a_decompression_bomb_and_a_wrong_diff_id_are_refused_while_a_run_beside_them_finishes_whole() {
    use div_image::Digest;
    let Some(reg) = Registry::start(None) else {
        return;
    };
    // The state directory (and so the image cache and every run's files) on a 64 MiB disk:
    // the bomb's 256 MiB of zeros would fill it.
    let Some(disk) = OnSmallDisk::mount(project(), 64) else {
        return;
    };
    let local = &disk.local;
    let bomb = zero_bomb(256);
    let bomb_layer = Digest::sha256_of(&bomb);
    let honest = image_support::tar(&[E::Dir("etc", 0o755), file("etc/x", "x")]);
    let honest_gz = image_support::gzip(&honest);
    let wrong = Digest::sha256_of(b"another stream");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let bomb_image = image_of(&[(bomb, Digest::sha256_of(b"never reached"))]);
        push(
            &reg.addr,
            "attacks/bomb",
            "1",
            &bomb_image,
            &Credentials::none(),
        )
        .await;
        let diff_image = image_of(&[(honest_gz.clone(), wrong.clone())]);
        push(
            &reg.addr,
            "attacks/diff",
            "1",
            &diff_image,
            &Credentials::none(),
        )
        .await;
    });

    // The run beside: a log line every tick until the test opens its gate (at the end, or
    // when it fails: the run never outlives the test).
    let gate = Gate(local.home().join("volumes/gate"));
    let out = local.div(&[
        "run",
        "--detach",
        "--gpu",
        "cpu",
        "--no-upload",
        "--",
        // (Bounded by itself too: 2400 ticks, so a gate never seen fails the test, not hangs it.)
        "n=0; until [ -e /mnt/gate/open ] || [ $n -ge 2400 ]; do n=$((n+1)); echo \"tick $n\"; sleep 0.05; done; \
         [ -e /mnt/gate/open ] && echo \"ticked $n times\"",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let name = text(&out.stdout).trim().to_owned();
    // It is going: its first line is in its log.
    let runs = local.home().join("runs");
    let patience = std::time::Duration::from_secs(120);
    div_test_support::wait_until("the run's first line in its log", patience, || {
        let logged = std::fs::read_dir(&runs)
            .map(|d| {
                d.flatten().any(|e| {
                    std::fs::read_to_string(e.path().join("log"))
                        .is_ok_and(|l| l.contains("tick 1\n"))
                })
            })
            .unwrap_or(false);
        if logged { Ok(()) } else { Err("") }
    });

    let bomb_ref = format!("{}/attacks/bomb:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &bomb_ref,
        "--no-upload",
        "--",
        "echo ran",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "caused by: the image cannot be used: layer 1 of 1 (`{bomb_layer}`) of `{bomb_ref}` unpacks past the free space of the image cache's filesystem ("
        )) && stderr.contains("kept free for everything else there: refused, nothing of the image kept"),
        "{stderr}"
    );

    let diff_ref = format!("{}/attacks/diff:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &diff_ref,
        "--no-upload",
        "--",
        "echo ran",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "caused by: the image cannot be used: layer 1 of 1 (`{}`) of `{diff_ref}` unpacks to `{}`, but the image's config says its diff_id is `{wrong}`: refused, nothing of the image kept",
            Digest::sha256_of(&honest_gz),
            Digest::sha256_of(&honest),
        )),
        "{stderr}"
    );
    // Nothing of either is kept as unpacked.
    let cache = local.home().join("images");
    assert_eq!(
        std::fs::read_dir(cache.join("tmp")).expect("tmp").count(),
        0,
        "{:?}",
        listing(&cache.join("tmp"))
    );
    assert!(local.rootfs().is_empty(), "{:?}", local.rootfs());

    // The run beside goes on to its end with every line it wrote.
    gate.open();
    let out = local.div(&["logs", "--follow", &name]);
    let log = text(&out.stdout);
    assert!(out.status.success(), "{log}\n{}", text(&out.stderr));
    let ticks: u64 = log
        .lines()
        .find_map(|l| {
            l.strip_prefix("ticked ")?
                .strip_suffix(" times")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no last line in {log}"));
    for n in 1..=ticks {
        assert_eq!(
            log.matches(&format!("tick {n}\n")).count(),
            1,
            "tick {n} in {log}"
        );
    }
    // And the next run runs.
    let out = local.div(&["run", "--gpu", "cpu", "--no-upload", "--", "echo after"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("after\n"),
        "{}",
        text(&out.stdout)
    );
}
