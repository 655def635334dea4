//! Which project a run belongs to.

use std::path::{Path, PathBuf};

use crate::fmt::slugify;

/// The file that can name a project (and a control plane) for a directory and those below it.
pub const PROJECT_FILE: &str = "divergent.json";

/// Where a project's name came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectOrigin {
    /// `--project`.
    Flag,
    /// `DIVERGENT_PROJECT`.
    Env,
    /// A `divergent.json`, at this path.
    File(PathBuf),
    /// The directory's name, slugified.
    Directory,
}

/// A resolved project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// The slug the control plane stores.
    pub slug: String,
    pub origin: ProjectOrigin,
}

/// The error returned by [`resolve_project`].
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// A name given explicitly is not a slug.
    #[error("`{typed}` is not a project name")]
    NotASlug {
        typed: String,
        origin: ProjectOrigin,
        /// The slug it would become, when it has letters or digits.
        suggestion: Option<String>,
    },
    /// The directory's name has nothing to make a slug from.
    #[error("a directory named `{0}` has no letters or digits to make a project name from")]
    Directory(String),
    /// A `divergent.json` could not be read.
    #[error("could not read `{}`", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `divergent.json` is not the JSON object it should be.
    #[error("`{}` is not valid: {message}", path.display())]
    BadFile { path: PathBuf, message: String },
}

impl ProjectError {
    /// What would be right, for a person.
    pub fn hint(&self) -> Option<String> {
        match self {
            ProjectError::NotASlug {
                suggestion: Some(s),
                ..
            } => Some(format!(
                "project names are lowercase letters, digits and `-`: did you mean `{s}`?"
            )),
            ProjectError::NotASlug { .. } => Some(
                "project names are lowercase letters, digits and `-`, like `very-cool-classifier`"
                    .into(),
            ),
            ProjectError::Directory(_) => Some("pass --project".into()),
            ProjectError::BadFile { .. } => {
                Some(r#"it should be an object like {"project": "very-cool-classifier"}"#.into())
            }
            ProjectError::File { .. } => None,
        }
    }
}

/// The project a run started in `dir` belongs to: `flag` (`--project`), then `env`
/// (`DIVERGENT_PROJECT`, read by the caller), then the `project` of the nearest
/// `divergent.json` in `dir` or a directory above it, then `dir`'s own name, slugified.
///
/// A name given explicitly must already be a slug (`My Proj` is refused, suggesting `my-proj`),
/// so what was typed and what the control plane stores are the same string.
pub fn resolve_project(
    flag: Option<&str>,
    env: Option<&str>,
    dir: &Path,
) -> Result<Project, ProjectError> {
    if let Some(typed) = flag {
        return explicit(typed, ProjectOrigin::Flag);
    }
    if let Some(typed) = env.filter(|e| !e.is_empty()) {
        return explicit(typed, ProjectOrigin::Env);
    }
    if let Some((path, value)) = find_project_file(dir)?
        && let Some(typed) = value.get("project")
    {
        let Some(typed) = typed.as_str() else {
            return Err(ProjectError::BadFile {
                path,
                message: "`project` is not a string".into(),
            });
        };
        return explicit(typed, ProjectOrigin::File(path));
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match slugify(&name) {
        Some(slug) => Ok(Project {
            slug,
            origin: ProjectOrigin::Directory,
        }),
        None => Err(ProjectError::Directory(name)),
    }
}

fn explicit(typed: &str, origin: ProjectOrigin) -> Result<Project, ProjectError> {
    match slugify(typed) {
        Some(slug) if slug == typed => Ok(Project { slug, origin }),
        suggestion => Err(ProjectError::NotASlug {
            typed: typed.to_string(),
            origin,
            suggestion,
        }),
    }
}

/// A `divergent.json`'s path and its object.
pub type ProjectFile = (PathBuf, serde_json::Map<String, serde_json::Value>);

/// The nearest `divergent.json` in `dir` or above it, parsed as a JSON object.
pub fn find_project_file(dir: &Path) -> Result<Option<ProjectFile>, ProjectError> {
    for d in dir.ancestors() {
        let path = d.join(PROJECT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(ProjectError::File { path, source }),
        };
        return match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(map)) => Ok(Some((path, map))),
            Ok(_) => Err(ProjectError::BadFile {
                path,
                message: "it is not a JSON object".into(),
            }),
            Err(e) => Err(ProjectError::BadFile {
                path,
                message: e.to_string(),
            }),
        };
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(flag: Option<&str>, env: Option<&str>, file: Option<&str>, dir: &str, expect: &str) {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let dir = tmp.path().join(dir);
        let sub = dir.join("src/deep");
        std::fs::create_dir_all(&sub).expect("mkdir");
        if let Some(file) = file {
            std::fs::write(dir.join(PROJECT_FILE), file).expect("write");
        }
        // Resolved from the directory itself, and from one below it when a file names it.
        let got = match resolve_project(flag, env, &dir) {
            Ok(p) => format!("{} {:?}", p.slug, p.origin),
            Err(e) => format!(
                "error: {e}{}",
                e.hint()
                    .map(|h| format!(" / hint: {h}"))
                    .unwrap_or_default()
            ),
        };
        let got = got.replace(&*tmp.path().to_string_lossy(), "TMP");
        assert_eq!(got, expect);
    }

    #[test]
    fn a_file_above_names_the_project() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let sub = tmp.path().join("repo/src/deep");
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(
            tmp.path().join("repo").join(PROJECT_FILE),
            r#"{"project":"named"}"#,
        )
        .expect("write");
        let p = resolve_project(None, None, &sub).expect("resolves");
        assert_eq!(p.slug, "named");
    }

    #[test]
    fn resolution_order() {
        check(
            None,
            None,
            None,
            "very-cool-classifier",
            "very-cool-classifier Directory",
        );
        check(None, None, None, "My Project!", "my-project Directory");
        check(
            None,
            None,
            None,
            "!!!",
            "error: a directory named `!!!` has no letters or digits to make a project name from / hint: pass --project",
        );
        check(
            Some("p1"),
            Some("p2"),
            Some(r#"{"project":"p3"}"#),
            "d",
            "p1 Flag",
        );
        check(None, Some("p2"), Some(r#"{"project":"p3"}"#), "d", "p2 Env");
        check(
            None,
            Some(""),
            Some(r#"{"project":"p3"}"#),
            "d",
            r#"p3 File("TMP/d/divergent.json")"#,
        );
        check(
            None,
            None,
            Some(r#"{"api_url":"http://x"}"#),
            "d",
            "d Directory",
        );
        check(
            Some("My Proj"),
            None,
            None,
            "d",
            "error: `My Proj` is not a project name / hint: project names are lowercase letters, digits and `-`: did you mean `my-proj`?",
        );
        check(
            None,
            None,
            Some("[1]"),
            "d",
            r#"error: `TMP/d/divergent.json` is not valid: it is not a JSON object / hint: it should be an object like {"project": "very-cool-classifier"}"#,
        );
        check(
            None,
            None,
            Some(r#"{"project":3}"#),
            "d",
            r#"error: `TMP/d/divergent.json` is not valid: `project` is not a string / hint: it should be an object like {"project": "very-cool-classifier"}"#,
        );
    }
}
