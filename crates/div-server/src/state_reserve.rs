//! Room kept on the state directory's filesystem for the state database: `home/state.reserve`,
//! a file of [`BYTES`] really written. When a write of the database finds the disk full
//! ([`with_room`]), the file is let go and the write tried again, so a run's end is recorded
//! whatever filled the disk; the file is made again once there is room ([`keep`]).

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::store::StoreError;

/// The file, in the state directory.
const FILE: &str = "state.reserve";
/// Its size: 16 MiB, many thousands of runs' ends.
const BYTES: usize = 16 << 20;

/// Makes the reserve where it is missing and the disk has room for it four times over.
pub(crate) fn keep(home: &Path) {
    let path = home.join(FILE);
    if fs::metadata(&path).is_ok_and(|m| m.len() == BYTES as u64) {
        return;
    }
    let room = div_runtime::scratch::space(home).is_ok_and(|(_, free)| free > 4 * BYTES as u64);
    if !room {
        return;
    }
    let staged = home.join(format!(".{FILE}.{}", std::process::id()));
    let written = fs::File::create(&staged)
        .and_then(|mut f| {
            // Written, not only sized: a sparse file would keep no room at all.
            f.write_all(&vec![0u8; BYTES])?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&staged, &path));
    if written.is_err() {
        let _ = fs::remove_file(&staged);
    }
}

/// Runs `write`; when the disk under the database is full, lets the reserve go and runs it
/// once more.
pub(crate) fn with_room<T>(
    home: &Path,
    write: impl Fn() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match write() {
        Err(e) if e.is_disk_full() && fs::remove_file(home.join(FILE)).is_ok() => write(),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reserve_is_made_once_and_let_go_for_a_write_that_finds_the_disk_full() {
        let home = tempfile::tempdir().expect("a temp dir");
        super::keep(home.path());
        let file = home.path().join(super::FILE);
        assert_eq!(
            std::fs::metadata(&file).expect("made").len(),
            super::BYTES as u64
        );
        let full = || {
            Err::<(), _>(crate::store::StoreError::Sqlite(
                rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                    None,
                ),
            ))
        };
        assert!(super::with_room(home.path(), full).is_err());
        assert!(!file.exists(), "let go for the write");
        super::keep(home.path());
        assert!(file.exists(), "made again once there is room");
    }
}
