//! What a run in an image gets: the image's user, its Python (or python3, or a word that it
//! has none), its PATH and env through a login profile, its working dir.

use div_image::Credentials;
use div_test_support::image::{E, Registry, file, push};
use serde_json::json;

use super::{
    DEBIAN_LIKE_PROFILE, build_with, busybox_layer, entrypoint, merged, project_code, python_layer,
    registry, registry_with, rootfs, run_ok, run_to_end, script, start,
};

#[tokio::test(flavor = "multi_thread")]
async fn the_image_s_user_is_who_the_command_runs_as() {
    let Some(reg) = registry().await else { return };
    let server = start().await;
    let image = format!("{}/tools/busybox:user", reg.addr);
    let log = run_ok(
        &server,
        "echo \"uid=$(id -u) gid=$(id -g) pwd=$(pwd)\"; touch /tmp/divergent/mine && echo wrote",
        json!({"image": image}),
    )
    .await;
    // No WorkingDir: a run that shipped nothing starts at `/`.
    assert!(log.contains("uid=1234 gid=2345 pwd=/\n"), "{log}");
    assert!(log.contains("\nwrote\n"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_py_entrypoint_in_an_image_without_python_says_so_last() {
    let Some(reg) = registry().await else { return };
    let server = start().await;
    let image = format!("{}/tools/busybox:1", reg.addr);
    let code = project_code(&server).await;
    let (ended, log) = run_to_end(
        &server,
        "unused",
        merged(
            entrypoint("train.py::main"),
            json!({"image": image, "code": code}),
        ),
    )
    .await;
    assert_eq!(ended["status"], "failed", "{ended}\n{log}");
    let said = format!(
        "div: the image {image} has no `python` on its PATH, and the entrypoint train.py::main is Python"
    );
    assert!(log.contains(&said), "{log}");
    // Its last words: the run's reason.
    assert!(
        ended["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with(&said)),
        "{ended}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_train_py_run_with_checks_in_a_python_image() {
    let Some(layer) = python_layer() else { return };
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let image = build_with(
        &[layer],
        json!({"Env": ["PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"]}),
        false,
    );
    push(&reg.addr, "tools/python", "1", &image, &Credentials::none()).await;
    let server = start().await;
    let code = server
        .code(&[(
            "train.py",
            "import json, os, sys\n\ndef main():\n    print('python', sys.version.split()[0], 'at', sys.executable)\n    print('usr' in os.listdir('/'), os.path.exists('/var'))\n    json.dump({'metrics': {'accuracy': 0.93}}, open(os.environ['DIVERGENT_RESULT_PATH'], 'w'))\n",
        )])
        .await;
    let name = format!("{}/tools/python:1", reg.addr);
    let (status, run) = server
        .create_run(
            "unused",
            merged(
                entrypoint("train.py::main"),
                json!({"image": name, "code": code, "checks": ["metrics.accuracy>=0.9"]}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    let log = server.log_text(id).await;
    println!("{log}");
    assert_eq!(ended["status"], "succeeded", "{ended}\n{log}");
    assert!(
        log.contains(&format!("div: image {name} (sha256:")),
        "{log}"
    );
    assert!(log.contains("python 3."), "{log}");
    // The image's tree: /usr is there, the host's /var is not.
    assert!(log.contains("True False"), "{log}");
    assert!(
        log.contains("check passed: metrics.accuracy >= 0.9 (found 0.93)"),
        "the check's verdict: {log}"
    );
    let (_, result) = server
        .request("GET", &format!("/v1/runs/{id}/result"), None)
        .await;
    let verdicts = result["verdicts"].as_array().cloned().unwrap_or_default();
    assert_eq!(verdicts.len(), 1, "{result}");
    assert_eq!(verdicts[0]["outcome"], "passed", "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_s_path_and_env_survive_a_profile_that_resets_them() {
    let Some(mut layer) = busybox_layer() else {
        return;
    };
    layer.extend([
        E::Symlink("bin/which", "busybox"),
        file("etc/profile", DEBIAN_LIKE_PROFILE),
        E::Dir("opt", 0o755),
        E::Dir("opt/venv", 0o755),
        E::Dir("opt/venv/bin", 0o755),
        script("opt/venv/bin/marker", "echo \"marker from the venv\""),
    ]);
    let path = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    let Some(reg) = registry_with(vec![(
        "tools/venv",
        "1",
        vec![layer],
        json!({"Env": [format!("PATH={path}"), "GREETING=from the image"]}),
    )])
    .await
    else {
        return;
    };
    let server = start().await;
    let image = format!("{}/tools/venv:1", reg.addr);
    let log = run_ok(
        &server,
        "echo \"path=$PATH\"; which marker; marker; echo \"greeting=$GREETING mine=$MINE profile=$PROFILE_RAN\"; env | grep -c __div_ || true",
        json!({"image": image, "env": [{"key": "MINE", "value": "from --env"}]}),
    )
    .await;
    // The image's PATH, whatever the profile set; the profile still ran (`sh -lc`).
    assert!(log.contains(&format!("\npath={path}\n")), "{log}");
    assert!(
        log.contains("\n/opt/venv/bin/marker\nmarker from the venv\n"),
        "{log}"
    );
    assert!(
        log.contains("\ngreeting=from the image mine=from --env profile=yes\n"),
        "{log}"
    );
    // div's copies are gone before the command starts.
    assert!(log.contains("\n0\n"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_py_entrypoint_runs_with_python3_where_the_image_has_no_python() {
    let Some(layer) = busybox_layer() else {
        return;
    };
    let python3 = vec![
        E::Dir("usr", 0o755),
        E::Dir("usr/bin", 0o755),
        script("usr/bin/python3", "echo \"fake python3 got: $*\""),
    ];
    let mut both = python3.clone();
    both.push(script("usr/bin/python", "echo \"fake python got: $*\""));
    let config = json!({"Env": ["PATH=/usr/bin:/bin"]});
    let Some(reg) = registry_with(vec![
        (
            "tools/py",
            "3only",
            vec![layer.clone(), python3],
            config.clone(),
        ),
        ("tools/py", "both", vec![layer, both], config),
    ])
    .await
    else {
        return;
    };
    let server = start().await;
    let code = project_code(&server).await;
    let only = format!("{}/tools/py:3only", reg.addr);
    for (typed, command) in [
        ("train.py::main", "-u -c 'from train import main; main()'"),
        ("train.py", "-u train.py"),
    ] {
        let log = run_ok(
            &server,
            "unused",
            merged(entrypoint(typed), json!({"image": only, "code": code})),
        )
        .await;
        let said = format!(
            "div: the image {only} has no `python` on its PATH, only `python3`: the entrypoint {typed} runs as `python3 {command}`"
        );
        let said_at = log.find(&said).unwrap_or_else(|| panic!("said: {log}"));
        let ran_at = log
            .find(&format!(
                "fake python3 got: {}\n",
                command.replace('\'', "")
            ))
            .unwrap_or_else(|| panic!("ran: {log}"));
        assert!(said_at < ran_at, "said in the first lines: {log}");
    }
    // A command the user wrote is never rewritten: its last line says what the image has.
    let (ended, log) = run_to_end(
        &server,
        "python train.py",
        json!({"image": only, "code": code}),
    )
    .await;
    assert_eq!(ended["status"], "failed", "{ended}\n{log}");
    let said = format!(
        "div: the image {only} has no `python` on its PATH, and the entrypoint python train.py is Python: it has `python3`: write that in the command"
    );
    assert!(log.contains(&said), "{log}");
    assert!(
        ended["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with(&said)),
        "{ended}"
    );
    // Where `python` is there, it is what runs, and nothing is said.
    let both = format!("{}/tools/py:both", reg.addr);
    let log = run_ok(
        &server,
        "unused",
        merged(entrypoint("train.py"), json!({"image": both, "code": code})),
    )
    .await;
    assert!(log.contains("fake python got: -u train.py\n"), "{log}");
    assert!(!log.contains("python3"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_working_dir_the_image_lacks_is_made_for_the_run_and_never_in_the_cache() {
    let Some(mut layer) = busybox_layer() else {
        return;
    };
    layer.extend([
        E::Dir("usr", 0o755),
        E::Dir("usr/src", 0o755),
        file("usr/src/kept", "the image's\n"),
        file("file", "not a directory\n"),
    ]);
    let Some(reg) = registry_with(vec![
        (
            "tools/wd",
            "top",
            vec![layer.clone()],
            json!({"Env": ["PATH=/bin"], "WorkingDir": "/app/sub"}),
        ),
        (
            "tools/wd",
            "deep",
            vec![layer.clone()],
            json!({"Env": ["PATH=/bin"], "WorkingDir": "/usr/src/app"}),
        ),
        (
            "tools/wd",
            "file",
            vec![layer],
            json!({"Env": ["PATH=/bin"], "WorkingDir": "/file/app"}),
        ),
    ])
    .await
    else {
        return;
    };
    let server = start().await;
    for (tag, dir) in [("top", "/app/sub"), ("deep", "/usr/src/app")] {
        let image = format!("{}/tools/wd:{tag}", reg.addr);
        let log = run_ok(
            &server,
            "pwd; touch here && echo wrote; ls; cat /usr/src/kept; (echo x > /usr/src/new) 2>/dev/null && echo WROTE THE IMAGE; ls /usr/src",
            json!({"image": image}),
        )
        .await;
        assert!(
            log.contains(&format!(
                "div: the image has no {dir}, its WorkingDir: made for this run"
            )),
            "{log}"
        );
        assert!(
            log.contains(&format!("\n{dir}\nwrote\nhere\nthe image's\n")),
            "{tag}: {log}"
        );
        assert!(!log.contains("WROTE THE IMAGE"), "{tag}: {log}");
        // The rest of the image as it was: `/usr/src` keeps its entries.
        assert!(log.contains("kept"), "{tag}: {log}");
    }
    // Nothing was made in the cached trees.
    let trees = rootfs(&server.home);
    assert_eq!(trees.len(), 2, "the two images run: {trees:?}");
    for tree in trees {
        assert!(!tree.join("app").exists(), "{tree:?}");
        assert!(!tree.join("usr/src/app").exists(), "{tree:?}");
    }
    // A WorkingDir that cannot be a directory: the run fails, saying why.
    let image = format!("{}/tools/wd:file", reg.addr);
    let (ended, log) = run_to_end(&server, "pwd", json!({"image": image})).await;
    assert_eq!(ended["status"], "failed", "{ended}\n{log}");
    let said = "the image's WorkingDir `/file/app` cannot be where the run starts: `/file` is a file in the image, not a directory";
    assert!(
        log.contains(said) || ended["reason"].as_str().is_some_and(|r| r.contains(said)),
        "{ended}\n{log}"
    );
}
