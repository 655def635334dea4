//! `div runs`: a project's runs (or every project's), newest first, paging through the
//! control plane's cursor until the limit is reached.

use std::path::PathBuf;

use div_api::{ControlPlane, ListRuns, Run, RunStatus};

use crate::error::RunError;
use crate::project::{Project, resolve_project};

/// The most runs one page asks for; a larger limit is read in several pages.
pub const RUNS_PAGE: u32 = 100;

/// What `runs` was asked.
#[derive(Debug, Clone)]
pub struct RunsOptions {
    /// The directory it was started in (names the project).
    pub dir: PathBuf,
    /// `--project`.
    pub project: Option<String>,
    /// `DIVERGENT_PROJECT`, read by the caller.
    pub project_env: Option<String>,
    /// `--all`: every project's runs.
    pub all: bool,
    /// `--status`.
    pub status: Option<RunStatus>,
    /// How many runs at most.
    pub limit: u32,
    /// `--mine`: only the runs this member placed (the caller asks the control plane who it
    /// is, [`crate::whoami`]).
    pub placed_by: Option<String>,
}

/// The runs asked for, newest first, and the project they belong to (`None` with `all`).
#[derive(Debug, Clone)]
pub struct RunsListing {
    pub project: Option<Project>,
    pub runs: Vec<Run>,
    /// Whether there are more than `limit`.
    pub more: bool,
}

/// List runs newest first, reading as many pages as `limit` needs.
pub async fn runs(cp: &dyn ControlPlane, options: &RunsOptions) -> Result<RunsListing, RunError> {
    let project = if options.all {
        None
    } else {
        Some(resolve_project(
            options.project.as_deref(),
            options.project_env.as_deref(),
            &options.dir,
        )?)
    };
    let mut runs = Vec::new();
    let mut cursor = None;
    let more = loop {
        let want = options.limit.saturating_sub(runs.len() as u32);
        if want == 0 {
            break cursor.is_some();
        }
        let page = cp
            .list_runs(&ListRuns {
                project: project.as_ref().map(|p| p.slug.clone()),
                status: options.status,
                limit: Some(want.min(RUNS_PAGE)),
                cursor: cursor.take(),
                placed_by: options.placed_by.clone(),
            })
            .await
            .map_err(|e| RunError::api("list the runs", e))?;
        let got = page.runs.len();
        runs.extend(page.runs);
        match page.next_cursor {
            Some(next) if got > 0 => cursor = Some(next),
            _ => break false,
        }
    };
    runs.truncate(options.limit as usize);
    Ok(RunsListing {
        project,
        runs,
        more,
    })
}

/// The run `div logs`, `div result`, `div telemetry` and `div stop` act on when none is named:
/// the project's newest, with the project it belongs to. `dir`, `project` and `project_env`
/// name the project as for [`runs`].
pub async fn latest_run(
    cp: &dyn ControlPlane,
    dir: &std::path::Path,
    project: Option<&str>,
    project_env: Option<&str>,
) -> Result<(Project, Run), RunError> {
    let project = resolve_project(project, project_env, dir)?;
    let page = cp
        .list_runs(&ListRuns {
            project: Some(project.slug.clone()),
            status: None,
            limit: Some(1),
            cursor: None,
            placed_by: None,
        })
        .await
        .map_err(|e| RunError::api("list the runs", e))?;
    match page.runs.into_iter().next() {
        Some(run) => Ok((project, run)),
        None => Err(RunError::NoRuns(project.slug)),
    }
}
