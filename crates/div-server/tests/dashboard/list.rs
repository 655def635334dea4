//! The runs' list: a new run live, filters, pages through the server's cursor, entrypoints
//! told apart.

use div_test_support::dashboard::{Browser, Locator, on_runtime, origin, text_of};
use serde_json::json;

use super::vision;

#[test]
fn the_list_shows_a_new_run_live_and_filters_by_project_and_status() {
    on_runtime(async {
        let local = vision().await;
        // One check passed and one missed.
        let judged = local
            .place_and_wait(
                &["train.py::main"],
                json!({"max_spend_cents": 100, "name": "judged",
                   "checks": ["metrics.accuracy >= 0.8", "metrics.accuracy >= 0.95"]}),
            )
            .await;
        let (_, result) = local
            .server
            .request(
                "GET",
                &format!("/v1/runs/{}/result", judged["id"].as_str().expect("an id")),
                None,
            )
            .await;
        let outcomes: Vec<&str> = result["verdicts"]
            .as_array()
            .map(|v| v.iter().filter_map(|v| v["outcome"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(outcomes, ["passed", "failed"], "{result}");
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            // The link was exchanged for a session cookie and its token left the address bar.
            let here = b.c().current_url().await.expect("a url");
            assert_eq!(here.as_str(), format!("{}/", origin(&url)));
            b.until(
                "the first run",
                "return document.querySelectorAll('#rows tr').length === 1",
            )
            .await;

            // Placed while the page is open: it appears without a reload.
            let fresh = local
                .place(
                    &["ticker.py::main"],
                    json!({"max_spend_cents": 250, "project": "other", "name": "fresh-run"}),
                )
                .await;
            assert_eq!(fresh["name"], "fresh-run");
            b.until(
                "the new run, running, in the list",
                "return [...document.querySelectorAll('#rows tr')].some(r => \
               r.cells[0].textContent === 'fresh-run' && r.dataset.status === 'running')",
            )
            .await;
            let row = b
                .js("const r = [...document.querySelectorAll('#rows tr')]\
                   .find(r => r.cells[0].textContent === 'fresh-run');\
                 return [...r.cells].map(c => c.textContent);")
                .await;
            let cells: Vec<String> = serde_json::from_value(row).expect("cells");
            assert_eq!(cells[1], "other", "{cells:?}");
            assert_eq!(cells[3], "ticker.py::main", "{cells:?}");
            assert_eq!(cells[4], "cpu", "{cells:?}");
            assert!(cells[7].ends_with(" / $2.50"), "{cells:?}");
            let judged = b
                .js("const r = [...document.querySelectorAll('#rows tr')]\
                   .find(r => r.cells[0].textContent === 'judged');\
                 return [...r.cells].map(c => c.textContent);")
                .await;
            let judged: Vec<String> = serde_json::from_value(judged).expect("cells");
            assert_eq!(judged[2], "succeeded", "{judged:?}");
            assert_eq!(judged[8], "0", "{judged:?}");
            assert_eq!(judged[9], "1/2 passed · 1 missed", "{judged:?}");
            b.screenshot("runs").await;

            // Filters: the project, then the status.
            b.c()
                .find(Locator::Css("#project"))
                .await
                .expect("project")
                .send_keys("other")
                .await
                .expect("typed");
            b.c()
                .find(Locator::Css("#filters button"))
                .await
                .expect("button")
                .click()
                .await
                .expect("clicked");
            b.until(
                "only the other project's run",
                "const rs = [...document.querySelectorAll('#rows tr')];\
             return rs.length === 1 && rs[0].cells[1].textContent === 'other' \
               && location.search.includes('project=other')",
            )
            .await;
            b.js("document.getElementById('project').value = '';\
              document.getElementById('status').value = 'succeeded';\
              document.getElementById('filters').requestSubmit(); return true;")
                .await;
            b.until(
                "only the succeeded run",
                "const rs = [...document.querySelectorAll('#rows tr')];\
             return rs.length === 1 && rs[0].dataset.status === 'succeeded'",
            )
            .await;
            local.stop("fresh-run").await;
        }
    });
}

#[test]
fn the_list_pages_through_runs_with_the_servers_cursor() {
    on_runtime(async {
        let local = vision().await;
        // 52 runs: a page holds 50.
        for _ in 0..52 {
            local.place(&["sleep", "0"], json!({"code": null})).await;
        }
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.until(
                "a full first page",
                "return document.querySelectorAll('#rows tr').length === 50",
            )
            .await;
            let first: Vec<String> = serde_json::from_value(
                b.js("return [...document.querySelectorAll('#rows tr')].map(r => r.dataset.run)")
                    .await,
            )
            .expect("ids");
            b.c()
                .find(Locator::Css("#older"))
                .await
                .expect("older")
                .click()
                .await
                .expect("click");
            b.until(
                "the second page",
                "return document.querySelectorAll('#rows tr').length === 2",
            )
            .await;
            let second: Vec<String> = serde_json::from_value(
                b.js("return [...document.querySelectorAll('#rows tr')].map(r => r.dataset.run)")
                    .await,
            )
            .expect("ids");
            assert!(second.iter().all(|id| !first.contains(id)), "pages overlap");
            b.until(
                "Older disabled on the last page",
                "return document.getElementById('older').disabled",
            )
            .await;
        }
    });
}

#[test]
fn entrypoints_that_begin_alike_are_told_apart_in_the_list() {
    on_runtime(async {
        let local = vision().await;
        let long = |x: &str| {
            format!(
                "echo pip install -q -r requirements.txt 2>/dev/null && CKPT_DIR=/tmp/ckpt-{x} echo train.py"
            )
        };
        let short = |x: &str| format!("echo pip install -q -r requirements.txt && echo {x}.py");
        let commands = [long("a"), long("b"), short("one"), short("two")];
        for (i, c) in commands.iter().enumerate() {
            let name = format!("alike-{i}");
            local
                .place(&[c.as_str()], json!({"name": name, "code": null}))
                .await;
        }
        let one = local.run_json("alike-0").await;
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.until(
                "the four runs",
                "return document.querySelectorAll('#rows tr').length === 4",
            )
            .await;
            let rows = b
            .js("return [...document.querySelectorAll('#rows tr')].map(r => {\
                   const td = r.cells[3], code = td.querySelector('code');\
                   return { name: r.cells[0].textContent, shown: code.textContent, title: code.title,\
                            clipped: td.scrollWidth > td.clientWidth + 1 };\
                 })")
            .await;
            let rows = rows.as_array().expect("rows").clone();
            let mut shown = Vec::new();
            for row in &rows {
                let i: usize = row["name"]
                    .as_str()
                    .and_then(|n| n.strip_prefix("alike-"))
                    .and_then(|n| n.parse().ok())
                    .expect("a name");
                let full = &commands[i];
                // The whole command in the title; what the cell shows is not cut by its width.
                assert_eq!(row["title"], json!(full), "{row}");
                assert_eq!(row["clipped"], json!(false), "{row}");
                let text = row["shown"].as_str().expect("text").to_owned();
                if full.chars().count() > 64 {
                    // Cut in the middle: its start and its end are shown.
                    let end: String = full.chars().skip(full.chars().count() - 20).collect();
                    assert!(
                        text.starts_with("echo pip install")
                            && text.ends_with(&end)
                            && text.contains('…'),
                        "{row}"
                    );
                } else {
                    assert_eq!(&text, full, "{row}");
                }
                shown.push(text);
            }
            shown.sort();
            shown.dedup();
            assert_eq!(shown.len(), 4, "told apart: {shown:?}");
            // A CPU run of one core: `cpu` in the list (no `× 0`), `1 core` on its page.
            assert_eq!(
                b.js("return document.querySelector('#rows tr').cells[4].textContent")
                    .await,
                json!("cpu")
            );
            assert_eq!(one["cores"], json!(1), "{one}");
            b.goto(&format!("{}/runs/alike-0", origin(&url))).await;
            b.until(
                "the run's page",
                "return document.body.dataset.loaded === 'true'",
            )
            .await;
            assert_eq!(
                text_of(&b, "sku").await,
                format!("cpu · 1 core · {} GiB", one["memory_gib"])
            );
        }
    });
}
