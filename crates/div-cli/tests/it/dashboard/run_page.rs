//! A run's page: its log growing (in colour, its tail first), stop, a ceiling hit, placing
//! it again, the image it ran in.

use std::process::Command;

use fantoccini::Locator;
use serde_json::{Value, json};

use super::{FAKE_DIV, LAST_TICK_FN, TICKS_FN, origin, text_of, vision, with_browser};

#[test]
fn the_run_page_log_grows_while_the_run_prints_in_colour() {
    let local = vision();
    let name = local.ok(&[
        "run",
        "--detach",
        "--gpu",
        "cpu",
        "--max-spend",
        "1",
        "--name",
        "ticking",
        "ticker.py::main",
    ]);
    let url = local.dashboard();
    with_browser(|b| async move {
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
        local.ok(&["stop", "ticking"]);
    });
}

/// `lines()`: the numbers of the whole lines of `big.py` the log view shows, in order.
const LINES_FN: &str = "function lines() { return [...document.getElementById('logview')\
    .textContent.matchAll(/line (\\d{8}) x{49}\\n/g)].map(m => Number(m[1])); }";

#[test]
fn a_large_log_shows_its_tail_and_loads_earlier_parts_on_demand() {
    let local = vision();
    local.ok(&["run", "--gpu", "cpu", "--name", "big", "big.py::main"]);
    let url = local.dashboard();
    with_browser(|b| async move {
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
    });
}

#[test]
fn stop_asks_for_a_confirmation_and_the_status_changes() {
    let local = vision();
    let name = local.ok(&[
        "run",
        "--detach",
        "--gpu",
        "cpu",
        "--max-spend",
        "1",
        "--name",
        "to-stop",
        "--env",
        "MODE=fast",
        "--check",
        "metrics.accuracy>=0.8",
        "ticker.py::main",
    ]);
    let url = local.dashboard();
    with_browser(|b| async move {
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
        let status = local.ok(&["runs", "--json", "--all"]);
        let runs: Value = serde_json::from_str(&status).expect("json");
        let run = runs
            .as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == "to-stop"))
            .expect("the run");
        assert_ne!(run["status"], json!("running"), "{run}");
        assert!(run["ended_at"].is_string(), "{run}");
    });
}

#[test]
fn a_run_that_hit_its_ceiling_is_ended_and_says_why_it_has_no_exit_code() {
    let local = vision();
    // 1 cent buys some 7 s of an (emulated) H100 at $4.95/h.
    let out = local.div(&[
        "run",
        "--gpu",
        "h100",
        "--max-spend",
        "0.01",
        "--name",
        "capped",
        "--no-upload",
        "--",
        "sleep 1000",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hit its $0.01 ceiling"), "{stderr}");
    let run = local.run_json("capped");
    assert_eq!(run["status"], json!("hit_ceiling"), "{run}");
    assert!(
        run["exit_code"].is_null() && run["reason"].is_null(),
        "{run}"
    );
    let url = local.dashboard();
    let statuses: Vec<(&str, bool)> = div_api::RunStatus::ALL
        .iter()
        .map(|s| (s.as_str(), s.is_terminal()))
        .collect();
    with_browser(|b| async move {
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
    });
}

#[test]
fn place_it_again_is_a_command_a_shell_runs_as_the_run_was_placed() {
    let local = vision();
    let own = "echo installing 2>/dev/null && CKPT_DIR=/tmp/ckpt echo trained";
    let placed = [
        "run",
        "--detach",
        "--gpu",
        "cpu",
        "--cpu",
        "2",
        "--max-spend",
        "1",
        "--name",
        "replayed",
        "--env",
        "GREETING=hello world && echo leaked",
        "--env",
        "QUOTE=it's $(echo leaked)",
        "--check",
        "metrics.accuracy>=0.8",
        "--no-upload",
        "--",
        own,
    ];
    local.ok(&placed);
    let run = local.run_json("replayed");
    let url = local.dashboard();
    let replay = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shown = std::sync::Arc::clone(&replay);
    let sized = run.clone();
    with_browser(|b| async move {
        let run = sized;
        b.goto(&url).await;
        b.goto(&format!("{}/runs/replayed", origin(&url))).await;
        b.until(
            "the replay",
            "return document.getElementById('replay').textContent.startsWith('div run ')",
        )
        .await;
        *shown.lock().expect("the replay") = text_of(&b, "replay").await;
        assert_eq!(
            text_of(&b, "sku").await,
            format!("cpu · 2 cores · {} GiB", run["memory_gib"])
        );
    });
    let replay = replay.lock().expect("the replay").clone();
    if replay.is_empty() {
        return; // no browser
    }
    // What the page shows, run by a shell, with a `div` on PATH that writes down its words.
    let bin = local.tmp.path().join("fake-bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let fake = bin.join("div");
    std::fs::write(&fake, FAKE_DIV).expect("write");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let args_file = local.tmp.path().join("args");
    let out = Command::new("sh")
        .arg("-c")
        .arg(&replay)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("DIV_ARGS", &args_file)
        .output()
        .expect("sh runs");
    assert!(out.status.success(), "{replay}: {out:?}");
    // Nothing of the command ran here: the shell ran `div` and only `div`.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{replay}");
    let words: Vec<String> = std::fs::read(&args_file)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .expect("the fake div ran")
        .split_terminator('\0')
        .map(str::to_owned)
        .collect();
    let value = |flag: &str| -> Vec<String> {
        words
            .windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .collect()
    };
    // The words after `--` are the words the run was placed with, and each flag's value is
    // one word, as placed.
    let dashes = words.iter().position(|w| w == "--").expect("a `--`");
    assert_eq!(&words[dashes + 1..], [own], "{replay}");
    assert_eq!(words[0], "run", "{replay}");
    assert_eq!(value("--gpu"), ["cpu"], "{replay}");
    assert_eq!(value("--cpu"), ["2"], "{replay}");
    assert_eq!(value("--project"), ["vision"], "{replay}");
    assert_eq!(value("--max-spend"), ["1.00"], "{replay}");
    assert_eq!(
        value("--env"),
        [
            "GREETING=hello world && echo leaked",
            "QUOTE=it's $(echo leaked)"
        ],
        "{replay}"
    );
    assert_eq!(
        value("--check"),
        [run["checks"][0].as_str().expect("a check")],
        "{replay}"
    );
    assert!(words.contains(&"--no-upload".to_owned()), "{replay}");
    // And given to the real `div`, those words place the same run again.
    let mut again: Vec<&str> = words.iter().map(String::as_str).collect();
    again.splice(1..1, ["--detach", "--name", "replayed-again"]);
    local.ok(&again);
    let second = local.run_json("replayed-again");
    for field in [
        "project",
        "entrypoint",
        "command",
        "sku",
        "gpus",
        "cores",
        "memory_gib",
        "max_spend_cents",
        "image",
        "env",
        "checks",
        "code",
    ] {
        assert_eq!(second[field], run[field], "{field}: {replay}");
    }
}

#[test]
fn a_run_in_a_pulled_image_shows_the_image_and_its_digest() {
    let Some(reg) = crate::image::registry() else {
        return;
    };
    let local = vision();
    let image = format!("{}/tools/busybox:1", reg.addr);
    local.ok(&[
        "run",
        "--gpu",
        "cpu",
        "--image",
        &image,
        "--name",
        "imaged",
        "--no-upload",
        "--",
        "echo hi",
    ]);
    // The digest, named by the image cache's one unpacked tree.
    let trees: Vec<String> = std::fs::read_dir(local.home().join("images/images/sha256"))
        .expect("the image cache")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(trees.len(), 1, "{trees:?}");
    let digest = format!("sha256:{}", trees[0]);
    // The run's record names the image; the page adds what was pulled for it.
    assert_eq!(local.run_json("imaged")["image"], json!(image));
    let url = local.dashboard();
    with_browser(|b| async move {
        b.goto(&url).await;
        b.goto(&format!("{}/runs/imaged", origin(&url))).await;
        b.until(
            "the image",
            "return document.getElementById('image').textContent.includes('sha256:')",
        )
        .await;
        assert_eq!(text_of(&b, "image").await, format!("{image} ({digest})"));
    });
}
