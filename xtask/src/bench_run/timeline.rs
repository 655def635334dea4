//! The phases of a `div run`, on one timeline from the moment the bench started `div`: the
//! client's own steps (its `DIVERGENT_TIMINGS` line, which also says when its `main` began)
//! and the marks the server and the run's supervisor wrote to `RUN_DIR/phases`, each at its
//! offset in milliseconds; then, over many runs, the median of each.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, ensure};

use super::overhead::Timed;

/// One run's events: (what, offset in ms from the start of `div`), in the order they came.
pub(super) struct Sample {
    /// The run's name, from the line that says it was placed.
    pub(super) name: String,
    /// When the bench started `div`, in µs since the Unix epoch: the timeline's zero.
    spawned_us: u64,
    pub(super) events: Vec<(String, f64)>,
}

/// What a `timings:` line says.
pub(super) struct ClientSteps {
    /// Each step's name and milliseconds, in order.
    pub(super) steps: Vec<(String, f64)>,
    /// When `main` began, in µs since the Unix epoch.
    pub(super) began_us: Option<u64>,
}

/// The client's steps, from the `timings:` line of a run `div` printed with
/// `DIVERGENT_TIMINGS=1`: each step's name and its milliseconds, and when `main` began (µs
/// since the Unix epoch) where it says (a `div` older than the bench's timeline does not).
pub(super) fn client_steps(t: &Timed) -> Result<ClientSteps> {
    let line = t
        .lines
        .iter()
        .rev()
        .find_map(|l| l.2.strip_prefix("timings: "))
        .context("div run printed no timings line")?;
    let (steps, began) = match line
        .strip_suffix(')')
        .and_then(|l| l.rsplit_once(" (main began at "))
    {
        Some((steps, began)) => {
            let began: f64 = began.parse().with_context(|| format!("`{began}`"))?;
            (steps, Some((began * 1e6).round() as u64))
        }
        None => (line, None),
    };
    let mut out = Vec::new();
    for step in steps.split(" · ") {
        let (name, value) = step
            .strip_suffix(" ms")
            .and_then(|s| s.rsplit_once(' '))
            .with_context(|| format!("a step is `name N ms`, not `{step}`"))?;
        let value: f64 = value.parse().with_context(|| format!("`{step}`"))?;
        out.push((name.to_owned(), value));
    }
    Ok(ClientSteps {
        steps: out,
        began_us: began,
    })
}

/// A run's events as the client saw them: `main` (its own start), each step's end, and the
/// process's exit as the bench saw it.
pub(super) fn client_sample(t: &Timed) -> Result<Sample> {
    let ClientSteps { steps, began_us } = client_steps(t)?;
    let name = t
        .lines
        .iter()
        .find(|l| !l.1 && l.2.starts_with("run-"))
        .and_then(|l| l.2.split_whitespace().next())
        .context("div run printed no line naming its run")?
        .to_owned();
    // Where `div` does not say when its `main` began, its steps are counted from its start.
    let main = began_us.map(|us| us.saturating_sub(t.spawned_us) as f64 / 1000.0);
    let mut events: Vec<(String, f64)> = main.map(|m| ("main".to_owned(), m)).into_iter().collect();
    let mut at = main.unwrap_or(0.0);
    for (step, ms) in steps {
        at += ms;
        events.push((step, at));
    }
    events.push(("gone".to_owned(), t.exit.as_secs_f64() * 1000.0));
    Ok(Sample {
        name,
        spawned_us: t.spawned_us,
        events,
    })
}

/// Adds the server's and the supervisor's marks from `run_dir/phases` to `sample`, each at
/// its offset from the start of `div`; fails when there are none.
pub(super) fn add_marks(sample: &mut Sample, run_dir: &Path) -> Result<()> {
    let spawned_us = sample.spawned_us;
    let text = fs::read_to_string(run_dir.join("phases"))
        .with_context(|| format!("reading `{}/phases`", run_dir.display()))?;
    let mut marks = 0;
    for line in text.lines() {
        let Some((name, us)) = line.split_once(' ') else {
            continue;
        };
        let Ok(us) = us.trim().parse::<u64>() else {
            continue;
        };
        let at = (us as f64 - spawned_us as f64) / 1000.0;
        sample.events.push((format!("server:{name}"), at));
        marks += 1;
    }
    ensure!(marks > 0, "`{}/phases` holds no mark", run_dir.display());
    Ok(())
}

/// What each event is, said on its row.
fn describe(event: &str) -> String {
    let said = match event {
        "main" => "client: main begins (its own start: exec, the loader, before main)",
        "validate" => "client: the words typed checked",
        "list" => "client: listing and hashing (the catalogue read beside it)",
        "price" => "client: sized, and the validate call answered",
        "upload" => "client: the upload (an unchanged tree: what is missing asked)",
        "create" => "client: the create call answered",
        "start + first log byte" => "client: the first log byte",
        "start + run" => "client: the end (the run printed nothing)",
        "run" => "client: the end frame read, the last line printed",
        "exit" => "client: its timings line (the process exits after)",
        "gone" => "bench: the process seen to exit",
        "server:launch" => "server: placement (the launcher begins)",
        "server:spec" => "server: the run's folders and spec.json written",
        "server:started" => "server: the supervisor process started",
        "server:supervisor" => "supervisor: main (its own start, its lock taken)",
        "server:secrets" => "supervisor: its spec and secrets read",
        "server:cgroups" => "supervisor: log opened, cgroups made",
        "server:mounts" => "supervisor: mounts (its namespace, /workspace)",
        "server:spawned" => "supervisor: bwrap spawned",
        "server:exited" => "run: bwrap and `sh -lc true` exited",
        "server:judged" => "supervisor: what is left killed, checks judged",
        "server:end" => "supervisor: end.json written",
        "server:let-go" => "supervisor: its places let go",
        "server:recorded" => "server: the end recorded",
        "server:end-frame" => "server: the end frame sent",
        other => return other.to_owned(),
    };
    said.to_owned()
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub(super) fn median_f64(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Prints each event's median offset from the start of `div`, in the order of those medians,
/// and the median time (taken run by run) since the row above of its own side: the client's
/// (and the bench's), or the server's and the supervisor's.
pub(super) fn print(samples: &[Sample]) {
    let mut offsets: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for s in samples {
        for (name, at) in &s.events {
            offsets.entry(name.as_str()).or_default().push(*at);
        }
    }
    let mut rows: Vec<(&str, f64, usize)> = offsets
        .into_iter()
        .map(|(name, mut v)| (name, median_f64(&mut v), v.len()))
        .collect();
    // By median offset; at the same offset, in the order the first run had them.
    let first = |name: &str| {
        samples
            .first()
            .and_then(|s| s.events.iter().position(|e| e.0 == name))
            .unwrap_or(usize::MAX)
    };
    rows.sort_by(|a, b| a.1.total_cmp(&b.1).then(first(a.0).cmp(&first(b.0))));
    if !samples
        .iter()
        .any(|s| s.events.iter().any(|e| e.0 == "main"))
    {
        println!(
            "  (this `div` does not say when its main began: its steps are counted from its start, early by its own start, about 1 ms)"
        );
    }
    println!(
        "      at   since  (ms: from the bench's start of `div`; since the row above on the same side)"
    );
    println!("    0.00           start: the bench starts `div` (fork, exec)");
    // The row above on each side: the client's, the server's.
    let (mut client, mut server): (Option<&str>, Option<&str>) = (None, None);
    for (name, at, count) in rows {
        let side = if name.starts_with("server:") {
            &mut server
        } else {
            &mut client
        };
        let above = *side;
        let mut since: Vec<f64> = samples
            .iter()
            .filter_map(|s| {
                let find = |n: &str| s.events.iter().find(|e| e.0 == n).map(|e| e.1);
                Some(find(name)? - above.map_or(Some(0.0), find)?)
            })
            .collect();
        let seen = if count < samples.len() {
            format!(" (in {count} of {} runs)", samples.len())
        } else {
            String::new()
        };
        let since = if above.is_none() && name.starts_with("server:") {
            "".to_owned()
        } else {
            format!("{:6.2}", median_f64(&mut since))
        };
        println!("  {at:6.2}  {since:>6}   {}{seen}", describe(name));
        *side = Some(name);
    }
}
