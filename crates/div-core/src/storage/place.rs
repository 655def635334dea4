//! A place in a volume as typed (`NAME[/PATH]`), and what is under it.

use div_api::{ControlPlane, VolumeEntry};
use div_spec::VolumeName;

use crate::error::RunError;

/// `NAME[/PATH]`: a volume and a place in it (`""` for its root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumePath {
    pub volume: String,
    pub path: String,
}

impl std::str::FromStr for VolumePath {
    type Err = RunError;
    /// `data`, `data/`, `data/train/part-0.csv`; refuses a bad volume name and paths with
    /// empty, `.` or `..` parts.
    fn from_str(typed: &str) -> Result<VolumePath, RunError> {
        let (volume, path) = typed.split_once('/').unwrap_or((typed, ""));
        volume
            .parse::<VolumeName>()
            .map_err(|e| RunError::VolumePath {
                typed: typed.to_string(),
                message: e.to_string(),
            })?;
        Ok(VolumePath {
            volume: volume.to_string(),
            path: inner_path(typed, path)?,
        })
    }
}

/// A relative path inside a volume, `/`-separated, trailing `/` dropped.
fn inner_path(typed: &str, path: &str) -> Result<String, RunError> {
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Ok(String::new());
    }
    if !div_spec::is_volume_path(path) {
        return Err(RunError::VolumePath {
            typed: typed.to_string(),
            message: "a path inside a volume has no empty, `.` or `..` parts".into(),
        });
    }
    Ok(path.to_string())
}

/// Everything under `at`; a volume or a path that is not there is said as such.
pub(crate) async fn list(
    cp: &dyn ControlPlane,
    at: &VolumePath,
) -> Result<Vec<VolumeEntry>, RunError> {
    match cp.list_tree(&at.volume, &at.path).await {
        Ok(entries) => Ok(entries),
        Err(e) if e.is_not_found() => {
            let volumes = cp
                .list_volumes()
                .await
                .map_err(|e| RunError::api("list the volumes", e))?;
            if volumes.iter().any(|v| v.name == at.volume) {
                Err(RunError::NotInVolume {
                    volume: at.volume.clone(),
                    path: at.path.clone(),
                })
            } else {
                Err(RunError::VolumeNotFound(at.volume.clone()))
            }
        }
        Err(e) => Err(RunError::api("list the volume", e)),
    }
}
