//! Everything `div` takes from its surroundings, resolved once: flags > environment >
//! config files > defaults. The only module that reads the environment.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Which control plane `div` talks to: div-core's resolution, shared with any program that
/// embeds it.
pub(crate) use div_core::Target;

/// What `div` resolved from its environment and config files.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The directory `div` was started in.
    pub(crate) cwd: PathBuf,
    pub(crate) target: Target,
    /// `DIVERGENT_HOME`: the local control plane's state (default `$XDG_DATA_HOME/div`).
    pub(crate) home: PathBuf,
    /// `DIVERGENT_PROJECT`.
    pub(crate) project: Option<String>,
    /// `DIVERGENT_EMULATE_GPUS`, passed to a local control plane started on demand.
    pub(crate) emulate_gpus: Option<String>,
    /// Where div-ship keeps its hash cache (`$XDG_CACHE_HOME/div/ship`).
    pub(crate) cache_dir: Option<PathBuf>,
    /// `DIVERGENT_API_TIMEOUT` (seconds): how long one call to the control plane may take,
    /// retries included.
    pub(crate) deadline: Option<std::time::Duration>,
    /// Whether stderr may be coloured: `NO_COLOR` unset, and `CLICOLOR_FORCE` set or stderr a
    /// terminal that takes colour.
    pub(crate) color: bool,
    /// `$XDG_CONFIG_HOME/div/config.json`, where `div login` writes.
    pub(crate) user_config: Option<PathBuf>,
    /// Each setting, its value and where it came from, for `div config`.
    pub(crate) sources: Vec<Source>,
    /// `DIVERGENT_TIMINGS=1`: `div run` ends with a line of how long each step took.
    pub(crate) timings: bool,
    /// `GIT_DIR` and `GIT_WORK_TREE`, made absolute from `cwd`: what `div run` ships from, as
    /// git would take them.
    pub(crate) git_dir: Option<PathBuf>,
    pub(crate) git_work_tree: Option<PathBuf>,
    /// What `div server run` reads for its images.
    pub(crate) images: ImageEnv,
    /// `COLUMNS`, when it is a width: how wide `div runs` draws its table, terminal or not.
    pub(crate) columns: Option<usize>,
}

/// The environment `div server run` takes its image settings from.
#[derive(Debug, Clone, Default)]
pub(crate) struct ImageEnv {
    /// `DIVERGENT_DEFAULT_IMAGE`: `host` (default) or `pull`.
    pub(crate) default_image: Option<String>,
    /// `DIVERGENT_INSECURE_REGISTRIES`: comma-separated `host:port`s.
    pub(crate) insecure_registries: Option<String>,
    /// `REGISTRY_AUTH_FILE`, `XDG_RUNTIME_DIR`, `DOCKER_CONFIG`, `HOME`: where logins are.
    pub(crate) registry_auth_file: Option<String>,
    pub(crate) xdg_runtime_dir: Option<String>,
    pub(crate) docker_config: Option<String>,
    pub(crate) home: Option<String>,
}

/// One resolved setting, for `div config`. Secret values are never kept here.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Source {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) from: String,
}

/// How a token is shown.
pub(crate) const REDACTED: &str = "<redacted>";

/// Reads an environment variable, treating an empty one as unset.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A path from an environment variable (any bytes), relative ones from `cwd`; empty is unset.
fn env_path(name: &str, cwd: &Path) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(|v| cwd.join(v))
}

/// A config file read: where it is, and its fields.
type ConfigFile = (PathBuf, serde_json::Map<String, serde_json::Value>);

impl Settings {
    /// Resolve the settings from the process's environment.
    pub(crate) fn from_env() -> Result<Settings> {
        let cwd = std::env::current_dir().context("could not read the current directory")?;
        let home_dir = env("HOME").map(PathBuf::from);
        let xdg = |var: &str, fallback: &str| {
            env(var)
                .map(PathBuf::from)
                .or_else(|| home_dir.as_ref().map(|h| h.join(fallback)))
        };
        let cache = xdg("XDG_CACHE_HOME", ".cache");
        let user_config_path = div_core::user_config_path(
            env("XDG_CONFIG_HOME").map(PathBuf::from).as_deref(),
            home_dir.as_deref(),
        );

        let home = match env("DIVERGENT_HOME") {
            Some(h) => PathBuf::from(h),
            None => div_core::default_local_home(
                env("XDG_DATA_HOME").map(PathBuf::from).as_deref(),
                home_dir.as_deref(),
            )
            .context(
                "neither DIVERGENT_HOME nor HOME is set, so div has nowhere to keep its state",
            )?,
        };
        let user_config = match &user_config_path {
            Some(path) => read_json(path)?,
            None => None,
        };
        let project_file = div_core::find_project_file(&cwd)?;
        let target = resolve_target(
            env("DIVERGENT_API_URL"),
            env("DIVERGENT_TOKEN"),
            project_file.as_ref().map(|(p, m)| (p.as_path(), m)),
            user_config.as_ref().map(|(p, m)| (p.as_path(), m)),
        )?;
        // anstream's reading of the conventions: `NO_COLOR` wins, then `CLICOLOR_FORCE`, then
        // `CLICOLOR=0`, then whether stderr is a terminal that takes colour.
        let color =
            anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never;
        let deadline = match env("DIVERGENT_API_TIMEOUT") {
            Some(t) => Some(std::time::Duration::from_secs(t.parse().with_context(
                || format!("DIVERGENT_API_TIMEOUT is `{t}`, not a whole number of seconds"),
            )?)),
            None => None,
        };
        let git_dir = env_path("GIT_DIR", &cwd);
        let git_work_tree = env_path("GIT_WORK_TREE", &cwd);
        let mut settings = Settings {
            user_config: user_config_path,
            sources: Vec::new(),
            cwd,
            deadline,
            target,
            home,
            project: env("DIVERGENT_PROJECT"),
            emulate_gpus: env("DIVERGENT_EMULATE_GPUS"),
            cache_dir: cache.map(|c| c.join("div")),
            color,
            timings: env("DIVERGENT_TIMINGS").is_some_and(|v| v != "0"),
            columns: env("COLUMNS")
                .and_then(|c| c.trim().parse::<usize>().ok())
                .filter(|c| *c > 0),
            git_dir,
            git_work_tree,
            images: ImageEnv {
                default_image: env("DIVERGENT_DEFAULT_IMAGE"),
                insecure_registries: env("DIVERGENT_INSECURE_REGISTRIES"),
                registry_auth_file: env("REGISTRY_AUTH_FILE"),
                xdg_runtime_dir: env("XDG_RUNTIME_DIR"),
                docker_config: env("DOCKER_CONFIG"),
                home: env("HOME"),
            },
        };
        settings.sources = sources(&settings, user_config.as_ref());
        Ok(settings)
    }
}

/// Each setting resolved, its value and where it came from, for `div config`; `user_config`
/// is the user's config file, when it was read.
fn sources(settings: &Settings, user_config: Option<&ConfigFile>) -> Vec<Source> {
    let mut sources = Vec::new();
    let mut add = |name, value: String, from: String| sources.push(Source { name, value, from });
    match &settings.target {
        Target::Remote { url, from, .. } => add("api_url", url.clone(), from.clone()),
        Target::Local => add(
            "api_url",
            format!("unix://{}", settings.home.join("server.sock").display()),
            "default: the local control plane".into(),
        ),
    }
    match token_from(user_config) {
        Some(from) => add("token", REDACTED.into(), from),
        None => add("token", "none".into(), "default".into()),
    }
    let (project, from) = project_source(&settings.cwd);
    add("project", project, from);
    add(
        "home",
        settings.home.display().to_string(),
        if env("DIVERGENT_HOME").is_some() {
            "DIVERGENT_HOME".into()
        } else {
            "default: $XDG_DATA_HOME/div".into()
        },
    );
    add(
        "api_timeout",
        settings
            .deadline
            .map_or("30s".into(), |d| format!("{}s", d.as_secs())),
        if settings.deadline.is_some() {
            "DIVERGENT_API_TIMEOUT".into()
        } else {
            "default".into()
        },
    );
    add(
        "emulate_gpus",
        env("DIVERGENT_EMULATE_GPUS").unwrap_or_else(|| "none".into()),
        if env("DIVERGENT_EMULATE_GPUS").is_some() {
            "DIVERGENT_EMULATE_GPUS".into()
        } else {
            "default: GPUs found with nvidia-smi".into()
        },
    );
    add(
        "cache",
        settings
            .cache_dir
            .as_ref()
            .map_or("none".into(), |c| c.display().to_string()),
        if env("XDG_CACHE_HOME").is_some() {
            "XDG_CACHE_HOME".into()
        } else {
            "default: ~/.cache/div".into()
        },
    );
    add(
        "color",
        if settings.color { "on" } else { "off" }.into(),
        color_from(),
    );
    add(
        "user_config",
        settings
            .user_config
            .as_ref()
            .map_or("none".into(), |p| p.display().to_string()),
        if user_config.is_some() {
            "found".into()
        } else {
            "absent; div login writes it".into()
        },
    );
    sources
}

/// Where the token comes from: `DIVERGENT_TOKEN`, or the user's config file; `None` without
/// one.
fn token_from(user_config: Option<&ConfigFile>) -> Option<String> {
    if env("DIVERGENT_TOKEN").is_some() {
        Some("DIVERGENT_TOKEN".to_string())
    } else {
        user_config
            .filter(|(_, m)| m.get("token").is_some_and(|t| t.is_string()))
            .map(|(p, _)| p.display().to_string())
    }
}

/// The project of `cwd`'s runs, and where that comes from; why there is none when there is
/// none.
fn project_source(cwd: &Path) -> (String, String) {
    match div_core::resolve_project(None, env("DIVERGENT_PROJECT").as_deref(), cwd) {
        Ok(p) => {
            let from = match p.origin {
                div_core::ProjectOrigin::Flag => "--project".to_string(),
                div_core::ProjectOrigin::Env => "DIVERGENT_PROJECT".into(),
                div_core::ProjectOrigin::File(f) => f.display().to_string(),
                _ => "default: this directory's name".into(),
            };
            (p.slug, from)
        }
        Err(e) => (format!("none ({e})"), "default".into()),
    }
}

/// Which convention decided whether stderr is coloured.
fn color_from() -> String {
    if env("NO_COLOR").is_some() {
        "NO_COLOR".into()
    } else if env("CLICOLOR_FORCE").is_some_and(|v| v != "0") {
        "CLICOLOR_FORCE".into()
    } else if env("CLICOLOR").is_some_and(|v| v == "0") {
        "CLICOLOR".into()
    } else {
        "default: on when stderr is a terminal".into()
    }
}

/// Write `api_url` and `token` into the user config file, keeping its other fields: the
/// folder is made owner-only (0700) and the file written owner-only (0600) before the token
/// goes in, then renamed into place.
pub(crate) fn write_credentials(path: &Path, api_url: &str, token: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let mut map = read_json(path)?.map(|(_, m)| m).unwrap_or_default();
    map.insert("api_url".into(), api_url.into());
    map.insert("token".into(), token.into());
    let dir = path
        .parent()
        .context("the user config file has no folder")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("could not make `{}`", dir.display()))?;
    let tmp = path.with_extension("json.partial");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("could not write `{}`", tmp.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let text = serde_json::to_string_pretty(&map)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("could not write `{}`", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("could not write `{}`", path.display()))?;
    Ok(())
}

// `DIVERGENT_API_URL`, else `api_url` in the nearest `divergent.json`, else in the user's
// config; the token from `DIVERGENT_TOKEN`, else the user's config. None of them: local.
use div_core::resolve_target;

fn read_json(path: &Path) -> Result<Option<(PathBuf, serde_json::Map<String, serde_json::Value>)>> {
    Ok(div_core::read_config_file(path)?)
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object literal"),
        }
    }

    fn check(env_url: Option<&str>, project: Option<Value>, user: Option<Value>, expect: &str) {
        let project = project.map(obj);
        let user = user.map(obj);
        let got = resolve_target(
            env_url.map(String::from),
            None,
            project
                .as_ref()
                .map(|m| (Path::new("/p/divergent.json"), m)),
            user.as_ref().map(|m| (Path::new("/u/config.json"), m)),
        );
        let got = match got {
            Ok(Target::Remote { url, token, from }) => format!("{url} {token:?} from {from}"),
            Ok(Target::Local) => "local".into(),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn the_control_plane_is_chosen_in_order() {
        check(None, None, None, "local");
        check(
            Some("http://e"),
            Some(json!({"api_url": "http://p"})),
            None,
            "http://e None from DIVERGENT_API_URL",
        );
        check(
            None,
            Some(json!({"api_url": "http://p"})),
            Some(json!({"api_url": "http://u", "token": "t"})),
            "http://p Some(\"t\") from /p/divergent.json",
        );
        check(
            None,
            Some(json!({"project": "x"})),
            Some(json!({"api_url": "http://u"})),
            "http://u None from /u/config.json",
        );
        check(
            None,
            Some(json!({"api_url": 3})),
            None,
            "error: `api_url` in `/p/divergent.json` is not a string",
        );
    }
}
