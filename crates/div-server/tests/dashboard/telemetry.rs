//! The telemetry tab: the layout's series drawn.

use div_test_support::dashboard::{Browser, on_runtime, origin};
use serde_json::{Value, json};

use super::vision;

#[test]
fn the_telemetry_tab_draws_the_layouts_series() {
    on_runtime(async {
        let local = vision().await;
        local
            .place_and_wait(
                &["train.py::main"],
                json!({"max_spend_cents": 100, "name": "charted"}),
            )
            .await;
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.goto(&format!("{}/runs/charted#telemetry", origin(&url)))
                .await;
            b.until(
                "two charts",
                "return document.querySelectorAll('#charts figure.chart canvas').length === 2",
            )
            .await;
            let charts = b
            .js("return [...document.querySelectorAll('#charts figure.chart')].map(f => ({\
                   title: f.querySelector('figcaption').textContent,\
                   series: f.dataset.series.split('\\n'),\
                   points: Number(f.dataset.points),\
                   legend: [...f.querySelectorAll('.u-legend .u-series .u-label')].map(l => l.textContent),\
                 }))")
            .await;
            assert_eq!(charts[0]["title"], json!("losses"), "{charts}");
            assert_eq!(charts[0]["series"], json!(["loss", "val_loss"]), "{charts}");
            assert_eq!(charts[0]["points"], json!(60), "{charts}");
            assert_eq!(charts[1]["title"], json!("learning rate"), "{charts}");
            assert_eq!(charts[1]["series"], json!(["opt.lr"]), "{charts}");
            assert_eq!(charts[1]["points"], json!(30), "{charts}");
            let legend: Vec<String> =
                serde_json::from_value(charts[0]["legend"].clone()).expect("legend");
            assert!(
                legend.contains(&"loss".to_owned()) && legend.contains(&"val_loss".to_owned()),
                "{legend:?}"
            );
            // The canvas has drawn something: not every pixel is the same.
            let drawn = b
            .js("const c = document.querySelector('#charts canvas');\
                 const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;\
                 for (let i = 4; i < d.length; i += 4) if (d[i] !== d[0] || d[i+1] !== d[1] || d[i+2] !== d[2] || d[i+3] !== d[3]) return true;\
                 return false;")
            .await;
            assert_eq!(drawn, Value::Bool(true));
            // Each chart fills its panel's width, the panels the tab's, and follows the window.
            let widths = "return [...document.querySelectorAll('#charts figure.chart')].map(f => [\
                        f.querySelector('canvas').getBoundingClientRect().width, f.clientWidth,\
                        document.getElementById('charts').clientWidth])";
            // The panel may narrow once the charts are drawn (a scrollbar comes with them); the
            // charts follow it when its resize is observed, so this waits for the page to settle.
            let fills = format!(
                "const w = (function () {{ {widths} }})();\
             return w.length > 0 && w.every(c => Math.abs(c[0] - c[1]) <= 1 \
                && Math.abs(c[1] - c[2]) <= 1 && c[2] > 0);"
            );
            b.until("each chart as wide as its panel and the tab", &fills)
                .await;
            let before = b.js(widths).await;
            // The x is whole steps: every tick is at a whole number, and labelled as one.
            let ticks = b
                .js(
                    "return [...document.querySelectorAll('#charts figure.chart')].map(f => ({\
                   splits: f.uplot.axes[0]._splits, values: f.uplot.axes[0]._values }))",
                )
                .await;
            for chart in ticks.as_array().expect("charts") {
                let splits = chart["splits"].as_array().expect("splits");
                assert!(splits.len() >= 2, "{ticks}");
                assert!(
                    splits
                        .iter()
                        .all(|x| x.as_f64().is_some_and(|x| x.fract() == 0.0)),
                    "{ticks}"
                );
                let values = chart["values"].as_array().expect("values");
                assert!(
                    values
                        .iter()
                        .all(|v| v.as_str().is_some_and(|v| v.parse::<i64>().is_ok())),
                    "{ticks}"
                );
            }
            b.c()
                .set_window_size(900, 900)
                .await
                .expect("a smaller window");
            let resized = format!(
                "const w = (function () {{ {widths} }})();\
             return w.every(c => Math.abs(c[0] - c[1]) <= 1 && Math.abs(c[1] - c[2]) <= 1 \
                && c[2] > 0 && c[2] < {});",
                before[0][2].as_f64().expect("a width") - 100.0
            );
            b.until("the charts at the narrower window's width", &resized)
                .await;
            b.c()
                .set_window_size(1280, 900)
                .await
                .expect("the window again");
            let info = b
                .js("return document.getElementById('telemetry-info').textContent")
                .await;
            assert!(
                info.as_str().is_some_and(|i| i.contains("telemetry.toml")),
                "{info}"
            );
            b.screenshot("telemetry").await;
            // Everything the page loaded (scripts, styles, the chart library, its API calls) came
            // from the control plane itself.
            let elsewhere = b
                .js(
                    "return performance.getEntriesByType('resource').map(e => e.name)\
                   .filter(n => !n.startsWith(location.origin + '/'))",
                )
                .await;
            assert_eq!(elsewhere, json!([]));
            let loaded = b
            .js("return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)")
            .await;
            assert!(
                loaded
                    .as_array()
                    .is_some_and(|l| l.contains(&json!("/assets/uPlot.iife.min.js"))),
                "{loaded}"
            );
        }
    });
}
