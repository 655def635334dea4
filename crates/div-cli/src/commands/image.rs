//! `div image ls` and `div image prune`: the local control plane's image cache
//! (`<home>/images`, div-image's `ImageStore`), read and pruned here, next to the server that
//! shares the state directory. Pruning takes the cache's lock, so it waits for pulls under way
//! and a pull waits for it.

use std::path::Path;

use anyhow::Context;
use div_image::{Digest, ImageStore, PruneOptions};

use crate::args::ImageCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn image(
    command: ImageCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let dir = settings.home.join("images");
    let local = |e: anyhow::Error| Failure::new(exit_codes::LOCAL, e);
    let store = ImageStore::open(&dir)
        .with_context(|| format!("cannot open the image cache at {}", dir.display()))
        .map_err(local)?;
    match command {
        ImageCommand::Ls => {
            let mut images = store
                .list()
                .context("cannot list the image cache")
                .map_err(local)?;
            images.sort_by(|a, b| a.references.cmp(&b.references));
            let mut out = String::new();
            if !images.is_empty() {
                out.push_str("IMAGE\tDIGEST\tDOWNLOADED\tUNPACKED\n");
            }
            for image in &images {
                let digest = image.digest.to_string();
                out.push_str(&format!(
                    "{}\t{}\t{}\t{}\n",
                    image.references.join(", "),
                    digest.get(..19).unwrap_or(&digest),
                    div_spec::format_bytes(image.compressed_bytes),
                    div_spec::format_bytes(image.unpacked_bytes),
                ));
            }
            printer
                .data_escaped(&out)
                .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
            let usage = store
                .disk_usage()
                .context("cannot measure the image cache")
                .map_err(local)?;
            printer.status(&format!(
                "{} image{} cached in {}: {} on disk ({} of blobs, {} unpacked, {} in progress)",
                images.len(),
                if images.len() == 1 { "" } else { "s" },
                dir.display(),
                div_spec::format_bytes(usage.total()),
                div_spec::format_bytes(usage.blobs),
                div_spec::format_bytes(usage.images),
                div_spec::format_bytes(usage.tmp),
            ));
        }
        ImageCommand::Prune => {
            let keep = images_in_use(&settings.home.join("runs"));
            let report = store
                .prune(&PruneOptions {
                    keep: keep.clone(),
                    unused_since: None,
                })
                .await
                .context("cannot prune the image cache")
                .map_err(local)?;
            printer.status(&format!(
                "removed {} image{} and {} blob{}, {} freed; kept {} that queued or running runs use",
                report.images.len(),
                if report.images.len() == 1 { "" } else { "s" },
                report.blobs,
                if report.blobs == 1 { "" } else { "s" },
                div_spec::format_bytes(report.bytes),
                keep.len(),
            ));
        }
    }
    Ok(exit_codes::SUCCESS)
}

/// The images of runs that have not ended (`runs/<id>/image.json` without `end.json`).
fn images_in_use(runs: &Path) -> Vec<Digest> {
    #[derive(serde::Deserialize)]
    struct RunImage {
        digest: String,
    }
    let mut keep: Vec<Digest> = std::fs::read_dir(runs)
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|run| !run.path().join("end.json").exists())
        .filter_map(|run| std::fs::read(run.path().join("image.json")).ok())
        .filter_map(|bytes| serde_json::from_slice::<RunImage>(&bytes).ok())
        .filter_map(|image| image.digest.parse().ok())
        .collect();
    keep.sort_by_key(ToString::to_string);
    keep.dedup();
    keep
}
