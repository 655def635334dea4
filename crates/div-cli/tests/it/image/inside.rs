//! What a run in an image gets: the image's user, its Python (or python3, or a word that it
//! has none), its PATH and env through a login profile, its working dir.

use div_image::Credentials;
use div_test_support::image::{E, Registry, file, push};

use super::{
    DEBIAN_LIKE_PROFILE, build_with, busybox_layer, project, python_layer, registry, registry_with,
    script,
};
use crate::support::text;

#[test]
fn the_image_s_user_is_who_the_command_runs_as() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:user", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--no-upload",
        "--",
        "echo \"uid=$(id -u) gid=$(id -g) pwd=$(pwd)\"; touch /tmp/divergent/mine && echo wrote",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // No WorkingDir: a run that shipped nothing starts at `/`.
    assert!(stdout.contains("uid=1234 gid=2345 pwd=/\n"), "{stdout}");
    assert!(stdout.contains("\nwrote\n"), "{stdout}");
}

#[test]
fn a_py_entrypoint_in_an_image_without_python_says_so_last() {
    let Some(reg) = registry() else { return };
    let local = project();
    let image = format!("{}/tools/busybox:1", reg.addr);
    let out = local.div(&["run", "--gpu", "cpu", "--image", &image, "train.py::main"]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains(&format!(
            "div: the image {image} has no `python` on its PATH, and the entrypoint train.py::main is Python"
        )),
        "{all}"
    );
}

#[test]
fn a_train_py_run_with_checks_in_a_python_image() {
    let Some(layer) = python_layer() else { return };
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let image = build_with(
        &[layer],
        serde_json::json!({"Env": ["PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"]}),
        false,
    );
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(push(
            &reg.addr,
            "tools/python",
            "1",
            &image,
            &Credentials::none(),
        ));
    let local = project();
    std::fs::write(
        local.tmp.path().join("project/train.py"),
        "import json, os, sys\n\ndef main():\n    print('python', sys.version.split()[0], 'at', sys.executable)\n    print('usr' in os.listdir('/'), os.path.exists('/var'))\n    json.dump({'metrics': {'accuracy': 0.93}}, open(os.environ['DIVERGENT_RESULT_PATH'], 'w'))\n",
    )
    .expect("write train.py");
    let name = format!("{}/tools/python:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &name,
        "train.py::main",
        "--check",
        "metrics.accuracy>=0.9",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("div: image {name} (sha256:")),
        "{stdout}"
    );
    assert!(stdout.contains("python 3."), "{stdout}");
    // The image's tree: /usr is there, the host's /var is not.
    assert!(stdout.contains("True False"), "{stdout}");
    assert!(
        stdout.contains("check passed: metrics.accuracy >= 0.9 (found 0.93)"),
        "the check's verdict: {stdout}"
    );
    assert!(stderr.contains("passed 1 of 1 check"), "{stderr}");
}

#[test]
fn the_image_s_path_and_env_survive_a_profile_that_resets_them() {
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
        serde_json::json!({"Env": [format!("PATH={path}"), "GREETING=from the image"]}),
    )]) else {
        return;
    };
    let local = project();
    let image = format!("{}/tools/venv:1", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--env",
        "MINE=from --env",
        "--no-upload",
        "--",
        "echo \"path=$PATH\"; which marker; marker; echo \"greeting=$GREETING mine=$MINE profile=$PROFILE_RAN\"; env | grep -c __div_ || true",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // The image's PATH, whatever the profile set; the profile still ran (`sh -lc`).
    assert!(stdout.contains(&format!("\npath={path}\n")), "{stdout}");
    assert!(
        stdout.contains("\n/opt/venv/bin/marker\nmarker from the venv\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\ngreeting=from the image mine=from --env profile=yes\n"),
        "{stdout}"
    );
    // div's copies are gone before the command starts.
    assert!(stdout.contains("\n0\n"), "{stdout}");
}

#[test]
fn a_py_entrypoint_runs_with_python3_where_the_image_has_no_python() {
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
    let config = serde_json::json!({"Env": ["PATH=/usr/bin:/bin"]});
    let Some(reg) = registry_with(vec![
        (
            "tools/py",
            "3only",
            vec![layer.clone(), python3],
            config.clone(),
        ),
        ("tools/py", "both", vec![layer, both], config),
    ]) else {
        return;
    };
    let local = project();
    let only = format!("{}/tools/py:3only", reg.addr);
    for (entrypoint, command) in [
        ("train.py::main", "-u -c 'from train import main; main()'"),
        ("train.py", "-u train.py"),
    ] {
        let out = local.div(&["run", "--gpu", "cpu", "--image", &only, entrypoint]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        let said = format!(
            "div: the image {only} has no `python` on its PATH, only `python3`: the entrypoint {entrypoint} runs as `python3 {command}`"
        );
        let said_at = stdout
            .find(&said)
            .unwrap_or_else(|| panic!("said: {stdout}"));
        let ran_at = stdout
            .find(&format!(
                "fake python3 got: {}\n",
                command.replace('\'', "")
            ))
            .unwrap_or_else(|| panic!("ran: {stdout}"));
        assert!(said_at < ran_at, "said in the first lines: {stdout}");
    }
    // A command the user wrote is never rewritten: its last line says what the image has.
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &only,
        "--",
        "python train.py",
    ]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains(&format!(
            "div: the image {only} has no `python` on its PATH, and the entrypoint python train.py is Python: it has `python3`: write that in the command"
        )),
        "{all}"
    );
    // Where `python` is there, it is what runs, and nothing is said.
    let both = format!("{}/tools/py:both", reg.addr);
    let out = local.div(&["run", "--gpu", "cpu", "--image", &both, "train.py"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("fake python got: -u train.py\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("python3"), "{stdout}");
}

#[test]
fn a_working_dir_the_image_lacks_is_made_for_the_run_and_never_in_the_cache() {
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
            serde_json::json!({"Env": ["PATH=/bin"], "WorkingDir": "/app/sub"}),
        ),
        (
            "tools/wd",
            "deep",
            vec![layer.clone()],
            serde_json::json!({"Env": ["PATH=/bin"], "WorkingDir": "/usr/src/app"}),
        ),
        (
            "tools/wd",
            "file",
            vec![layer],
            serde_json::json!({"Env": ["PATH=/bin"], "WorkingDir": "/file/app"}),
        ),
    ]) else {
        return;
    };
    let local = project();
    for (tag, dir) in [("top", "/app/sub"), ("deep", "/usr/src/app")] {
        let image = format!("{}/tools/wd:{tag}", reg.addr);
        let out = local.div(&[
            "run",
            "--gpu",
            "cpu",
            "--image",
            &image,
            "--no-upload",
            "--",
            "pwd; touch here && echo wrote; ls; cat /usr/src/kept; (echo x > /usr/src/new) 2>/dev/null && echo WROTE THE IMAGE; ls /usr/src",
        ]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{tag}: {stdout}\n{}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains(&format!(
                "div: the image has no {dir}, its WorkingDir: made for this run"
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("\n{dir}\nwrote\nhere\nthe image's\n")),
            "{tag}: {stdout}"
        );
        assert!(!stdout.contains("WROTE THE IMAGE"), "{tag}: {stdout}");
        // The rest of the image as it was: `/usr/src` keeps its entries.
        assert!(stdout.contains("kept"), "{tag}: {stdout}");
    }
    // Nothing was made in the cached trees.
    for tree in local.rootfs() {
        assert!(!tree.join("app").exists(), "{tree:?}");
        assert!(!tree.join("usr/src/app").exists(), "{tree:?}");
    }
    // A WorkingDir that cannot be a directory: the run fails, saying why.
    let image = format!("{}/tools/wd:file", reg.addr);
    let out = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--no-upload",
        "--",
        "pwd",
    ]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("the image's WorkingDir `/file/app` cannot be where the run starts: `/file` is a file in the image, not a directory"),
        "{all}"
    );
}
