//! A run that tries to write its image or the cache, and an image that is a decompression
//! bomb or lies about its layers: refused, while a run beside them finishes whole.

use div_image::Credentials;
use div_test_support::image as image_support;
use div_test_support::image::{E, Registry, file, push};
use serde_json::json;

use super::{
    Gate, SmallDisk, image_of, listing, project_code, registry, rootfs, run_ok, runs_listed, start,
    zero_bomb,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_run_cannot_write_its_image_or_the_cache() {
    let Some(reg) = registry().await else { return };
    let server = start().await;
    let code = project_code(&server).await;
    let image = format!("{}/tools/busybox:1", reg.addr);
    // Pull it (a first run), then take the cache's listing.
    run_ok(&server, "true", json!({"image": image, "code": code})).await;
    let cache = server.home.join("images");
    let before = listing(&cache);
    let home = &server.home;
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
    let log = run_ok(&server, &attack, json!({"image": image, "code": code})).await;
    assert!(log.contains("\ndone\n"), "{log}");
    for bad in ["WROTE", "REMOVED", "MADE", "SAW THE"] {
        assert!(!log.contains(bad), "{log}");
    }
    assert_eq!(listing(&cache), before, "the cache changed");
    let os_release = std::fs::read_to_string(rootfs(&server.home)[0].join("etc/os-release"))
        .expect("os-release");
    assert!(os_release.starts_with("ID=divtest"), "{os_release}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decompression_bomb_and_a_wrong_diff_id_are_refused_while_a_run_beside_them_finishes_whole()
 {
    use div_image::Digest;
    let Some(reg) = Registry::start(None) else {
        return;
    };
    // The state directory (and so the image cache and every run's files) on a 64 MiB disk:
    // the bomb's 256 MiB of zeros would fill it.
    let Some(disk) = SmallDisk::mount(64) else {
        return;
    };
    let bomb = zero_bomb(256);
    let bomb_layer = Digest::sha256_of(&bomb);
    let honest = image_support::tar(&[E::Dir("etc", 0o755), file("etc/x", "x")]);
    let honest_gz = image_support::gzip(&honest);
    let wrong = Digest::sha256_of(b"another stream");
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
    let server = disk.start().await;

    // The run beside: a log line every tick until the test opens its gate (at the end, or
    // when it fails: the run never outlives the test), in its volume `gate` at /mnt/gate.
    let (status, volume) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "gate"})))
        .await;
    assert!(matches!(status, 200 | 201), "{status} {volume}");
    let gate = Gate(server.home.join("volumes/gate"));
    let (status, beside) = server
        .create_run(
            // (Bounded by itself too: 2400 ticks, so a gate never seen fails the test, not
            // hangs it.)
            "n=0; until [ -e /mnt/gate/open ] || [ $n -ge 2400 ]; do n=$((n+1)); echo \"tick $n\"; sleep 0.05; done; \
             [ -e /mnt/gate/open ] && echo \"ticked $n times\"",
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{beside}");
    let beside = beside["id"].as_str().expect("an id").to_owned();
    // It is going: its first line is in its log.
    server.wait_log(&beside, "tick 1\n").await;

    let bomb_ref = format!("{}/attacks/bomb:1", reg.addr);
    let (status, answer) = server
        .create_run("echo ran", json!({"image": bomb_ref}))
        .await;
    assert_ne!(status, 201, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "the image cannot be used: layer 1 of 1 (`{bomb_layer}`) of `{bomb_ref}` unpacks past the free space of the image cache's filesystem ("
        )) && message.contains("kept free for everything else there: refused, nothing of the image kept"),
        "{status} {answer}"
    );

    let diff_ref = format!("{}/attacks/diff:1", reg.addr);
    let (status, answer) = server
        .create_run("echo ran", json!({"image": diff_ref}))
        .await;
    assert_ne!(status, 201, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "the image cannot be used: layer 1 of 1 (`{}`) of `{diff_ref}` unpacks to `{}`, but the image's config says its diff_id is `{wrong}`: refused, nothing of the image kept",
            Digest::sha256_of(&honest_gz),
            Digest::sha256_of(&honest),
        )),
        "{status} {answer}"
    );
    // Neither made a run; nothing of either is kept as unpacked.
    let listed = runs_listed(&server).await;
    assert_eq!(listed.len(), 1, "the run beside alone: {listed:?}");
    let cache = server.home.join("images");
    assert_eq!(
        std::fs::read_dir(cache.join("tmp")).expect("tmp").count(),
        0,
        "{:?}",
        listing(&cache.join("tmp"))
    );
    assert!(
        rootfs(&server.home).is_empty(),
        "{:?}",
        rootfs(&server.home)
    );

    // The run beside goes on to its end with every line it wrote.
    gate.open();
    let ended = server.wait_end(&beside).await;
    let log = server.log_text(&beside).await;
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
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
    let log = run_ok(&server, "echo after", json!({})).await;
    assert!(log.contains("after\n"), "{log}");
}
