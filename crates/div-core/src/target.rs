//! Which control plane a program talks to, resolved the way `div` resolves it: an address
//! from the environment, else from the nearest `divergent.json`, else from the user's config
//! file; none of them, the local control plane. The caller reads the environment and says
//! where the files are; nothing here reads an environment variable.
//!
//! ```no_run
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::path::Path;
//! let dir = Path::new("/home/me/very-cool-classifier");
//! let user = div_core::user_config_path(None, Some(Path::new("/home/me")));
//! let user = match &user {
//!     Some(path) => div_core::read_config_file(path)?,
//!     None => None,
//! };
//! let project = div_core::find_project_file(dir)?;
//! let target = div_core::resolve_target(
//!     std::env::var("DIVERGENT_API_URL").ok(),
//!     std::env::var("DIVERGENT_TOKEN").ok(),
//!     project.as_ref().map(|(p, m)| (p.as_path(), m)),
//!     user.as_ref().map(|(p, m)| (p.as_path(), m)),
//! )?;
//! # let _ = target;
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::project::ProjectFile;

/// Which control plane to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A remote one (`DIVERGENT_API_URL`, or `api_url` in a config file), with its token.
    Remote {
        url: String,
        token: Option<String>,
        /// Where the URL came from, for error messages.
        from: String,
    },
    /// The local control plane, on a Unix socket in its home, started on demand
    /// (`div_server::LocalControlPlane`).
    Local,
}

/// A config file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("could not read `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` is not valid JSON", path.display())]
    NotJson {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("`{}` is not a JSON object", path.display())]
    NotAnObject { path: PathBuf },
    /// A field that must be a string is something else.
    #[error("`{key}` in `{}` is not a string", path.display())]
    NotAString { key: String, path: PathBuf },
}

/// A config file, borrowed: its path and its fields.
pub type ConfigFileRef<'a> = (&'a Path, &'a Map<String, Value>);

/// The user's config file, `$XDG_CONFIG_HOME/div/config.json` (else
/// `$HOME/.config/div/config.json`), from the values the caller read; `None` with neither.
pub fn user_config_path(xdg_config_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    xdg_config_home
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".config")))
        .map(|c| c.join("div/config.json"))
}

/// The local control plane's default home, `$XDG_DATA_HOME/div` (else
/// `$HOME/.local/share/div`), from the values the caller read; `None` with neither.
pub fn default_local_home(xdg_data_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    xdg_data_home
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".local/share")))
        .map(|d| d.join("div"))
}

/// A JSON config file as an object; `None` when there is no such file.
pub fn read_config_file(path: &Path) -> Result<Option<ProjectFile>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    match serde_json::from_str(&text) {
        Ok(Value::Object(map)) => Ok(Some((path.to_path_buf(), map))),
        Ok(_) => Err(ConfigError::NotAnObject {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(ConfigError::NotJson {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `env_url` (`DIVERGENT_API_URL`), else `api_url` in the project file, else in the user's
/// config; the token from `env_token` (`DIVERGENT_TOKEN`), else the user's config. No
/// address anywhere: the local control plane.
pub fn resolve_target(
    env_url: Option<String>,
    env_token: Option<String>,
    project_file: Option<ConfigFileRef<'_>>,
    user_config: Option<ConfigFileRef<'_>>,
) -> Result<Target, ConfigError> {
    let field = |file: Option<ConfigFileRef<'_>>,
                 key: &str|
     -> Result<Option<(String, String)>, ConfigError> {
        let Some((path, map)) = file else {
            return Ok(None);
        };
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some((s.clone(), path.display().to_string()))),
            Some(_) => Err(ConfigError::NotAString {
                key: key.to_string(),
                path: path.to_path_buf(),
            }),
        }
    };
    let url = match env_url {
        Some(url) => Some((url, "DIVERGENT_API_URL".to_string())),
        None => match field(project_file, "api_url")? {
            Some(found) => Some(found),
            None => field(user_config, "api_url")?,
        },
    };
    let token = match env_token {
        Some(t) => Some(t),
        None => field(user_config, "token")?.map(|(t, _)| t),
    };
    Ok(match url {
        Some((url, from)) => Target::Remote { url, token, from },
        None => Target::Local,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_places_follow_xdg_then_home() {
        let (xdg, home) = (Path::new("/x"), Path::new("/h"));
        assert_eq!(
            user_config_path(Some(xdg), Some(home)),
            Some(PathBuf::from("/x/div/config.json"))
        );
        assert_eq!(
            user_config_path(None, Some(home)),
            Some(PathBuf::from("/h/.config/div/config.json"))
        );
        assert_eq!(
            default_local_home(None, Some(home)),
            Some(PathBuf::from("/h/.local/share/div"))
        );
        assert_eq!(default_local_home(None, None), None);
    }

    #[test]
    fn a_config_file_is_an_object_or_says_why_not() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let path = tmp.path().join("config.json");
        assert!(read_config_file(&path).expect("absent is fine").is_none());
        std::fs::write(&path, "[1]").expect("write");
        let err = read_config_file(&path).expect_err("not an object");
        assert_eq!(
            err.to_string(),
            format!("`{}` is not a JSON object", path.display())
        );
        std::fs::write(&path, "{").expect("write");
        let err = read_config_file(&path).expect_err("not JSON");
        assert_eq!(
            err.to_string(),
            format!("`{}` is not valid JSON", path.display())
        );
        std::fs::write(
            &path,
            r#"{"api_url": "https://api.example.com", "token": "t"}"#,
        )
        .expect("write");
        let (_, map) = read_config_file(&path).expect("read").expect("present");
        let target = resolve_target(None, None, None, Some((path.as_path(), &map))).expect("ok");
        assert_eq!(
            target,
            Target::Remote {
                url: "https://api.example.com".into(),
                token: Some("t".into()),
                from: path.display().to_string(),
            }
        );
    }
}
