//! A run's page: its log growing (in colour, its tail first), stop, a ceiling hit, the image
//! it ran in.

use div_image::Credentials;
use div_test_support::dashboard::{Browser, Locator, on_runtime, origin, text_of};
use div_test_support::image::{self as image_support, Registry, busybox_layer, push};
use serde_json::{Value, json};

use super::{LAST_TICK_FN, TICKS_FN, vision};

#[test]
fn the_run_page_log_grows_while_the_run_prints_in_colour() {
    on_runtime(async {
        let local = vision().await;
        let run = local
            .place(
                &["ticker.py::main"],
                json!({"max_spend_cents": 100, "name": "ticking"}),
            )
            .await;
        let name = run["name"].as_str().expect("a name").to_owned();
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.goto(&format!("{}/runs/{name}#log", origin(&url))).await;
            b.until(
                "the log's first ticks",
                "return document.getElementById('logview').textContent.includes('tick 2 ')",
            )
            .await;
            // The last tick the page shows now; then three past it, with no reload.
            let last = format!("{LAST_TICK_FN} return lastTick();");
            let before = b.js(&last).await.as_i64().expect("a tick");
            let before_len = b
                .js("return document.getElementById('logview').textContent.length")
                .await;
            b.until(
                "more ticks, without a reload",
                &format!("{LAST_TICK_FN} return lastTick() >= {};", before + 3),
            )
            .await;
            let after = b.js(&last).await.as_i64().expect("a tick");
            let after_len = b
                .js("return document.getElementById('logview').textContent.length")
                .await;
            assert!(after >= before + 3, "tick {before} then {after}");
            assert!(
                after_len.as_u64() > before_len.as_u64(),
                "{before_len} then {after_len}"
            );
            // Every tick is there once, in order: nothing lost or doubled between reads.
            let ticks = b.js(&format!("{TICKS_FN} return ticks();")).await;
            let ticks: Vec<i64> = serde_json::from_value(ticks).expect("ticks");
            assert!(
                ticks.first() == Some(&0) && ticks.windows(2).all(|w| w[1] == w[0] + 1),
                "{ticks:?}"
            );
            // ANSI colours render as classes; the escape bytes themselves are gone.
            let green = b
            .js("return [...document.querySelectorAll('#logview span.fg2')].some(s => s.textContent.startsWith('tick '))")
            .await;
            assert_eq!(green, Value::Bool(true));
            let bold_red = b
            .js("return [...document.querySelectorAll('#logview span.fg1.b')].some(s => s.textContent === 'warm')")
            .await;
            assert_eq!(bold_red, Value::Bool(true));
            let escapes = b
                .js("return document.getElementById('logview').textContent.includes('\\u001b')")
                .await;
            assert_eq!(escapes, Value::Bool(false));
            // Followed while at the bottom.
            b.until(
            "the view following the end",
            "const v = document.getElementById('logview');\
             return v.scrollHeight <= v.clientHeight || v.scrollTop + v.clientHeight >= v.scrollHeight - 4",
        )
        .await;
            let href = b
                .js("return document.getElementById('download').getAttribute('href')")
                .await;
            assert!(
                href.as_str()
                    .is_some_and(|h| h.ends_with("/log?download=1")),
                "{href}"
            );
            b.screenshot("log").await;
            // Scrolled up to read, the view stays where it was while lines keep arriving. Only a
            // log taller than its view can be scrolled up: one that still fits is at its bottom
            // whatever scrollTop says, and rightly follows.
            b.until(
                "a log taller than its view",
                "const v = document.getElementById('logview');\
             return v.scrollHeight > v.clientHeight + 40",
            )
            .await;
            b.js("document.getElementById('logview').scrollTop = 0; return true;")
                .await;
            let now = b.js(&last).await.as_i64().expect("a tick");
            b.until(
                "more ticks while scrolled up",
                &format!("{LAST_TICK_FN} return lastTick() >= {};", now + 2),
            )
            .await;
            assert_eq!(
                b.js("return document.getElementById('logview').scrollTop")
                    .await,
                json!(0)
            );
            local.stop("ticking").await;
        }
    });
}

/// `lines()`: the numbers of the whole lines of `big.py` the log view shows, in order.
const LINES_FN: &str = "function lines() { return [...document.getElementById('logview')\
    .textContent.matchAll(/line (\\d{8}) x{49}\\n/g)].map(m => Number(m[1])); }";

#[test]
fn a_large_log_shows_its_tail_and_loads_earlier_parts_on_demand() {
    on_runtime(async {
        let local = vision().await;
        let big = local
            .place_and_wait(&["big.py::main"], json!({"name": "big"}))
            .await;
        assert_eq!(big["status"], "succeeded", "{big}");
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.goto(&format!("{}/runs/big#log", origin(&url))).await;
            b.until(
                "the log's last line",
                "return document.getElementById('logview').textContent.includes('line 00399999 ')",
            )
            .await;
            // Only the tail is on the page: 256 KiB of 25.6 MB.
            let shown = b
            .js("const v = document.getElementById('logview'); return [Number(v.dataset.start), Number(v.dataset.end), v.textContent.length]")
            .await;
            let end = shown[1].as_u64().expect("end");
            assert!(end >= 25_600_000, "{shown}");
            assert_eq!(shown[0].as_u64(), Some(end - 256 * 1024), "{shown}");
            assert!(
                shown[2].as_u64().is_some_and(|n| n <= 256 * 1024),
                "{shown}"
            );
            let info = b
                .js("return document.getElementById('log-info').textContent")
                .await;
            assert!(
                info.as_str()
                    .is_some_and(|i| i.starts_with("showing the last 262,144 of ")),
                "{info}"
            );
            let first = b.js(&format!("{LINES_FN} return lines()[0];")).await;
            let first = first.as_i64().expect("a line");
            assert!(first > 300_000, "{first}");

            // Load earlier: the part before, joined to what was there, nothing lost or doubled.
            b.c()
                .find(Locator::Css("#earlier"))
                .await
                .expect("earlier")
                .click()
                .await
                .expect("click");
            b.until(
                "the earlier part",
                &format!("{LINES_FN} return lines()[0] < {first} - 3000;"),
            )
            .await;
            let numbers = b.js(&format!("{LINES_FN} return lines();")).await;
            let numbers: Vec<i64> = serde_json::from_value(numbers).expect("lines");
            assert!(
                numbers.windows(2).all(|w| w[1] == w[0] + 1),
                "a gap or a repeat"
            );
            assert_eq!(numbers.last(), Some(&399_999));
            b.screenshot("large-log").await;

            // The raw download is the whole log, as a file.
            let download = b
            .js("return fetch(document.getElementById('download').href)\
                 .then(r => [r.status, r.headers.get('content-length'), r.headers.get('content-disposition')])")
            .await;
            assert_eq!(download[0], json!(200), "{download}");
            assert_eq!(
                download[1].as_str().map(|n| n.parse::<u64>().ok()),
                Some(Some(end)),
                "{download}"
            );
            assert!(
                download[2]
                    .as_str()
                    .is_some_and(|d| d.starts_with("attachment;")),
                "{download}"
            );
        }
    });
}

#[test]
fn stop_asks_for_a_confirmation_and_the_status_changes() {
    on_runtime(async {
        let local = vision().await;
        let run = local
            .place(
                &["ticker.py::main"],
                json!({"max_spend_cents": 100, "name": "to-stop",
                   "env": [{"key": "MODE", "value": "fast"}],
                   "checks": ["metrics.accuracy >= 0.8"]}),
            )
            .await;
        let name = run["name"].as_str().expect("a name").to_owned();
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.goto(&format!("{}/runs/{name}", origin(&url))).await;
            b.until(
                "the run running",
                "return document.body.dataset.status === 'running'",
            )
            .await;
            // What was typed, what the container was told, and the replay.
            let typed = b
                .js("return document.getElementById('typed').textContent")
                .await;
            assert_eq!(typed, json!("ticker.py::main"));
            let told = b
                .js("return document.getElementById('told').textContent")
                .await;
            assert!(
                told.as_str()
                    .is_some_and(|t| t.contains("from ticker import main")),
                "{told}"
            );
            let replay = b
                .js("return document.getElementById('replay').textContent")
                .await;
            let replay = replay.as_str().unwrap_or_default().to_owned();
            assert!(
                replay.starts_with("div run --project vision --gpu cpu ")
                    && replay.contains(" --max-spend 1.00 ")
                    && replay.contains(" --env MODE=fast ")
                    && replay.contains(" --check 'metrics.accuracy >= 0.8' ")
                    && replay.ends_with(" ticker.py::main"),
                "{replay}"
            );
            b.screenshot("run").await;
            // Copy: to the clipboard where the browser allows it, else the command is selected
            // for Ctrl-C.
            b.c()
                .find(Locator::Css("#copy"))
                .await
                .expect("copy")
                .click()
                .await
                .expect("click");
            b.until(
                "the copy said",
                "return document.getElementById('copied').textContent !== ''",
            )
            .await;
            let copied = b
            .js("return [document.getElementById('copied').textContent, String(getSelection())]")
            .await;
            assert!(
                copied[0] == json!("copied")
                    || (copied[0] == json!("selected: press Ctrl-C") && copied[1] == json!(replay)),
                "{copied}"
            );

            // Stop, then change one's mind: nothing happens.
            b.c()
                .find(Locator::Css("#stop"))
                .await
                .expect("stop")
                .click()
                .await
                .expect("click");
            b.until(
                "the confirmation",
                "return document.getElementById('confirm').open",
            )
            .await;
            b.screenshot("stop-confirmation").await;
            b.c()
                .find(Locator::Css("#confirm-no"))
                .await
                .expect("no")
                .click()
                .await
                .expect("click");
            b.until(
                "the confirmation closed",
                "return !document.getElementById('confirm').open",
            )
            .await;
            assert_eq!(
                b.js("return document.body.dataset.status").await,
                json!("running")
            );

            // Stop, and mean it.
            b.c()
                .find(Locator::Css("#stop"))
                .await
                .expect("stop")
                .click()
                .await
                .expect("click");
            b.until(
                "the confirmation",
                "return document.getElementById('confirm').open",
            )
            .await;
            b.c()
                .find(Locator::Css("#confirm-yes"))
                .await
                .expect("yes")
                .click()
                .await
                .expect("click");
            b.until(
                "the run ended",
                "return ['canceled', 'failed', 'succeeded'].includes(document.body.dataset.status)",
            )
            .await;
            assert_eq!(
                b.js("return document.getElementById('stop').hidden").await,
                json!(true)
            );
            // The timeline says when it was signalled, between started and ended.
            b.until(
                "the full timeline",
                "return [...document.querySelectorAll('#timeline .what')].map(w => w.textContent)\
               .join() === 'queued,started,signalled,ended'",
            )
            .await;
            b.screenshot("stopped").await;
            let runs = local.runs().await;
            let run = runs
                .as_array()
                .and_then(|a| a.iter().find(|r| r["name"] == "to-stop"))
                .expect("the run");
            assert_ne!(run["status"], json!("running"), "{run}");
            assert!(run["ended_at"].is_string(), "{run}");
        }
    });
}

#[test]
fn a_run_that_hit_its_ceiling_is_ended_and_says_why_it_has_no_exit_code() {
    on_runtime(async {
        let local = vision().await;
        // 1 cent buys some 7 s of an (emulated) H100 at $4.95/h.
        local
        .place_and_wait(
            &["sleep 1000"],
            json!({"sku": "h100", "gpus": 1, "max_spend_cents": 1, "name": "capped", "code": null}),
        )
        .await;
        let run = local.run_json("capped").await;
        assert_eq!(run["status"], json!("hit_ceiling"), "{run}");
        assert!(
            run["exit_code"].is_null() && run["reason"].is_null(),
            "{run}"
        );
        let url = local.dashboard().await;
        let statuses: Vec<(&str, bool)> = div_api::RunStatus::ALL
            .iter()
            .map(|s| (s.as_str(), s.is_terminal()))
            .collect();
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.goto(&format!("{}/runs/capped", origin(&url))).await;
            b.until(
                "the run, hit its ceiling",
                "return document.body.dataset.status === 'hit_ceiling'",
            )
            .await;
            // Ended: no Stop, not live.
            assert_eq!(
                b.js("return document.getElementById('stop').hidden").await,
                json!(true)
            );
            assert_eq!(
                b.js("return document.getElementById('live').classList.contains('off')")
                    .await,
                json!(true)
            );
            assert_eq!(
                text_of(&b, "exit").await,
                "none: it was killed when it reached its ceiling"
            );
            let reason = text_of(&b, "reason").await;
            assert!(
                reason.starts_with("it reached its $0.01 ceiling after ")
                    && reason.ends_with("($0.01 spent)"),
                "{reason}"
            );
            // The page and div-api agree on which statuses are ended, every one of them.
            for (status, ended) in &statuses {
                assert_eq!(
                    b.js(&format!("return div.terminal('{status}')")).await,
                    json!(ended),
                    "{status}"
                );
            }
            // Its hardware without `× 0` or `1 cores`.
            let cores = run["cores"].as_u64().expect("cores");
            let noun = if cores == 1 { "core" } else { "cores" };
            assert_eq!(
                text_of(&b, "sku").await,
                format!("h100 × 1 · {cores} {noun} · {} GiB", run["memory_gib"])
            );
            // This machine's system stood in for the default image: the page says so.
            assert_eq!(
                text_of(&b, "image").await,
                format!(
                    "this machine's own system (standing in for {}; DIVERGENT_DEFAULT_IMAGE=host, nothing pulled)",
                    run["image"].as_str().expect("an image")
                )
            );
            // The list filters by it.
            b.goto(&format!("{}/?status=hit_ceiling", origin(&url)))
                .await;
            b.until(
                "the run, filtered by hit_ceiling",
                "const rs = [...document.querySelectorAll('#rows tr')];\
             return rs.length === 1 && rs[0].dataset.status === 'hit_ceiling' \
               && document.getElementById('status').value === 'hit_ceiling'",
            )
            .await;
        }
    });
}

#[test]
fn a_run_in_a_pulled_image_shows_the_image_and_its_digest() {
    on_runtime(async {
        let Some(reg) = registry().await else {
            return;
        };
        let local = vision().await;
        let image = format!("{}/tools/busybox:1", reg.addr);
        let imaged = local
            .place_and_wait(
                &["echo hi"],
                json!({"image": image, "name": "imaged", "code": null}),
            )
            .await;
        assert_eq!(imaged["status"], "succeeded", "{imaged}");
        // The digest, named by the image cache's one unpacked tree.
        let trees: Vec<String> = std::fs::read_dir(local.server.home.join("images/images/sha256"))
            .expect("the image cache")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(trees.len(), 1, "{trees:?}");
        let digest = format!("sha256:{}", trees[0]);
        // The run's record names the image; the page adds what was pulled for it.
        assert_eq!(local.run_json("imaged").await["image"], json!(image));
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.goto(&format!("{}/runs/imaged", origin(&url))).await;
            b.until(
                "the image",
                "return document.getElementById('image').textContent.includes('sha256:')",
            )
            .await;
            assert_eq!(text_of(&b, "image").await, format!("{image} ({digest})"));
        }
    });
}

/// A loopback registry holding `tools/busybox:1` (`WorkingDir` `/work`, an `Env`), as
/// div-cli's image tests push it; `None` (skipped loudly) without busybox or the registry.
async fn registry() -> Option<Registry> {
    let layer = busybox_layer()?;
    let reg = Registry::start(None)?;
    let root = image_support::build_image(
        std::slice::from_ref(&layer),
        image_support::this_arch(),
        json!({
            "Env": ["PATH=/bin", "GREETING=hello from the image"],
            "WorkingDir": "/work",
        }),
        true,
    );
    push(&reg.addr, "tools/busybox", "1", &root, &Credentials::none()).await;
    Some(reg)
}
