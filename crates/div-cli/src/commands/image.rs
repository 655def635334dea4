//! `div image ls` and `div image prune`: the control plane's image cache, through its API
//! (`div_core::image_list`, `div_core::image_prune`), as every other command goes. The local
//! control plane's is `<home>/images`; its prune takes the cache's lock, so it waits for
//! pulls under way and a pull waits for it.

use super::shared::connect::connect;
use super::shared::output::failure;
use crate::args::ImageCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn image(
    command: ImageCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = connect(settings).await?;
    match command {
        ImageCommand::Ls => {
            let cache = div_core::image_list(&*cp).await.map_err(failure)?;
            let images = cache.images;
            // One row a reference (a tag names one image: the one it last resolved to), and
            // one for an image no reference names any more (`<none>`, as docker writes it).
            let mut rows: Vec<[String; 5]> = Vec::new();
            for image in &images {
                let digest = image.digest.get(..19).unwrap_or(&image.digest).to_owned();
                let downloaded = image
                    .downloaded_bytes
                    .map_or_else(|| "-".to_owned(), div_spec::format_bytes);
                let unpacked = div_spec::format_bytes(image.unpacked_bytes);
                let references: Vec<&str> = if image.references.is_empty() {
                    vec!["<none>"]
                } else {
                    image.references.iter().map(String::as_str).collect()
                };
                for reference in references {
                    let resolved = image
                        .resolved
                        .iter()
                        .find(|r| r.reference == reference)
                        .map_or_else(|| "-".to_owned(), |r| r.resolved_at.clone());
                    rows.push([
                        reference.to_owned(),
                        digest.clone(),
                        resolved,
                        downloaded.clone(),
                        unpacked.clone(),
                    ]);
                }
            }
            rows.sort();
            let mut out = String::new();
            if !rows.is_empty() {
                out.push_str("IMAGE\tDIGEST\tRESOLVED\tDOWNLOADED\tUNPACKED\n");
            }
            for row in &rows {
                out.push_str(&row.join("\t"));
                out.push('\n');
            }
            printer
                .data_escaped(&out)
                .map_err(|e| Failure::new(exit_codes::LOCAL, e))?;
            let disk = cache.disk;
            printer.status(&format!(
                "{} image{} cached in {}: {} on disk ({} of blobs, {} unpacked, {} in progress)",
                images.len(),
                if images.len() == 1 { "" } else { "s" },
                cache.path,
                div_spec::format_bytes(disk.total()),
                div_spec::format_bytes(disk.blobs),
                div_spec::format_bytes(disk.images),
                div_spec::format_bytes(disk.tmp),
            ));
        }
        ImageCommand::Prune => {
            let pruned = div_core::image_prune(&*cp).await.map_err(failure)?;
            printer.status(&format!(
                "removed {} image{} and {} blob{}, {} freed; kept {} that queued or running runs use",
                pruned.images.len(),
                if pruned.images.len() == 1 { "" } else { "s" },
                pruned.blobs,
                if pruned.blobs == 1 { "" } else { "s" },
                div_spec::format_bytes(pruned.bytes),
                pruned.kept,
            ));
        }
    }
    Ok(exit_codes::SUCCESS)
}
