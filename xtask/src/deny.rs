//! `cargo xtask deny`: every check of cargo-deny (advisories, bans, licenses, sources) against
//! the advisory database vendored in `.ci/advisory-db`, without the network; cargo-deny is
//! installed first when it is missing. `cargo xtask advisory-db [CLONE]` refreshes the
//! vendored copy.
//!
//! Why vendored: CI reaches crates.io but not GitHub, where the RustSec database lives, so
//! cargo-deny cannot fetch it there. `deny.toml` points `db-path` at `target/advisory-dbs`;
//! this task lays the snapshot out there the way cargo-deny's own fetch would (the folder
//! named after the database's URL, a `.git/FETCH_HEAD` dated when the snapshot was taken, so
//! `maximum-db-staleness` measures the snapshot's real age) and runs `cargo deny --offline`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

use crate::{cargo, run};

/// The cargo-deny this repository's `deny.toml` is written for.
const CARGO_DENY_VERSION: &str = "0.20.2";
/// Where the snapshot is kept, from the repository's root.
const VENDORED: &str = ".ci/advisory-db";
/// `db-path` in `deny.toml`.
const DB_PATH: &str = "target/advisory-dbs";
/// The folder cargo-deny 0.20 reads for `https://github.com/rustsec/advisory-db`, the
/// database `deny.toml` names: the URL's last segment and an XXH64 of the URL (see its
/// `url_to_db_path`). A cargo-deny that names it otherwise says "failed to get 'FETCH_HEAD'
/// metadata" with the path it looked in.
const DB_DIR: &str = "advisory-db-3157b0e258782691";

/// Installs cargo-deny when it is missing, lays out the snapshot and runs every check.
pub(crate) fn deny() -> Result<()> {
    install()?;
    let root = repo_root();
    lay_out(&root)?;
    // Every package of the lock file, for every platform (a build fetches only this one's):
    // `cargo deny --offline` reads their manifests, and a fresh machine has none of the
    // others (it failed so, "failed to download `android_system_properties`", on one).
    run(cargo().current_dir(&root).args(["fetch", "--locked"]))?;
    run(cargo()
        .current_dir(&root)
        .args(["deny", "--offline", "check"]))?;
    for krate in ["div-spec", "div-pricing"] {
        run(cargo().current_dir(&root).args([
            "deny",
            "--offline",
            "--manifest-path",
            &format!("crates/{krate}/Cargo.toml"),
            "--config",
            &format!("crates/{krate}/deny.toml"),
            "check",
            "bans",
        ]))?;
    }
    Ok(())
}

/// `cargo install cargo-deny` at [`CARGO_DENY_VERSION`] unless a cargo-deny answers.
fn install() -> Result<()> {
    let installed = Command::new("cargo-deny")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Ok(());
    }
    eprintln!("cargo-deny is missing: installing {CARGO_DENY_VERSION} from crates.io");
    run(cargo().args([
        "install",
        "--locked",
        "cargo-deny",
        "--version",
        CARGO_DENY_VERSION,
    ]))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The snapshot's commit and when it was taken, from `VENDORED/SNAPSHOT`.
fn snapshot(root: &Path) -> Result<(String, SystemTime)> {
    let path = root.join(VENDORED).join("SNAPSHOT");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(str::trim)
            .with_context(|| format!("{} has no `{name}` line", path.display()))
    };
    let commit = field("commit")?.to_owned();
    let unix: u64 = field("unix")?
        .parse()
        .with_context(|| format!("`unix` in {} is not whole seconds", path.display()))?;
    Ok((commit, SystemTime::UNIX_EPOCH + Duration::from_secs(unix)))
}

/// `DB_PATH/DB_DIR`: the snapshot's `crates/`, in an empty git repository whose
/// `.git/FETCH_HEAD` is dated when the snapshot was taken. Made afresh each time, so what is checked is exactly what is committed.
fn lay_out(root: &Path) -> Result<()> {
    let (commit, taken) = snapshot(root)?;
    let db = root.join(DB_PATH).join(DB_DIR);
    if db.exists() {
        std::fs::remove_dir_all(&db).with_context(|| format!("removing {}", db.display()))?;
    }
    copy_dir(&root.join(VENDORED).join("crates"), &db.join("crates"))?;
    // A repository of its own (empty), so that no git command cargo-deny runs in it (a fetch
    // when run without `--offline`) climbs up to this repository's own `.git` and acts there.
    run(Command::new("git").args(["init", "-q"]).arg(&db))?;
    let git = db.join(".git");
    let fetch_head = git.join("FETCH_HEAD");
    std::fs::write(
        &fetch_head,
        format!("{commit}\t\tbranch 'main' of https://github.com/rustsec/advisory-db\n"),
    )?;
    std::fs::File::options()
        .write(true)
        .open(&fetch_head)?
        .set_modified(taken)
        .with_context(|| format!("dating {}", fetch_head.display()))?;
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("making {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).with_context(|| format!("copying {}", src.display()))?;
        }
    }
    Ok(())
}

/// `cargo xtask advisory-db [CLONE]`: replaces the vendored snapshot with the `crates/` and
/// licence files of a clone of the RustSec database (made with `git clone --depth 1` when
/// no clone is given, which needs GitHub), and records its commit and date.
pub(crate) fn refresh(rest: &[String]) -> Result<()> {
    let root = repo_root();
    let scratch;
    let clone = match rest.first() {
        Some(path) => PathBuf::from(path),
        None => {
            scratch = tempfile::tempdir()?;
            let dest = scratch.path().join("advisory-db");
            run(Command::new("git")
                .args([
                    "clone",
                    "--depth",
                    "1",
                    "https://github.com/rustsec/advisory-db",
                ])
                .arg(&dest))?;
            dest
        }
    };
    if !clone.join("crates").is_dir() {
        bail!(
            "`{}` has no `crates/` folder: is it a clone of rustsec/advisory-db?",
            clone.display()
        );
    }
    let git = |format: &str| -> Result<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&clone)
            .args(["log", "-1", &format!("--format={format}")])
            .output()
            .context("running git")?;
        if !out.status.success() {
            bail!("git log in {} failed", clone.display());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let (commit, date, unix) = (git("%H")?, git("%cI")?, git("%ct")?);
    let vendored = root.join(VENDORED);
    for old in ["crates", "LICENSES"] {
        let path = vendored.join(old);
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
    }
    copy_dir(&clone.join("crates"), &vendored.join("crates"))?;
    copy_dir(&clone.join("LICENSES"), &vendored.join("LICENSES"))?;
    std::fs::copy(clone.join("LICENSE.txt"), vendored.join("LICENSE.txt"))?;
    std::fs::write(
        vendored.join("SNAPSHOT"),
        format!(
            "# The RustSec advisory database (https://github.com/rustsec/advisory-db), vendored for\n\
             # `cargo xtask deny`: CI cannot reach GitHub. Refresh with `cargo xtask advisory-db [CLONE]`.\n\
             commit {commit}\ndate {date}\nunix {unix}\n"
        ),
    )?;
    eprintln!("vendored advisory database: {commit} of {date}");
    Ok(())
}
