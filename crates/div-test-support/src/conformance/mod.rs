//! The conformance suite: named checks any [`ControlPlane`] must pass, run the same way
//! against the in-memory fake, a client talking to wiremock-free servers, and the real
//! `div-server`.
//!
//! The suite reads as a list, in the order it runs, in [`conformance`]; each check is short,
//! independent, and in the file of its subject: `volumes.rs` (volumes, blobs, trees),
//! `runs.rs`, `models.rs`, `names.rs` (names outside their rules), `secrets.rs`, `images.rs`. Beneath
//! them, `context.rs` (what the suite is told, what it reports, the quick run) and `check.rs`
//! (how a check fails, and the helpers each uses).

mod check;
pub(crate) mod context;
mod images;
mod models;
mod names;
mod runs;
mod secrets;
mod volumes;

use div_api::ControlPlane;

use self::context::{ConformanceContext, ConformanceReport};

/// Run every check against `cp`; never stops at the first failure.
pub async fn conformance(cp: &dyn ControlPlane, ctx: &ConformanceContext) -> ConformanceReport {
    let mut report = ConformanceReport::default();
    macro_rules! check {
        ($name:literal, $f:expr) => {
            match $f.await {
                Ok(()) => report.passed.push($name),
                Err(why) => report.failed.push(($name, why.to_string())),
            }
        };
    }
    check!(
        "catalogue_offers_the_sku",
        runs::catalogue_offers_the_sku(cp, ctx)
    );
    check!(
        "volumes_create_idempotent",
        volumes::volumes_create_idempotent(cp, ctx)
    );
    check!(
        "blob_missing_upload_not_missing",
        volumes::blob_missing_upload_not_missing(cp, ctx)
    );
    check!(
        "partial_upload_resume",
        volumes::partial_upload_resume(cp, ctx)
    );
    check!(
        "hash_mismatch_refused",
        volumes::hash_mismatch_refused(cp, ctx)
    );
    check!(
        "commit_tree_read_back",
        volumes::commit_tree_read_back(cp, ctx)
    );
    check!(
        "commit_missing_blob_refused",
        volumes::commit_missing_blob_refused(cp, ctx)
    );
    check!(
        "commit_at_root_replaces_files_never_folders",
        volumes::commit_at_root_replaces_files_never_folders(cp, ctx)
    );
    check!("bad_paths_refused", volumes::bad_paths_refused(cp, ctx));
    check!(
        "secrets_without_values",
        secrets::secrets_without_values(cp, ctx)
    );
    check!(
        "images_listed_and_pruned",
        images::images_listed_and_pruned(cp, ctx)
    );
    check!(
        "create_run_idempotent",
        runs::create_run_idempotent(cp, ctx)
    );
    check!(
        "get_run_by_name_and_id",
        runs::get_run_by_name_and_id(cp, ctx)
    );
    check!("not_found_kinds", runs::not_found_kinds(cp, ctx));
    check!("unknown_sku_refused", runs::unknown_sku_refused(cp, ctx));
    check!(
        "validation_refuses_as_creation_and_creates_nothing",
        runs::validation_refuses_as_creation_and_creates_nothing(cp, ctx)
    );
    check!(
        "names_outside_their_rules_refused",
        names::names_outside_their_rules_refused(cp, ctx)
    );
    check!(
        "stop_ended_run_unchanged",
        runs::stop_ended_run_unchanged(cp, ctx)
    );
    check!("log_of_ended_run", runs::log_of_ended_run(cp, ctx));
    check!(
        "models_pinned_and_evaluated",
        models::models_pinned_and_evaluated(cp, ctx)
    );
    report
}
