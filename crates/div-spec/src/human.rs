//! Durations and byte sizes the way div prints them.

/// The longest any run is given: 24 hours.
pub const MAX_RUN_SECONDS: u64 = 86_400;

/// A duration as div prints it: `40s`, `0s`, `3m 12s`, `12m 40s`, `1h 0m`, `25h 3m`.
///
/// Under a minute: seconds. Under an hour: minutes and seconds. From an hour: hours and
/// minutes, the seconds dropped (not rounded), so a run never looks longer than it was.
pub fn format_duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

const UNITS: [&str; 6] = ["KB", "MB", "GB", "TB", "PB", "EB"];

/// `bytes / 1000^power` in tenths, rounded half up.
fn tenths(bytes: u64, power: u32) -> u128 {
    let unit = 1000u128.pow(power);
    (u128::from(bytes) * 10 * 2 + unit) / (2 * unit)
}

/// The largest power of 1000 (at least 1) whose rounded value in tenths stays under 1000.0.
fn power_for(bytes: u64) -> u32 {
    let mut power = 1;
    while power < 6 && tenths(bytes, power) >= 10_000 {
        power += 1;
    }
    power
}

/// A byte size in decimal units (1000), one decimal from KB up: `512 B`, `38.2 KB`, `6.0 GB`.
pub fn format_bytes(bytes: u64) -> String {
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let power = power_for(bytes);
    let t = tenths(bytes, power);
    format!("{}.{} {}", t / 10, t % 10, UNITS[power as usize - 1])
}

/// The short form for log sentences: `300B`, `512K`, `1.1G`. One decimal under 10, whole
/// numbers from 10 up, rounded half up; decimal units (1000).
pub fn format_bytes_short(bytes: u64) -> String {
    if bytes < 1000 {
        return format!("{bytes}B");
    }
    let power = power_for(bytes);
    let t = tenths(bytes, power);
    let letter = &UNITS[power as usize - 1][..1];
    if t < 100 {
        format!("{}.{}{letter}", t / 10, t % 10)
    } else {
        let unit = 1000u128.pow(power);
        let whole = (u128::from(bytes) * 2 + unit) / (2 * unit);
        if whole >= 1000 && power < 6 {
            // 999.5K rounds to 1000K: show it as the next unit instead.
            let next = &UNITS[power as usize][..1];
            return format!("1.0{next}");
        }
        format!("{whole}{letter}")
    }
}
