//! Helpers: files, git, and div-ship's set as a sorted list.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use div_ship::{ShipError, ShipOptions};

/// Writes `content` at `root/path`, creating folders.
pub(crate) fn write(root: &Path, path: &str, content: &str) {
    let path = root.join(path);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

pub(crate) fn symlink(root: &Path, path: &str, target: &str) {
    let path = root.join(path);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, path).unwrap();
}

/// Sets the modification time of `root/path` to `now + offset_s` seconds.
pub(crate) fn set_mtime(root: &Path, path: &str, offset_s: i64) {
    let now = SystemTime::now();
    let t = if offset_s >= 0 {
        now + Duration::from_secs(offset_s.unsigned_abs())
    } else {
        now - Duration::from_secs(offset_s.unsigned_abs())
    };
    let file = fs::File::options()
        .write(true)
        .open(root.join(path))
        .unwrap();
    file.set_times(fs::FileTimes::new().set_modified(t))
        .unwrap();
}

/// Runs git in `dir`, isolated from system config, and returns its stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    git_env(dir, &[], args)
}

/// [`git`] with environment variables (`GIT_DIR`, `GIT_WORK_TREE`) set.
pub(crate) fn git_env(dir: &Path, env: &[(&str, &Path)], args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args([
            "-c",
            "advice.addEmbeddedRepo=false",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub(crate) fn git_init(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
}

/// What div should ship from `dir` according to git itself: `git ls-files -co
/// --exclude-standard` there, minus paths gone from disk (or now folders), with each gitlink
/// and each nested repository (`x/`) replaced by its own set.
pub(crate) fn git_set(dir: &Path) -> BTreeSet<String> {
    git_set_env(dir, &[])
}

/// [`git_set`] with `GIT_DIR` and `GIT_WORK_TREE` (or either) set for the top repository.
pub(crate) fn git_set_env(dir: &Path, env: &[(&str, &Path)]) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    git_set_into(dir, env, "", &mut set);
    set
}

fn git_set_into(dir: &Path, env: &[(&str, &Path)], prefix: &str, set: &mut BTreeSet<String>) {
    let staged = git_env(dir, env, &["ls-files", "-z", "--stage"]);
    let gitlinks: BTreeSet<String> = staged
        .split(|b| *b == 0)
        .filter(|r| r.starts_with(b"160000 "))
        .map(|r| {
            let tab = r.iter().position(|b| *b == b'\t').unwrap();
            div_ship::encode_path(&r[tab + 1..]).into_owned()
        })
        .collect();
    let listed = git_env(dir, env, &["ls-files", "-z", "-co", "--exclude-standard"]);
    for raw in listed.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        // Names that are not UTF-8 as the manifest writes them.
        let path = div_ship::encode_path(raw).into_owned();
        let on_disk = |p: &str| dir.join(div_ship::fs_path(p).unwrap());
        if let Some(nested) = path.strip_suffix('/') {
            git_set_into(&on_disk(nested), &[], &format!("{prefix}{nested}/"), set);
        } else if gitlinks.contains(&path) {
            if on_disk(&path).join(".git").exists() {
                git_set_into(&on_disk(&path), &[], &format!("{prefix}{path}/"), set);
            }
        } else {
            match fs::symlink_metadata(on_disk(&path)) {
                Ok(meta) if !meta.is_dir() => {
                    set.insert(format!("{prefix}{path}"));
                }
                _ => {}
            }
        }
    }
}

/// div-ship's set from `dir` (empty when it refuses with nothing to ship).
pub(crate) fn ship_set(dir: &Path) -> BTreeSet<String> {
    ship_set_with(dir, &ShipOptions::default())
}

/// [`ship_set`] with `options` (a named git directory or work tree).
pub(crate) fn ship_set_with(dir: &Path, options: &ShipOptions) -> BTreeSet<String> {
    match div_ship::collect(dir, options) {
        Ok(shipment) => shipment
            .manifest
            .entries
            .into_iter()
            .map(|e| e.path)
            .collect(),
        Err(ShipError::NothingToShip { .. }) => BTreeSet::new(),
        Err(err) => panic!("collect {}: {err}", dir.display()),
    }
}

/// Asserts div-ship ships from `dir` exactly what git lists there.
pub(crate) fn assert_matches_git(dir: &Path) {
    let expected = git_set(dir);
    let got = ship_set(dir);
    assert_eq!(got, expected, "in {}", dir.display());
}
