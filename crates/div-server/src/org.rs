//! The org usage limit of the local control plane: dollars per calendar month (UTC) across
//! all runs, in integer cents, set in `home/settings.json` as
//! `{"org_usage_limit_cents": 50000}` and read again on every pass of the scheduler, so a
//! change needs no restart. No file, or no such key, is no limit.
//!
//! A run counts in the month it was placed (`created_at`): an ended run with what it spent,
//! a running one with what it has spent so far. When the month's spend reaches the limit,
//! every running run is stopped with status `stopped_by_org`, queued runs wait, and new runs
//! are refused with the limit and the month's spend.

use std::path::Path;

use div_api::RunStatus;
use div_spec::Money;
use serde::Serialize;

use crate::rules;
use crate::settings::{SETTINGS_FILE, Settings, SettingsError};
use crate::store::{Store, StoreError};
use div_runtime::clock::{self, now_ms};

/// The month's spend against the limit: the catalogue's `org_usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Usage {
    pub(crate) limit_cents: i64,
    pub(crate) spent_cents: i64,
    /// `2026-11`: the calendar month, UTC.
    pub(crate) month: String,
    pub(crate) reached: bool,
}

impl Usage {
    /// `org usage limit of $500.00 reached`: the reason of a run it stops.
    pub(crate) fn reason(&self) -> String {
        format!(
            "org usage limit of {} reached",
            Money::from_cents(self.limit_cents)
        )
    }

    /// Why a new run is refused: the limit, the month's spend, and what would let it run.
    pub(crate) fn refusal(&self, home: &Path) -> String {
        format!(
            "the org usage limit of {} is reached: {} spent in {}; no run starts until the month ends or the limit is raised (`org_usage_limit_cents` in `{}`)",
            Money::from_cents(self.limit_cents),
            Money::from_cents(self.spent_cents),
            self.month,
            home.join(SETTINGS_FILE).display()
        )
    }
}

/// The limit in `home/settings.json`: `Ok(None)` when none is set; an error says what is wrong
/// with the file.
pub(crate) fn limit(home: &Path) -> Result<Option<i64>, SettingsError> {
    Settings::read(home).map(|s| s.org_usage_limit_cents)
}

/// The error returned by [`usage`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum UsageError {
    /// The settings file cannot be read: the caller says so and takes it as no limit.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The month's usage, when a limit is set in `home`'s settings.
pub(crate) fn usage(home: &Path, store: &Store) -> Result<Option<Usage>, UsageError> {
    let Some(limit_cents) = limit(home)? else {
        return Ok(None);
    };
    let now = clock::now_rfc3339();
    let month = now.get(..7).unwrap_or_default().to_owned();
    let from = format!("{month}-01T00:00:00Z");
    let ended = store.spent_in_ended_runs_since(&from)?;
    let mut running = 0i64;
    let now_ms = now_ms();
    for record in store.runs_with_status(RunStatus::Running)? {
        if record.run.created_at.as_str() < from.as_str() {
            continue;
        }
        if let Some(started) = record.internal.started_ms {
            let seconds = now_ms.saturating_sub(started) / 1000;
            running += rules::charge(
                record.run.cents_per_hour,
                seconds,
                record.run.max_spend_cents,
            );
        }
    }
    let spent_cents = ended.saturating_add(running);
    Ok(Some(Usage {
        limit_cents,
        spent_cents,
        month,
        reached: spent_cents >= limit_cents,
    }))
}

/// The file that tells a run's supervisor it is stopped by the org, holding the reason.
pub(crate) use div_runtime::supervisor::ORG_STOP_FILE as STOP_FILE;

/// The error returned by [`set_limit`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetLimitError {
    #[error("a monthly limit is 0 cents or more, not {0}")]
    Negative(i64),
    /// The settings file is there and cannot be read: it is left as it is.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("could not write `{}`", path.display())]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Sets (`None`: removes) `org_usage_limit_cents` in `home/settings.json`, its other keys
/// kept: written whole beside it, then renamed into place (readable by the server's user
/// only), so the scheduler's next pass reads either the old file or the new one.
pub(crate) fn set_limit(home: &Path, cents: Option<i64>) -> Result<Option<i64>, SetLimitError> {
    if let Some(c) = cents.filter(|c| *c < 0) {
        return Err(SetLimitError::Negative(c));
    }
    // Refused as the server would read it: a file it cannot read is not overwritten.
    Settings::read(home)?;
    let path = home.join(SETTINGS_FILE);
    let mut map: serde_json::Map<String, serde_json::Value> = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    match cents {
        Some(c) => map.insert("org_usage_limit_cents".to_owned(), c.into()),
        None => map.remove("org_usage_limit_cents"),
    };
    let write = |source| SetLimitError::Write {
        path: path.clone(),
        source,
    };
    let partial = home.join(format!("{SETTINGS_FILE}.partial"));
    let text = serde_json::to_vec_pretty(&map).unwrap_or_default();
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .map_err(write)?;
        std::io::Write::write_all(&mut f, &text).map_err(write)?;
        f.sync_all().map_err(write)?;
    }
    std::fs::rename(&partial, &path).map_err(write)?;
    Ok(limit(home)?)
}

#[cfg(test)]
mod tests {
    use super::{limit, set_limit};

    #[test]
    fn the_limit_is_set_and_removed_keeping_the_other_settings() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(set_limit(dir.path(), Some(5000)).unwrap(), Some(5000));
        assert_eq!(limit(dir.path()).unwrap(), Some(5000));
        std::fs::write(
            dir.path().join("settings.json"),
            r#"{"org_usage_limit_cents": 1, "stop_grace_seconds": 3}"#,
        )
        .unwrap();
        assert_eq!(set_limit(dir.path(), None).unwrap(), None);
        let settings = crate::settings::Settings::read(dir.path()).unwrap();
        assert_eq!(settings.stop_grace_seconds, Some(3));
        assert!(set_limit(dir.path(), Some(-1)).is_err());
        std::fs::write(dir.path().join("settings.json"), "{").unwrap();
        assert!(set_limit(dir.path(), Some(1)).is_err());
        assert_eq!(
            std::fs::read(dir.path().join("settings.json")).unwrap(),
            b"{"
        );
    }
}
