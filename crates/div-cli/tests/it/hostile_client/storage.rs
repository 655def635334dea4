//! Storage that stays inside its lines: never through a link, never a FIFO or a device,
//! errors that name the command, a committed snapshot never changed, names that are not
//! UTF-8 round-tripped, what a run wrote reported as it is.

use div_test_support::mock::{error_response, json_response};
use serde_json::json;
use wiremock::Mock;
use wiremock::matchers::{method, path};

use super::{Local, listed_as, text};
use crate::support::World;

/// `div storage get` into a destination holding a link to a folder elsewhere, under the name
/// of a folder the volume holds: the get is refused, and nothing lands where the link points.
#[test]
fn storage_get_never_writes_through_a_link_in_the_destination() {
    let local = Local::new();
    let data = local.project().join("data");
    std::fs::create_dir_all(data.join("sub")).expect("mkdir");
    std::fs::write(data.join("sub/planted.txt"), "x\n").expect("write");
    let put = local.div(&["storage", "put", "ds", "data"]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));

    let elsewhere = local.tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let out_dir = local.project().join("out");
    std::fs::create_dir_all(&out_dir).expect("mkdir");
    std::os::unix::fs::symlink(&elsewhere, out_dir.join("sub")).expect("symlink");

    let got = local.div(&["storage", "get", "ds", "out"]);
    let stderr = text(&got.stderr);
    assert_eq!(got.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("is a link") && stderr.contains("never writes through a link"),
        "{stderr}"
    );
    assert!(
        !elsewhere.join("planted.txt").exists(),
        "the get wrote through the link"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("read").count(),
        0,
        "nothing may land where the link points"
    );

    // A planted partial-download link is never written through either.
    let victim = local.tmp.path().join("victim.txt");
    std::fs::write(&victim, "keep\n").expect("write");
    let fresh = local.project().join("fresh");
    std::fs::create_dir_all(fresh.join("sub")).expect("mkdir");
    std::os::unix::fs::symlink(&victim, fresh.join("sub/.planted.txt.div-partial"))
        .expect("symlink");
    let got = local.div(&["storage", "get", "ds", "fresh"]);
    assert_eq!(got.status.code(), Some(0), "{}", text(&got.stderr));
    assert_eq!(
        std::fs::read_to_string(&victim).ok().as_deref(),
        Some("keep\n")
    );
    assert_eq!(
        std::fs::read_to_string(fresh.join("sub/planted.txt"))
            .ok()
            .as_deref(),
        Some("x\n")
    );
}

/// A volume that holds a link and a file "under" it (a hostile control plane, or a tree a run
/// made): the get is refused before anything is written.
#[tokio::test]
async fn storage_get_never_writes_through_a_link_the_volume_holds() {
    let world = World::new().await;
    let outside = world.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let entries = json!({"entries": [
        {"path": "evil", "kind": "symlink", "size": 0, "target": outside.display().to_string()},
        {"path": "evil/passwd", "kind": "file", "size": 5},
    ]});
    Mock::given(method("GET"))
        .and(path("/v1/volumes/ds/tree"))
        .respond_with(json_response(200, &entries))
        .mount(&world.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/volumes/ds/file"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_bytes("owned"))
        .mount(&world.server)
        .await;
    let done = world.div(&["storage", "get", "ds", "out"]).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert!(done.stderr.contains("is a link"), "{}", done.stderr);
    assert!(!outside.join("passwd").exists(), "wrote through the link");
    assert!(
        std::fs::symlink_metadata(world.project().join("out/evil")).is_err(),
        "nothing is written when the plan is refused"
    );
}

/// `div storage put` of a FIFO or a device is refused at once (reading either never ends);
/// one inside a folder is left out with a warning.
#[test]
fn storage_put_of_a_fifo_or_a_device_is_refused_at_once() {
    let local = Local::new();
    let fifo = local.project().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let out = local.div_or_hang(&["storage", "put", "ds", "fifo"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("fifo` is a FIFO; `div storage put` sends files and folders"),
        "{stderr}"
    );
    let out = local.div_or_hang(&["storage", "put", "ds", "/dev/zero"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(stderr.contains("`/dev/zero` is a device"), "{stderr}");
    assert!(!local.state().contains("\"ds\""), "nothing was made");

    let folder = local.project().join("folder");
    std::fs::create_dir_all(&folder).expect("mkdir");
    std::fs::write(folder.join("a.txt"), "a\n").expect("write");
    std::fs::rename(&fifo, folder.join("pipe")).expect("move the fifo");
    let out = local.div_or_hang(&["storage", "put", "ds", "folder"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: `pipe` is a FIFO, not a file, and was left out"),
        "{stderr}"
    );
}

/// A link named on the command line is followed (the user named it); the volume gets the
/// link's name and the target's content. Links inside a folder are left out.
#[test]
fn storage_put_follows_a_link_named_on_the_command_line() {
    let local = Local::new();
    std::fs::write(local.project().join("model-v3.bin"), "weights\n").expect("write");
    std::os::unix::fs::symlink("model-v3.bin", local.project().join("latest.bin"))
        .expect("symlink");
    let out = local.div(&["storage", "put", "ds", "latest.bin"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dest = local.project().join("back");
    let got = local.div(&["storage", "get", "ds/latest.bin", "back"]);
    assert_eq!(got.status.code(), Some(0), "{}", text(&got.stderr));
    assert_eq!(
        std::fs::read_to_string(&dest).ok().as_deref(),
        Some("weights\n")
    );
}

/// A bad volume name is named as such, not blamed on `--to`.
#[test]
fn storage_put_names_the_bad_volume_name() {
    let local = Local::new();
    let out = local.div(&["storage", "put", "UPPER", "train.py", "--to", "x"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert_eq!(
        stderr.lines().next().unwrap_or_default(),
        "error: `UPPER` is not a volume name: 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit",
    );
}

/// A failing step of `div storage put` names `div storage put`, not the code upload.
#[tokio::test]
async fn storage_put_errors_name_the_command_that_ran() {
    let world = World::new().await;
    std::fs::write(world.project().join("a.txt"), "a\n").expect("write");
    Mock::given(method("GET"))
        .and(path("/v1/volumes"))
        .respond_with(json_response(200, &json!({"volumes": []})))
        .mount(&world.server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/volumes"))
        .respond_with(error_response(
            422,
            "invalid",
            "the disk is full",
            json!({}),
        ))
        .mount(&world.server)
        .await;
    let done = world.div(&["storage", "put", "ds", "a.txt"]).await;
    assert_ne!(done.code, 0);
    assert!(
        done.stderr
            .starts_with("error: could not make the volume for `div storage put`\n"),
        "{}",
        done.stderr
    );
    assert!(!done.stderr.contains("code"), "{}", done.stderr);
}

/// Issue 13: a run edits a data volume: it rewrites a file put earlier (longer), deletes
/// another and leaves links to `/etc/shadow` and `/etc` in its place. Afterwards `div storage
/// ls` and `get` report what the run left (the new size, the new bytes), never read through
/// the links, and putting the original files again works, as `cp` would: the file the run
/// edited and the link it left in place of another are replaced by the original bytes (the
/// run's edit never reached the server's blobs), never written through; a put through the
/// run's `etc -> /etc` link is refused, naming it.
#[test]
fn what_a_run_writes_to_a_volume_is_what_storage_ls_and_get_report() {
    let local = Local::new();
    let data = local.tmp.path().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("a.txt"), "hello\n").expect("write");
    std::fs::write(data.join("b.txt"), "bbbbbb\n").expect("write");
    let data_arg = data.to_string_lossy().into_owned();
    let put = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));
    std::fs::write(
        local.project().join("edit.py"),
        r#"import os
open("/mnt/ds/a.txt", "w").write("rewritten by the run, longer\n")
os.remove("/mnt/ds/b.txt")
os.symlink("/etc/shadow", "/mnt/ds/b.txt")
os.symlink("/etc", "/mnt/ds/etc")
"#,
    )
    .expect("write");
    let run = local.div(&["run", "--gpu", "cpu", "--volume", "ds", "edit.py"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));

    let ls = text(&local.div(&["storage", "ls", "ds"]).stdout);
    assert!(ls.contains("29 B   a.txt"), "{ls}");
    assert!(ls.contains("b.txt -> /etc/shadow"), "{ls}");
    let listed = text(&local.div(&["storage", "ls", "--json", "ds"]).stdout);
    assert!(!listed.contains("\"size\":6,"), "a stale size: {listed}");

    let got = local.tmp.path().join("got");
    let get = local.div(&["storage", "get", "ds", &got.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(
        std::fs::read_to_string(got.join("a.txt")).expect("a.txt"),
        "rewritten by the run, longer\n"
    );
    let shadow = std::fs::read("/etc/shadow").unwrap_or_default();
    for name in ["b.txt", "etc"] {
        let meta = std::fs::symlink_metadata(got.join(name)).expect("got it");
        assert!(meta.file_type().is_symlink(), "{name} was read through");
    }
    let one = local.tmp.path().join("one");
    let through = local.div(&["storage", "get", "ds/etc/shadow", &one.to_string_lossy()]);
    assert_ne!(through.status.code(), Some(0));
    assert!(
        std::fs::read(&one).map_or(true, |b| b != shadow),
        "read /etc/shadow through a link the run left"
    );

    // The originals again: written over what the run left, as `cp` would (the edited file
    // and the link in place of `b.txt`, which is replaced itself, never followed), and they
    // then hold their original bytes.
    let again = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let ls = text(&local.div(&["storage", "ls", "ds"]).stdout);
    assert!(listed_as(&ls, "6 B", "a.txt"), "{ls}");
    assert!(listed_as(&ls, "7 B", "b.txt"), "{ls}");
    assert_eq!(
        std::fs::read("/etc/shadow").unwrap_or_default(),
        shadow,
        "the put wrote through the link"
    );
    let back = local.tmp.path().join("back");
    let get = local.div(&["storage", "get", "ds/a.txt", &back.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read_to_string(&back).expect("a"), "hello\n");
    let back = local.tmp.path().join("back-b");
    let get = local.div(&["storage", "get", "ds/b.txt", &back.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read_to_string(&back).expect("b"), "bbbbbb\n");
    let elsewhere = local.div(&["storage", "put", "ds", &data_arg, "--to", "orig"]);
    assert_eq!(
        elsewhere.status.code(),
        Some(0),
        "{}",
        text(&elsewhere.stderr)
    );
    // Through `etc -> /etc`, a put never writes the host's /etc.
    let planted = local.tmp.path().join("planted");
    std::fs::create_dir_all(planted.join("etc")).expect("mkdir");
    std::fs::write(planted.join("etc/div-planted"), "x").expect("write");
    let via = local.div(&["storage", "put", "ds", &planted.to_string_lossy()]);
    assert_ne!(via.status.code(), Some(0));
    assert!(
        text(&via.stderr).contains(
            "`etc` in volume `ds` is a link (a run may have left it), where the put has a folder; a put never writes through a link"
        ),
        "{}",
        text(&via.stderr)
    );
    assert!(!std::path::Path::new("/etc/div-planted").exists());
}

/// A put replaces files, but never inside a committed code snapshot: `code/<id>` is what
/// every run of that id was given, so a put that would change or add a file there is
/// refused, naming the tree, and the next run of that code still gets it as shipped.
#[test]
fn a_put_never_changes_a_committed_code_snapshot() {
    let local = Local::new();
    let run = local.div(&["run", "--gpu", "cpu", "--", "python3 train.py"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let ls = text(&local.div(&["storage", "ls", "proj-code/code"]).stdout);
    let id = ls
        .split_whitespace()
        .find_map(|w| w.strip_prefix("code/")?.strip_suffix('/'))
        .expect("a code id")
        .to_owned();
    let changed = local.tmp.path().join("changed");
    std::fs::create_dir_all(&changed).expect("mkdir");
    std::fs::write(changed.join("train.py"), "print('rewritten')\n").expect("write");
    let to = format!("code/{id}");
    let put = local.div(&[
        "storage",
        "put",
        "proj-code",
        &changed.to_string_lossy(),
        "--to",
        &to,
    ]);
    assert_ne!(put.status.code(), Some(0), "{}", text(&put.stderr));
    assert!(
        text(&put.stderr).contains(&format!(
            "`code/{id}/train.py` in volume `proj-code` is in the committed tree `code/{id}`, which never changes"
        )),
        "{}",
        text(&put.stderr)
    );
    std::fs::write(changed.join("new.py"), "x = 1\n").expect("write");
    std::fs::remove_file(changed.join("train.py")).expect("rm");
    let add = local.div(&[
        "storage",
        "put",
        "proj-code",
        &changed.to_string_lossy(),
        "--to",
        &to,
    ]);
    assert_ne!(add.status.code(), Some(0), "{}", text(&add.stderr));
    let again = local.div(&["run", "--gpu", "cpu", "--", "python3 train.py; ls"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(
        text(&again.stdout),
        format!("{}hi\ntrain.py\n", crate::support::HOST_LINE)
    );
}

/// A file name that is not UTF-8 (Latin-1 `café.txt`, a folder named by the byte 0xff)
/// round-trips through `div storage put`, `ls` and `get` as it does through `div run`'s
/// shipping: escaped on the way (`div_ship::encode_path`), its own bytes on disk, in the
/// volume a run sees and in what `get` writes; `ls` shows each such byte as `\xNN`. Putting it
/// again after a run changed it replaces it.
#[test]
fn names_that_are_not_utf8_round_trip_through_storage() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let local = Local::new();
    let data = local.tmp.path().join("data");
    let cafe = OsStr::from_bytes(b"caf\xe9.txt");
    let odd = OsStr::from_bytes(b"d\xff");
    std::fs::create_dir_all(data.join(odd)).expect("mkdir");
    std::fs::write(data.join(cafe), "latin-1\n").expect("write");
    std::fs::write(data.join(odd).join("x.bin"), [0u8, 1, 2, 255]).expect("write");
    let data_arg = data.to_string_lossy().into_owned();
    let put = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));

    let ls = text(&local.div(&["storage", "ls", "-r", "ds"]).stdout);
    assert!(listed_as(&ls, "8 B", "caf\\xe9.txt"), "{ls}");
    assert!(listed_as(&ls, "4 B", "d\\xff/x.bin"), "{ls}");

    // The run sees the names' own bytes, and changes the file.
    let run = local.div(&[
        "run",
        "--gpu",
        "cpu",
        "--no-upload",
        "--volume",
        "ds",
        "--",
        r#"cat "/mnt/ds/$(printf 'caf\351.txt')" && od -An -tx1 "/mnt/ds/$(printf 'd\377')/x.bin" && printf 'run\n' > "/mnt/ds/$(printf 'caf\351.txt')""#,
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let log = text(&run.stdout);
    assert!(log.contains("latin-1\n"), "{log}");
    assert!(log.contains("00 01 02 ff"), "{log}");

    let got = local.tmp.path().join("got");
    let get = local.div(&["storage", "get", "ds", &got.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read(got.join(cafe)).expect("café"), b"run\n");
    assert_eq!(
        std::fs::read(got.join(odd).join("x.bin")).expect("x.bin"),
        [0u8, 1, 2, 255]
    );
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(&got)
        .expect("read got")
        .map(|e| e.expect("entry").file_name().as_bytes().to_vec())
        .collect();
    names.sort();
    assert_eq!(names, [b"caf\xe9.txt".to_vec(), b"d\xff".to_vec()]);

    // The original again replaces what the run wrote.
    let again = local.div(&["storage", "put", "ds", &data_arg]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let back = local.tmp.path().join("back");
    let get = local.div(&["storage", "get", "ds", &back.to_string_lossy()]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert_eq!(std::fs::read(back.join(cafe)).expect("café"), b"latin-1\n");
}
