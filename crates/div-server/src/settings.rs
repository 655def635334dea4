//! `home/settings.json`: the local control plane's settings that can change while it runs,
//! read again wherever they are used (each pass of the scheduler, each launch), so a change
//! needs no restart. No file is all defaults; an unknown key is refused, so a misspelt one
//! is said rather than ignored.
//!
//! ```json
//! {"org_usage_limit_cents": 50000, "stop_grace_seconds": 30, "max_run_seconds": 3600,
//!  "keep_code_snapshots": 10}
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::rules;

/// The settings file under the state directory.
pub(crate) const SETTINGS_FILE: &str = "settings.json";

/// What `home/settings.json` holds.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Settings {
    /// Dollars per calendar month across all runs, in cents (see `org`).
    pub(crate) org_usage_limit_cents: Option<i64>,
    /// Between SIGTERM and SIGKILL when a run is told to stop; a run's own
    /// `DIVERGENT_STOP_GRACE` wins. At most [`rules::MAX_STOP_GRACE_SECONDS`].
    pub(crate) stop_grace_seconds: Option<u64>,
    /// The longest a run is given on this machine, at most 24 hours (the default).
    pub(crate) max_run_seconds: Option<u64>,
    /// How many code snapshots a project keeps, the most recently used (see
    /// `volumes::retention`), 1 to [`MAX_KEEP_CODE_SNAPSHOTS`]; 10 by default.
    pub(crate) keep_code_snapshots: Option<u64>,
    /// Each run's disk for its `/tmp`, its own `/mnt` and its `/workspace`, in GiB, 1 to
    /// [`MAX_RUN_DISK_GIB`]; by default 16, or an eighth of the state directory's filesystem
    /// where that is less (`scratch`).
    pub(crate) run_disk_gib: Option<u64>,
    /// The most an image may unpack to, in GiB, 1 to [`MAX_IMAGE_GIB`]; 64 by default
    /// (div-image's `UnpackLimits`, read by `images` at each pull).
    pub(crate) max_image_gib: Option<u64>,
    /// The team's listener (docs/team.md), `"0.0.0.0:8443"`: read once, when the server
    /// starts, where `div server run --listen` does not say it.
    pub(crate) listen: Option<String>,
    /// Its TLS certificate chain and key (PEM), both or neither.
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    pub(crate) tls_key: Option<std::path::PathBuf>,
}

/// The most GiB `run_disk_gib` may give a run.
pub(crate) const MAX_RUN_DISK_GIB: u64 = 65_536;

/// The most code snapshots a setting may keep.
pub(crate) const MAX_KEEP_CODE_SNAPSHOTS: u64 = 100_000;

/// How many code snapshots a project keeps when the settings do not say.
pub(crate) const DEFAULT_KEEP_CODE_SNAPSHOTS: u64 = 10;

/// The error returned by [`Settings::read`]: what is wrong with the file and how to write it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SettingsError {
    #[error("could not read `{}`: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "`{}` is not valid settings ({source}); write it like {{\"org_usage_limit_cents\": 50000, \"stop_grace_seconds\": 10, \"max_run_seconds\": 86400}}",
        path.display()
    )]
    NotSettings {
        path: std::path::PathBuf,
        source: serde_json::Error,
    },
    /// A key's value out of its range: `want` says what it is.
    #[error("`{key}` in `{}` is {value}; it is {want}", path.display())]
    OutOfRange {
        key: &'static str,
        path: std::path::PathBuf,
        value: String,
        want: String,
    },
}

impl Settings {
    /// The settings in `home/settings.json`; an error says what is wrong with the file and
    /// how to write it.
    pub(crate) fn read(home: &Path) -> Result<Settings, SettingsError> {
        let path = home.join(SETTINGS_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settings::default()),
            Err(source) => return Err(SettingsError::Read { path, source }),
        };
        let settings: Settings = match serde_json::from_slice(&bytes) {
            Ok(settings) => settings,
            Err(source) => return Err(SettingsError::NotSettings { path, source }),
        };
        let bad = |key: &'static str, value: String, want: String| {
            Err(SettingsError::OutOfRange {
                key,
                path: path.clone(),
                value,
                want,
            })
        };
        if let Some(c) = settings.org_usage_limit_cents
            && c < 0
        {
            return bad(
                "org_usage_limit_cents",
                c.to_string(),
                "a count of cents, 0 or more".to_owned(),
            );
        }
        if let Some(g) = settings.stop_grace_seconds
            && g > rules::MAX_STOP_GRACE_SECONDS
        {
            return bad(
                "stop_grace_seconds",
                g.to_string(),
                format!("seconds, 0 to {}", rules::MAX_STOP_GRACE_SECONDS),
            );
        }
        if let Some(m) = settings.max_run_seconds
            && !(1..=rules::MAX_RUN_SECONDS).contains(&m)
        {
            return bad(
                "max_run_seconds",
                m.to_string(),
                format!("seconds, 1 to {} (24 hours)", rules::MAX_RUN_SECONDS),
            );
        }
        if let Some(k) = settings.keep_code_snapshots
            && !(1..=MAX_KEEP_CODE_SNAPSHOTS).contains(&k)
        {
            return bad(
                "keep_code_snapshots",
                k.to_string(),
                format!("a count of snapshots, 1 to {MAX_KEEP_CODE_SNAPSHOTS}"),
            );
        }
        if let Some(g) = settings.run_disk_gib
            && !(1..=MAX_RUN_DISK_GIB).contains(&g)
        {
            return bad(
                "run_disk_gib",
                g.to_string(),
                format!("whole GiB, 1 to {MAX_RUN_DISK_GIB}"),
            );
        }
        if let Some(g) = settings.max_image_gib
            && !(1..=MAX_IMAGE_GIB).contains(&g)
        {
            return bad(
                "max_image_gib",
                g.to_string(),
                format!("GiB, 1 to {MAX_IMAGE_GIB}"),
            );
        }
        if let Some(l) = &settings.listen
            && l.parse::<std::net::SocketAddr>().is_err()
        {
            return bad(
                "listen",
                format!("`{l}`"),
                "an address and port, like `0.0.0.0:8443` or `[::]:8443`".to_owned(),
            );
        }
        if settings.tls_cert.is_some() != settings.tls_key.is_some() {
            let (key, value) = match &settings.tls_cert {
                Some(c) => (
                    "tls_key",
                    format!("absent beside `tls_cert` `{}`", c.display()),
                ),
                None => ("tls_cert", "absent beside `tls_key`".to_owned()),
            };
            return bad(key, value, "given with the other, or neither is".to_owned());
        }
        Ok(settings)
    }

    /// How many code snapshots each project keeps.
    pub(crate) fn keep_code_snapshots(&self) -> usize {
        self.keep_code_snapshots
            .unwrap_or(DEFAULT_KEEP_CODE_SNAPSHOTS) as usize
    }

    /// The grace the server gives a run that does not set its own.
    pub(crate) fn stop_grace_seconds(&self) -> u64 {
        self.stop_grace_seconds
            .unwrap_or(rules::DEFAULT_STOP_GRACE_SECONDS)
    }

    /// The longest a run is given.
    pub(crate) fn max_run_seconds(&self) -> u64 {
        self.max_run_seconds.unwrap_or(rules::MAX_RUN_SECONDS)
    }

    /// The team's listener these settings ask for, if any.
    pub(crate) fn team(&self) -> Option<crate::TeamListen> {
        let addr = self.listen.as_deref()?.parse().ok()?;
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(crate::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        Some(crate::TeamListen { addr, tls })
    }

    /// The most bytes an image may unpack to.
    pub(crate) fn max_image_bytes(&self) -> u64 {
        self.max_image_gib
            .map_or(div_image::UnpackLimits::DEFAULT_MAX_BYTES, |g| g << 30)
    }
}

/// The most GiB `max_image_gib` may say (64 TiB).
pub(crate) const MAX_IMAGE_GIB: u64 = 65_536;

#[cfg(test)]
mod tests {
    use super::Settings;

    fn with(text: &str) -> Result<Settings, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("settings.json"), text).unwrap();
        Settings::read(dir.path()).map_err(|e| e.to_string())
    }

    #[test]
    fn no_file_is_every_default() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings::read(dir.path()).unwrap();
        assert_eq!(settings, Settings::default());
        assert_eq!(settings.stop_grace_seconds(), 10);
        assert_eq!(settings.max_run_seconds(), 86_400);
        assert_eq!(settings.keep_code_snapshots(), 10);
    }

    #[test]
    fn the_team_listener_is_read_with_its_certificate_and_key() {
        let s = with(r#"{"listen": "0.0.0.0:8443", "tls_cert": "/c.pem", "tls_key": "/k.pem"}"#)
            .unwrap();
        let team = s.team().expect("a listener");
        assert_eq!(team.addr.to_string(), "0.0.0.0:8443");
        assert_eq!(
            team.tls.map(|t| (t.cert, t.key)),
            Some(("/c.pem".into(), "/k.pem".into()))
        );
        assert_eq!(
            with(r#"{"listen": "127.0.0.1:9"}"#)
                .unwrap()
                .team()
                .unwrap()
                .tls,
            None
        );
        let err = with(r#"{"listen": "somewhere"}"#).unwrap_err();
        assert!(
            err.contains("`listen`") && err.contains("`0.0.0.0:8443`"),
            "{err}"
        );
        let err = with(r#"{"listen": "0.0.0.0:1", "tls_cert": "/c.pem"}"#).unwrap_err();
        assert!(err.contains("`tls_key`"), "{err}");
    }

    #[test]
    fn max_image_gib_is_read_and_bounded() {
        assert_eq!(Settings::default().max_image_bytes(), 64 << 30);
        assert_eq!(
            with(r#"{"max_image_gib": 8}"#).unwrap().max_image_bytes(),
            8 << 30
        );
        for bad in ["0", "65537", "-1", "1.5"] {
            let err = with(&format!(r#"{{"max_image_gib": {bad}}}"#)).unwrap_err();
            assert!(
                err.contains("max_image_gib") || err.contains("invalid"),
                "{bad}: {err}"
            );
        }
        let err = with(r#"{"max_image_gib": 0}"#).unwrap_err();
        assert!(err.contains("is 0; it is GiB, 1 to 65536"), "{err}");
    }

    #[test]
    fn each_key_is_read_and_a_bad_one_says_what_is_wrong() {
        let s = with(
            r#"{"org_usage_limit_cents": 500, "stop_grace_seconds": 0, "max_run_seconds": 60}"#,
        )
        .unwrap();
        assert_eq!(s.org_usage_limit_cents, Some(500));
        assert_eq!(s.stop_grace_seconds(), 0);
        assert_eq!(s.max_run_seconds(), 60);
        let err = with(r#"{"org_limit": 500}"#).unwrap_err();
        assert!(err.contains("unknown field `org_limit`"), "{err}");
        assert!(err.contains(r#"{"org_usage_limit_cents": 50000"#), "{err}");
        assert!(
            with(r#"{"org_usage_limit_cents": -1}"#)
                .unwrap_err()
                .contains("0 or more")
        );
        let err = with(r#"{"stop_grace_seconds": 601}"#).unwrap_err();
        assert!(
            err.contains("`stop_grace_seconds`") && err.contains("0 to 600"),
            "{err}"
        );
        let err = with(r#"{"max_run_seconds": 0}"#).unwrap_err();
        assert!(err.contains("1 to 86400 (24 hours)"), "{err}");
        let err = with(r#"{"max_run_seconds": 90000}"#).unwrap_err();
        assert!(err.contains("`max_run_seconds`"), "{err}");
        assert!(with(r#"{"stop_grace_seconds": -3}"#).is_err());
        assert_eq!(
            with(r#"{"keep_code_snapshots": 3}"#)
                .unwrap()
                .keep_code_snapshots(),
            3
        );
        let err = with(r#"{"keep_code_snapshots": 0}"#).unwrap_err();
        assert!(
            err.contains("`keep_code_snapshots`") && err.contains("1 to 100000"),
            "{err}"
        );
    }
}
