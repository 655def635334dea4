//! The few calls div-server makes into div-spec, div-pricing and div-ship, in one place.
//!
//! INTERIM: those crates are being written beside this one; until their APIs land these are
//! small stand-ins with the same behaviour, to be replaced by direct calls.

use std::path::{Path, PathBuf};

use div_api::{CheckOutcome, CheckVerdict, TreeEntry};
use serde_json::Value;

/// The longest a run is given, in seconds.
pub(crate) const MAX_RUN_SECONDS: u64 = 86_400;

/// One SKU's price and share: name, label, cents an hour, cores and GiB per unit, is a GPU.
pub(crate) struct SkuPrice {
    pub(crate) name: &'static str,
    pub(crate) label: &'static str,
    pub(crate) cents_per_hour: i64,
    pub(crate) cores_per_unit: u32,
    pub(crate) memory_gib_per_unit: u32,
    pub(crate) gpu: bool,
}

pub(crate) const EXTRA_CORE_CENTS: i64 = 17;
pub(crate) const EXTRA_GIB_CENTS: i64 = 3;
pub(crate) const MAX_CORES: u32 = 64;
pub(crate) const MAX_MEMORY_GIB: u32 = 336;

pub(crate) const SKUS: [SkuPrice; 4] = [
    SkuPrice {
        name: "b300",
        label: "B300",
        cents_per_hour: 895,
        cores_per_unit: 1,
        memory_gib_per_unit: 8,
        gpu: true,
    },
    SkuPrice {
        name: "h200",
        label: "H200",
        cents_per_hour: 595,
        cores_per_unit: 1,
        memory_gib_per_unit: 8,
        gpu: true,
    },
    SkuPrice {
        name: "h100",
        label: "H100",
        cents_per_hour: 495,
        cores_per_unit: 1,
        memory_gib_per_unit: 8,
        gpu: true,
    },
    SkuPrice {
        name: "cpu",
        label: "CPU",
        cents_per_hour: 30,
        cores_per_unit: 1,
        memory_gib_per_unit: 2,
        gpu: false,
    },
];

/// The SKU named `name` (case-insensitive).
pub(crate) fn sku(name: &str) -> Option<&'static SkuPrice> {
    SKUS.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// A container's size and price.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizing {
    pub(crate) cores: u32,
    pub(crate) memory_gib: u32,
    pub(crate) cents_per_hour: i64,
}

/// Sizes a container, or says why it cannot be had.
pub(crate) fn size(
    sku: &SkuPrice,
    gpus: u32,
    cpu: Option<u32>,
    memory: Option<u32>,
) -> Result<Sizing, String> {
    let units = if sku.gpu {
        if gpus == 0 {
            return Err("`--gpus` must be at least 1".to_owned());
        }
        gpus
    } else {
        if gpus > 1 {
            return Err("the cpu SKU has no GPUs to count; ask for cores with `--cpu`".to_owned());
        }
        1
    };
    let inc_cores = sku.cores_per_unit * units;
    let inc_mem = sku.memory_gib_per_unit * units;
    let cores = cpu.unwrap_or(0).max(inc_cores);
    let memory_gib = memory.unwrap_or(0).max(inc_mem);
    if cores > MAX_CORES || memory_gib > MAX_MEMORY_GIB {
        return Err(format!(
            "the most one container takes is {MAX_CORES} cores and {MAX_MEMORY_GIB} GiB"
        ));
    }
    let cents_per_hour = sku.cents_per_hour * i64::from(units)
        + EXTRA_CORE_CENTS * i64::from(cores - inc_cores)
        + EXTRA_GIB_CENTS * i64::from(memory_gib - inc_mem);
    Ok(Sizing {
        cores,
        memory_gib,
        cents_per_hour,
    })
}

/// Spend after `seconds` at `cents_per_hour`, rounded half up to the cent.
pub(crate) fn spend_after(cents_per_hour: i64, seconds: u64) -> i64 {
    let num = i128::from(cents_per_hour) * i128::from(seconds);
    ((num + 1800) / 3600) as i64
}

/// A check in its canonical form, or why it is not one.
pub(crate) fn parse_check(typed: &str) -> Result<String, String> {
    split_check(typed).map(|(p, op, v)| format!("{p} {op} {v}"))
}

fn split_check(typed: &str) -> Result<(String, &'static str, String), String> {
    for op in [">=", "<=", "==", "!=", ">", "<"] {
        if let Some(i) = typed.find(op) {
            let path = typed[..i].trim();
            let value = typed[i + op.len()..].trim();
            if path.is_empty() || value.is_empty() {
                break;
            }
            return Ok((path.to_owned(), op, value.to_owned()));
        }
    }
    Err(format!(
        "`{typed}` is not a check; write it like `metrics.accuracy>=0.8`"
    ))
}

/// Judges `check` against the run's result.
pub(crate) fn judge(check: &str, result: Option<&Value>) -> CheckVerdict {
    let Ok((path, op, value)) = split_check(check) else {
        return CheckVerdict {
            check: check.to_owned(),
            outcome: CheckOutcome::Unknown,
            found: None,
            line: format!("check unknown: {check}"),
            extra: Default::default(),
        };
    };
    let canonical = format!("{path} {op} {value}");
    let mut at = result;
    for part in path.split('.') {
        at = at.and_then(|v| v.get(part));
    }
    let Some(found) = at.cloned() else {
        return CheckVerdict {
            line: format!("check unknown: {canonical} (the result has no {path})"),
            check: canonical,
            outcome: CheckOutcome::Unknown,
            found: None,
            extra: Default::default(),
        };
    };
    let want: Value = serde_json::from_str(&value)
        .unwrap_or(Value::String(value.trim_matches(['"', '\'']).to_owned()));
    let pass = match (found.as_f64(), want.as_f64()) {
        (Some(a), Some(b)) => match op {
            ">=" => a >= b,
            "<=" => a <= b,
            ">" => a > b,
            "<" => a < b,
            "==" => a == b,
            _ => a != b,
        },
        _ => match op {
            "==" => found == want,
            "!=" => found != want,
            _ => false,
        },
    };
    let word = if pass { "passed" } else { "failed" };
    CheckVerdict {
        line: format!("check {word}: {canonical} (found {found})"),
        check: canonical,
        outcome: if pass {
            CheckOutcome::Passed
        } else {
            CheckOutcome::Failed
        },
        found: Some(found),
        extra: Default::default(),
    }
}

/// `1.1G`, `512K`, `300B`.
pub(crate) fn format_bytes_short(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["K", "M", "G", "T"];
    if bytes < 1000 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1000.0;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1}{}", UNITS[unit])
    } else {
        format!("{value:.0}{}", UNITS[unit])
    }
}

/// Whether `name` is a valid volume name.
pub(crate) fn valid_volume_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric()
}

/// Every `/mnt/<name>` literally in `command`.
pub(crate) fn volumes_named(command: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (i, _) in command.match_indices("/mnt/") {
        let rest = &command[i + 5..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
            .collect();
        if valid_volume_name(&name) && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Refuses a tree whose paths are unsafe.
pub(crate) fn validate_entries(entries: &[TreeEntry]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for e in entries {
        let p = &e.path;
        if p.is_empty()
            || p.starts_with('/')
            || p.contains('\0')
            || p.split('/').any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(format!("`{p}` is not a relative path inside the tree"));
        }
        if !seen.insert(p.clone()) {
            return Err(format!("`{p}` is listed twice"));
        }
        if let Some(t) = &e.target
            && (t.starts_with('/') || t.split('/').any(|c| c == ".."))
        {
            return Err(format!("the link `{p}` points outside the tree"));
        }
    }
    Ok(())
}

/// Writes the tree into `dest`, all or nothing.
pub(crate) fn materialise(
    entries: &[TreeEntry],
    blob_path: impl Fn(&str) -> PathBuf,
    dest: &Path,
) -> Result<(), String> {
    validate_entries(entries)?;
    let parent = dest.parent().ok_or("no parent")?;
    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    let tmp = parent.join(format!(".tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&tmp)?;
        for e in entries {
            let at = tmp.join(&e.path);
            if let Some(p) = at.parent() {
                std::fs::create_dir_all(p)?;
            }
            match (&e.hash, &e.target) {
                (_, Some(t)) => std::os::unix::fs::symlink(t, &at)?,
                (Some(h), None) => {
                    std::fs::copy(blob_path(h), &at)?;
                    use std::os::unix::fs::PermissionsExt;
                    let mode = if e.executable { 0o755 } else { 0o644 };
                    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode))?;
                }
                (None, None) => std::fs::write(&at, b"")?,
            }
        }
        std::fs::rename(&tmp, dest)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_dir_all(&tmp);
        e.to_string()
    })
}
