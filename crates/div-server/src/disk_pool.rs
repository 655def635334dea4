//! The pool of formatted images for runs' disks (`home/disks`): filled off the runs' way, so
//! a run's start does not pay for `mkfs` (`div_runtime::scratch`).

use std::path::PathBuf;

/// Where formatted images wait for runs, in the state directory.
pub(crate) const DISK_POOL: &str = "disks";
/// How many wait there.
const DISK_POOL_SIZE: usize = 2;

/// Formats images for the next runs' disks, off the run's way (one filler at a time).
pub(crate) fn refill_pool(pool: PathBuf, bytes: u64) {
    static FILLING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if FILLING.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    std::thread::spawn(move || {
        let _ = div_runtime::scratch::fill_pool(&pool, bytes, DISK_POOL_SIZE);
        FILLING.store(false, std::sync::atomic::Ordering::SeqCst);
    });
}
