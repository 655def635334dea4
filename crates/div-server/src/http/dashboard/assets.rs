//! The dashboard's pages, scripts and styles, built into the binary: nothing is fetched
//! from anywhere but the control plane. uPlot (MIT, `assets/vendor/uplot/LICENSE`) draws
//! the charts.

use super::super::wire::{self, Resp};

pub(crate) const INDEX: &[u8] = include_bytes!("../../../assets/index.html");
pub(crate) const RUN: &[u8] = include_bytes!("../../../assets/run.html");
pub(crate) const MODELS: &[u8] = include_bytes!("../../../assets/models.html");
pub(crate) const MODEL: &[u8] = include_bytes!("../../../assets/model.html");
pub(crate) const UNAUTHORIZED: &[u8] = include_bytes!("../../../assets/unauthorized.html");
/// The team's dashboard without a session: where a member types their token once.
pub(crate) const SIGN_IN: &[u8] = include_bytes!("../../../assets/signin.html");

/// The files under `/assets/`, by name, with their type.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../assets/dashboard.css"),
    ),
    (
        "common.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/common.js"),
    ),
    (
        "runs.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/runs.js"),
    ),
    (
        "signin.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/signin.js"),
    ),
    (
        "run.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/run.js"),
    ),
    (
        "models.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/models.js"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/vendor/uplot/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../assets/vendor/uplot/uPlot.min.css"),
    ),
    (
        "uPlot.LICENSE.txt",
        "text/plain; charset=utf-8",
        include_bytes!("../../../assets/vendor/uplot/LICENSE"),
    ),
];

/// An HTML page.
pub(crate) fn page(body: &'static [u8]) -> Resp {
    wire::full(200, "text/html; charset=utf-8", body)
}

/// The asset called `name`, if there is one.
pub(crate) fn asset(name: &str) -> Option<Resp> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, body)| wire::full(200, kind, *body))
}

#[cfg(test)]
mod tests {
    use super::{ASSETS, INDEX};

    /// Every status a run can be in is one the list filters by and colours.
    #[test]
    fn every_status_can_be_filtered_by_and_has_its_colour() {
        let index = std::str::from_utf8(INDEX).expect("utf-8");
        let css = ASSETS
            .iter()
            .find(|(name, _, _)| *name == "dashboard.css")
            .map(|(_, _, body)| std::str::from_utf8(body).expect("utf-8"))
            .expect("the stylesheet");
        for status in div_api::RunStatus::ALL {
            let s = status.as_str();
            assert!(index.contains(&format!("<option>{s}</option>")), "{s}");
            assert!(
                css.contains(&format!(".s-{s} ")) || css.contains(&format!(".s-{s},")),
                "{s}"
            );
        }
    }
}
