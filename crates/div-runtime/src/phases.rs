//! When each phase of a run's start and end happened, to the microsecond: each side (the
//! server, the supervisor) appends a line `NAME MICROSECONDS` to `RUN_DIR/phases` as it
//! passes a mark, so where a run's time goes can be read afterwards
//! (`cargo xtask bench overhead` prints them beside bare bubblewrap's own start).
//!
//! A mark is one `O_APPEND` write of a short line, so the two sides never tear each other's;
//! a mark that cannot be written is left out, never an error of the run's.

use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The file in a run's directory.
pub const FILE: &str = "phases";

/// Microseconds since the Unix epoch, now (0 for a clock set before 1970).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Appends the mark `name` (one word) at this moment to `run_dir`'s phases.
pub fn mark(run_dir: &Path, name: &str) {
    mark_at(run_dir, name, now_us());
}

/// Appends the mark `name` at `us` to `run_dir`'s phases.
pub fn mark_at(run_dir: &Path, name: &str, us: u64) {
    let line = format!("{name} {us}\n");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join(FILE))
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// The marks of `run_dir`, in the order they were written; lines that are not marks are left
/// out.
pub fn read(run_dir: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(run_dir.join(FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (name, us) = line.split_once(' ')?;
            Some((name.to_owned(), us.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn marks_are_read_back_in_order_and_a_torn_line_is_left_out() {
        let dir = tempfile::tempdir().expect("a dir");
        super::mark_at(dir.path(), "supervisor", 10);
        super::mark_at(dir.path(), "spawned", 25);
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(super::FILE))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"half"))
            .expect("append");
        assert_eq!(
            super::read(dir.path()),
            [("supervisor".to_owned(), 10), ("spawned".to_owned(), 25)]
        );
        assert!(super::now_us() > 1_700_000_000_000_000);
    }
}
