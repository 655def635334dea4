//! Profiling aid: `ship_loop list|collect DIR N` runs one of div-ship's entry points N times
//! and prints the median, for `perf record` or callgrind.

#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, what, dir, n] = args.as_slice() else {
        return Err("usage: ship_loop list|collect DIR N".into());
    };
    let dir = Path::new(dir);
    let n: usize = n.parse()?;
    let cache = std::env::temp_dir().join("ship_loop.cache");
    let options = div_ship::ShipOptions {
        cache: Some(cache),
        ..Default::default()
    };
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let count = match what.as_str() {
            "list" => div_ship::list_paths(dir)?.1.len(),
            "collect" => div_ship::collect(dir, &options)?.manifest.entries.len(),
            _ => return Err("list or collect".into()),
        };
        times.push(started.elapsed());
        std::hint::black_box(count);
    }
    times.sort();
    println!("{what}: median {:.1?} of {n}", times[n / 2]);
    Ok(())
}
