//! Models' versions and evaluations in the store. A version's number is taken in the same
//! transaction that records it, so two pushes at once get two numbers (or, of the same tree,
//! one version); an evaluation is recorded with its run.

use rusqlite::{OptionalExtension, params};

use super::{EVALUATION_COLUMNS, EvaluationRow, Store, StoreError};

/// A model version's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionRow {
    pub(crate) model: String,
    pub(crate) version: u32,
    pub(crate) digest: String,
    pub(crate) volume: String,
    pub(crate) path: String,
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) created_at: String,
    pub(crate) created_by: Option<String>,
    pub(crate) source: Option<String>,
}

/// What [`Store::add_model_version`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Added {
    /// A new version, with its number.
    New(VersionRow),
    /// The latest version already is this tree (the same digest): no new version.
    Same(VersionRow),
}

const VERSION_COLUMNS: &str =
    "model, version, digest, volume, path, files, bytes, created_at, created_by, source";

fn version_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<VersionRow> {
    Ok(VersionRow {
        model: r.get(0)?,
        version: r.get(1)?,
        digest: r.get(2)?,
        volume: r.get(3)?,
        path: r.get(4)?,
        files: r.get::<_, i64>(5)? as u64,
        bytes: r.get::<_, i64>(6)? as u64,
        created_at: r.get(7)?,
        created_by: r.get(8)?,
        source: r.get(9)?,
    })
}

fn evaluation_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EvaluationRow> {
    Ok(EvaluationRow {
        id: r.get(0)?,
        run_id: r.get(1)?,
        model: r.get(2)?,
        version: r.get(3)?,
        digest: r.get(4)?,
        created_at: r.get(5)?,
    })
}

impl Store {
    /// Records `row` as the model's next version, unless its latest version has the same
    /// digest; `row.version` is ignored and given here.
    pub(crate) fn add_model_version(&self, row: &VersionRow) -> Result<Added, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let latest: Option<VersionRow> = tx
            .query_row(
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM model_versions WHERE model = ?1 ORDER BY version DESC LIMIT 1"
                ),
                [&row.model],
                version_row,
            )
            .optional()?;
        if let Some(latest) = latest.filter(|l| l.digest == row.digest) {
            return Ok(Added::Same(latest));
        }
        let next: u32 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM model_versions WHERE model = ?1",
            [&row.model],
            |r| r.get(0),
        )?;
        tx.execute(
            &format!(
                "INSERT INTO model_versions ({VERSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ),
            params![
                row.model,
                next,
                row.digest,
                row.volume,
                row.path,
                row.files as i64,
                row.bytes as i64,
                row.created_at,
                row.created_by,
                row.source
            ],
        )?;
        tx.commit()?;
        Ok(Added::New(VersionRow {
            version: next,
            ..row.clone()
        }))
    }

    /// Every version of `model`, oldest first.
    pub(crate) fn model_versions(&self, model: &str) -> Result<Vec<VersionRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {VERSION_COLUMNS} FROM model_versions WHERE model = ?1 ORDER BY version"
        ))?;
        let rows = stmt.query_map([model], version_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every model's name and its versions' count, by name.
    pub(crate) fn models(&self) -> Result<Vec<(String, u32)>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare("SELECT model, COUNT(*) FROM model_versions GROUP BY model ORDER BY model")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes `model`'s version `version` (every version, when `None`); the rows removed.
    pub(crate) fn remove_model_versions(
        &self,
        model: &str,
        version: Option<u32>,
    ) -> Result<Vec<VersionRow>, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let removed: Vec<VersionRow> = {
            let mut stmt = tx.prepare(&format!(
                "SELECT {VERSION_COLUMNS} FROM model_versions WHERE model = ?1 AND (?2 IS NULL OR version = ?2)"
            ))?;
            stmt.query_map(params![model, version], version_row)?
                .collect::<Result<_, _>>()?
        };
        tx.execute(
            "DELETE FROM model_versions WHERE model = ?1 AND (?2 IS NULL OR version = ?2)",
            params![model, version],
        )?;
        tx.commit()?;
        Ok(removed)
    }

    /// Whether some model version is kept at `path` in `volume` (retention never removes it).
    pub(crate) fn model_tree_at(&self, volume: &str, path: &str) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let n: i64 = conn.query_row(
            "SELECT COUNT(*) FROM model_versions WHERE volume = ?1 AND path = ?2",
            params![volume, path],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    }

    /// Evaluations, newest first: of `model` (and its `version`) where given, at most `limit`.
    pub(crate) fn evaluations(
        &self,
        model: Option<&str>,
        version: Option<u32>,
        limit: u32,
    ) -> Result<Vec<EvaluationRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {EVALUATION_COLUMNS} FROM evaluations
             WHERE (?1 IS NULL OR model = ?1) AND (?2 IS NULL OR version = ?2)
             ORDER BY seq DESC LIMIT ?3"
        ))?;
        let rows = stmt.query_map(params![model, version, limit], evaluation_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// An evaluation by its id.
    pub(crate) fn evaluation(&self, id: &str) -> Result<Option<EvaluationRow>, StoreError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                &format!("SELECT {EVALUATION_COLUMNS} FROM evaluations WHERE id = ?1"),
                [id],
                evaluation_row,
            )
            .optional()?)
    }
}
