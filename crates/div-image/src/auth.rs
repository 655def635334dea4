//! Registry credentials, read from where docker, podman and skopeo keep them.
//!
//! The library reads no environment variable: the CLI passes what it found in
//! `REGISTRY_AUTH_FILE`, `XDG_RUNTIME_DIR`, `DOCKER_CONFIG` and `HOME` as a
//! [`CredentialSources`], and [`Credentials::load`] reads the files in the order
//! podman and skopeo do.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;

/// A user name and password (or token) for one registry. The secret is redacted in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The user name.
    pub username: String,
    /// The password or access token.
    pub password: String,
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Logins by registry host (`docker.io`, `ghcr.io`, `127.0.0.1:5000`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    logins: BTreeMap<String, Login>,
}

/// Where credentials may be: the values of the environment variables docker, podman and
/// skopeo read, resolved by the caller.
#[derive(Debug, Clone, Default)]
pub struct CredentialSources {
    /// `REGISTRY_AUTH_FILE`: read first when set.
    pub registry_auth_file: Option<PathBuf>,
    /// `XDG_RUNTIME_DIR`: podman's `$XDG_RUNTIME_DIR/containers/auth.json`.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// `DOCKER_CONFIG`: the directory of docker's `config.json` (else `$HOME/.docker`).
    pub docker_config_dir: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
}

/// The error returned by [`Credentials::load`] and [`Credentials::from_json`].
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    /// The file exists but could not be read.
    #[error("cannot read the credentials file `{path}`")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not the JSON docker writes.
    #[error(
        "the credentials file `{path}` is not valid: {why}; expected docker's `{{\"auths\": {{\"registry\": {{\"auth\": \"base64(user:password)\"}}}}}}`"
    )]
    Invalid {
        /// The file (or `<inline>`).
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
}

#[derive(serde::Deserialize)]
struct AuthFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(serde::Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// The registry host an `auths` key names: docker writes `https://index.docker.io/v1/` for
/// Docker Hub and may write a scheme and path for others.
pub(crate) fn normalise_registry_key(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            crate::reference::DOCKER_HUB.to_owned()
        }
        other => other.to_owned(),
    }
}

impl Credentials {
    /// No credentials: every pull is anonymous.
    pub fn none() -> Credentials {
        Credentials::default()
    }

    /// Adds (or replaces) the login for `registry`.
    pub fn insert(&mut self, registry: &str, login: Login) {
        self.logins.insert(normalise_registry_key(registry), login);
    }

    /// The login for `registry`, if any.
    pub fn get(&self, registry: &str) -> Option<&Login> {
        self.logins.get(&normalise_registry_key(registry))
    }

    /// Parses a docker `config.json` or containers `auth.json`. Entries kept in a
    /// credential helper (`credsStore`, `credHelpers`) are not read.
    pub fn from_json(json: &str, path: &Path) -> Result<Credentials, AuthFileError> {
        let invalid = |why: String| AuthFileError::Invalid {
            path: path.to_owned(),
            why,
        };
        let file: AuthFile = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
        let mut creds = Credentials::default();
        for (key, entry) in file.auths {
            let login = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) if !auth.is_empty() => {
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|e| {
                            invalid(format!("the `auth` of `{key}` is not base64 ({e})"))
                        })?;
                    let text = String::from_utf8(raw)
                        .map_err(|_| invalid(format!("the `auth` of `{key}` is not UTF-8")))?;
                    let (u, p) = text.split_once(':').ok_or_else(|| {
                        invalid(format!("the `auth` of `{key}` is not `user:password`"))
                    })?;
                    Login {
                        username: u.to_owned(),
                        password: p.to_owned(),
                    }
                }
                (_, Some(username), Some(password)) => Login { username, password },
                _ => continue,
            };
            creds
                .logins
                .entry(normalise_registry_key(&key))
                .or_insert(login);
        }
        Ok(creds)
    }

    /// Reads every credentials file `sources` names, in podman's order:
    /// `REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers/auth.json`, then docker's
    /// `config.json`. The first file naming a registry wins. Missing files are skipped.
    pub fn load(sources: &CredentialSources) -> Result<Credentials, AuthFileError> {
        let mut files = Vec::new();
        files.extend(sources.registry_auth_file.clone());
        if let Some(x) = &sources.xdg_runtime_dir {
            files.push(x.join("containers/auth.json"));
        }
        match (&sources.docker_config_dir, &sources.home) {
            (Some(d), _) => files.push(d.join("config.json")),
            (None, Some(h)) => files.push(h.join(".docker/config.json")),
            (None, None) => {}
        }
        let mut all = Credentials::default();
        for path in files {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(AuthFileError::Read { path, source }),
            };
            let found = Credentials::from_json(&text, &path)?;
            for (k, v) in found.logins {
                all.logins.entry(k).or_insert(v);
            }
        }
        Ok(all)
    }

    pub(crate) fn registry_auth(&self, registry: &str) -> oci_client::secrets::RegistryAuth {
        match self.get(registry) {
            Some(l) => {
                oci_client::secrets::RegistryAuth::Basic(l.username.clone(), l.password.clone())
            }
            None => oci_client::secrets::RegistryAuth::Anonymous,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_docker_and_podman_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:with:colons");
        std::fs::create_dir_all(dir.path().join("home/.docker")).unwrap();
        std::fs::write(
            dir.path().join("home/.docker/config.json"),
            format!(r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{auth}"}}, "ghcr.io": {{"auth": "{auth}"}}}}, "credsStore": "desktop"}}"#),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("auth.json"),
            r#"{"auths": {"ghcr.io": {"username": "bob", "password": "pw"}}}"#,
        )
        .unwrap();
        let creds = Credentials::load(&CredentialSources {
            registry_auth_file: Some(dir.path().join("auth.json")),
            xdg_runtime_dir: Some(dir.path().join("nope")),
            docker_config_dir: None,
            home: Some(dir.path().join("home")),
        })
        .unwrap();
        let hub = creds.get("docker.io").unwrap();
        assert_eq!(
            (hub.username.as_str(), hub.password.as_str()),
            ("alice", "s3cret:with:colons")
        );
        assert_eq!(creds.get("ghcr.io").unwrap().username, "bob");
        assert!(creds.get("quay.io").is_none());
        assert!(!format!("{creds:?}").contains("s3cret"));
    }

    #[test]
    fn a_broken_file_says_which_and_why() {
        let err = Credentials::from_json(
            r#"{"auths": {"x.io": {"auth": "%%%"}}}"#,
            Path::new("/c.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "the credentials file `/c.json` is not valid: the `auth` of `x.io` is not base64"
            ),
            "{err}"
        );
    }
}
