//! `div-init`, the first process of every run's sandbox (crates/div-init), carried in this
//! crate's own binary (built static by `build.rs`) and laid once into the state directory,
//! where the sandbox binds it read-only at [`IN_SANDBOX`].
//!
//! With it, a stop reaches every process of the run, and the sandbox stays until they have
//! all exited or the grace is over (docs/reliability.md, "Stops").

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The program, static.
static BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/div-init"));

/// Where a sandboxed run's first process is, inside the sandbox.
pub const IN_SANDBOX: &str = "/.div/init";

/// Lays the program into `home/bin/div-init-<digest>` (named by its contents, so a server
/// of another build never runs this one's, nor a run a half-written one), mode 0755, and
/// returns its path. One already there with the same name is taken as it is.
pub fn install(home: &Path) -> io::Result<PathBuf> {
    let digest = blake3::hash(BINARY).to_hex();
    let dir = home.join("bin");
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("div-init-{}", &digest[..16]));
    if fs::metadata(&path).is_ok_and(|m| m.len() == BINARY.len() as u64) {
        return Ok(path);
    }
    let staged = dir.join(format!(".div-init-{}", std::process::id()));
    let _ = fs::remove_file(&staged);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(&staged)?;
    file.write_all(BINARY)?;
    file.sync_all()?;
    drop(file);
    fs::set_permissions(&staged, fs::Permissions::from_mode(0o755))?;
    fs::rename(&staged, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn it_is_laid_once_named_by_its_contents_and_runs() {
        let home = tempfile::tempdir().expect("a temp dir");
        let path = super::install(home.path()).expect("installed");
        assert_eq!(super::install(home.path()).expect("again"), path);
        let out = std::process::Command::new(&path)
            .args(["/bin/sh", "-c", "exit 7"])
            .status()
            .expect("it runs");
        assert_eq!(out.code(), Some(7));
    }
}
