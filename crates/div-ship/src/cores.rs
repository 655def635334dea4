//! How many threads the machine gives this process, asked once: `available_parallelism` reads
//! the cgroup's CPU quota from `/proc` and `/sys` each time it is called, which a listing, a
//! hashing and a manifest's id each did on every `div run`.

use std::sync::OnceLock;

/// `std::thread::available_parallelism`, asked once per process (1 when it cannot say).
pub(crate) fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
