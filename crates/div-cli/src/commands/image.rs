//! `div image ls` and `div image prune`: the control plane's image cache, through its API
//! (`div_core::image_list`, `div_core::image_prune`), as every other command goes. The local
//! control plane's is `<home>/images`; its prune takes the cache's lock, so it waits for
//! pulls under way and a pull waits for it.

use crate::args::ImageCommand;
use crate::exit_codes;
use crate::printer::{Failure, Printer};
use crate::settings::Settings;

pub(crate) async fn image(
    command: ImageCommand,
    settings: &Settings,
    printer: &mut Printer,
) -> Result<i32, Failure> {
    let cp = super::connect(settings).await?;
    match command {
        ImageCommand::Ls => {
            let cache = div_core::image_list(&*cp).await.map_err(super::failure)?;
            let mut images = cache.images;
            images.sort_by(|a, b| a.references.cmp(&b.references));
            let mut out = String::new();
            if !images.is_empty() {
                out.push_str("IMAGE\tDIGEST\tDOWNLOADED\tUNPACKED\n");
            }
            for image in &images {
                let digest = &image.digest;
                out.push_str(&format!(
                    "{}\t{}\t{}\t{}\n",
                    image.references.join(", "),
                    digest.get(..19).unwrap_or(digest),
                    div_spec::format_bytes(image.compressed_bytes),
                    div_spec::format_bytes(image.unpacked_bytes),
                ));
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
            let pruned = div_core::image_prune(&*cp).await.map_err(super::failure)?;
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
