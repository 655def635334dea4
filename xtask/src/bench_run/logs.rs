//! `logs`: a run writing N MiB to stdout with `div run` into a pipe against `cat` of the
//! same bytes, and the time from a line written to the line printed (p50/p99).

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};

use super::args::Args;
use crate::bench_local::{Local, spawn_piped};
use crate::timing::{median, ms, percentile, ratio, verdict};

/// Reads `reader` to its end, counting bytes.
/// The bytes of a run's log that are the run's own: the lines the control plane writes at its
/// top (`div: no image pulled: …`, `div: emulated …`: each begins `div: `) are not counted, so
/// a log of N bytes from the producer counts N whatever the control plane says first.
fn drain_own(mut reader: impl Read) -> Result<u64> {
    const MARK: &[u8] = b"div: ";
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    // The log's start while it may still be the control plane's lines.
    let mut head: Vec<u8> = Vec::new();
    let mut in_head = true;
    loop {
        let k = reader.read(&mut buf)?;
        if k == 0 {
            return Ok(n + head.len() as u64);
        }
        if !in_head {
            n += k as u64;
            continue;
        }
        head.extend_from_slice(&buf[..k]);
        loop {
            if head.len() < MARK.len() && MARK.starts_with(&head) {
                break; // too short to tell yet
            }
            if !head.starts_with(MARK) {
                in_head = false;
                n += head.len() as u64;
                head.clear();
                break;
            }
            match head.iter().position(|b| *b == b'\n') {
                Some(end) => drop(head.drain(..=end)),
                None => break, // the line goes on in the next read
            }
        }
    }
}

/// The run's producer for the throughput bench: 62-byte lines of text written 1 MiB at a
/// time, so that producing the bytes costs what copying them costs (a `yes | head -c`
/// pipeline is itself slower than `cat`, and would be what the bench measures).
const PRODUCER: &str = r#"import sys
line = b"the quick brown fox jumps over the lazy dog, step 0123456789\n"
n = int(sys.argv[1])
block = (line * ((1 << 20) // len(line) + 1))[: 1 << 20]
out = sys.stdout.buffer
for _ in range(n >> 20):
    out.write(block)
out.write(block[: n & ((1 << 20) - 1)])
out.flush()
"#;

/// Runs `cmd` with its stdout drained from a pipe; the time and the bytes of the run's own
/// that it printed ([`drain_own`]).
fn time_into_pipe(cmd: &mut Command) -> Result<(Duration, u64, String)> {
    let started = Instant::now();
    let mut child = spawn_piped(cmd)?;
    let mut stderr = child.stderr.take().context("a piped stderr")?;
    let err = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let got = drain_own(child.stdout.take().context("a piped stdout")?)?;
    let status = child.wait()?;
    let elapsed = started.elapsed();
    let err = err.join().unwrap_or_default();
    ensure!(status.success(), "{cmd:?} failed ({status}): {err}");
    Ok((elapsed, got, err))
}

pub(crate) fn logs(div: &Path, args: &Args) -> Result<()> {
    let local = Local::start(div, "")?;
    let bytes = args.log_mib << 20;
    fs::write(local.project.join("produce.py"), PRODUCER)?;
    let size = bytes.to_string();
    let runs = args.runs(15).clamp(1, 5);

    // The producer alone, writing into a file: the floor under any `div run`.
    let scratch = local.project.join("produced");
    let (produce, ()) = median(runs, || {
        let out = fs::File::create(&scratch)?;
        let status = Command::new("python3")
            .arg(local.project.join("produce.py"))
            .arg(&size)
            .stdout(out)
            .status()
            .context("starting python3")?;
        ensure!(status.success(), "the producer failed: {status}");
        Ok(())
    })?;
    let _ = fs::remove_file(&scratch);

    // Interleaved: `div run` of the producer into a pipe, `cat` of the log it left into a
    // pipe, and `div logs` of the finished run into a pipe (the stream alone).
    let (mut div_times, mut cat_times, mut logs_times) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=runs {
        let (t, got, err) = time_into_pipe(&mut local.cmd(&[
            "run",
            "--gpu",
            "cpu",
            "--",
            "python3",
            "produce.py",
            &size,
        ]))?;
        ensure!(got == bytes, "div run printed {got} bytes, not {bytes}");
        let name = err
            .lines()
            .find_map(|l| l.strip_prefix("run-").map(|r| r.split_whitespace().next()))
            .flatten()
            .map(|r| format!("run-{r}"))
            .context("div run named no run")?;
        let path = local_log(&local, &name)?;
        let (c, got, _) = time_into_pipe(Command::new("cat").arg(&path))?;
        ensure!(got == bytes, "cat printed {got} bytes, not {bytes}");
        let (l, got, _) = time_into_pipe(&mut local.cmd(&["logs", &name]))?;
        ensure!(got == bytes, "div logs printed {got} bytes, not {bytes}");
        let _ = fs::remove_file(&path);
        // The first round warms up.
        if i > 0 {
            div_times.push(t);
            cat_times.push(c);
            logs_times.push(l);
        }
    }
    let cat = percentile(&mut cat_times, 50);
    let div_time = percentile(&mut div_times, 50);
    let logs_time = percentile(&mut logs_times, 50);
    let mib = args.log_mib as f64;
    let line = |what: &str, t: Duration| {
        println!(
            "  {what:<32} {:8.0} ms  {:7.0} MiB/s  {:5.2}× cat",
            ms(t),
            mib / t.as_secs_f64(),
            ratio(cat, t)
        );
    };
    println!("log throughput ({} MiB, median of {runs}):", args.log_mib);
    line("cat of the log into a pipe", cat);
    line("the producer alone, into a file", produce);
    line("div logs of the run into a pipe", logs_time);
    line("div run into a pipe", div_time);
    println!(
        "  div run: {:.2}× cat  (goal ≥ 0.5×: {})",
        ratio(cat, div_time),
        verdict(ratio(cat, div_time) >= 0.5)
    );

    // Latency: the run prints the wall clock every 20 ms; each line's age when it is read.
    let lines = 250;
    let command =
        format!("i=0; while [ $i -lt {lines} ]; do date +%s%N; sleep 0.02; i=$((i+1)); done");
    let mut child = local
        .cmd(&["run", "--gpu", "cpu", "--", &command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut ages = Vec::new();
    for line in BufReader::new(child.stdout.take().context("a piped stdout")?).lines() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        if let Ok(at) = line?.trim().parse::<u128>() {
            let age = now.saturating_sub(at);
            ages.push(Duration::from_nanos(u64::try_from(age).unwrap_or(u64::MAX)));
        }
    }
    ensure!(child.wait()?.success(), "the latency run failed");
    ensure!(
        ages.len() == lines,
        "{} lines of {lines} arrived",
        ages.len()
    );
    let p50 = percentile(&mut ages, 50);
    let p99 = percentile(&mut ages, 99);
    println!(
        "  line latency ({lines} lines)  p50 {:.1} ms  p99 {:.1} ms  (goal p99 ≤ 50 ms: {})",
        ms(p50),
        ms(p99),
        verdict(p99 <= Duration::from_millis(50))
    );
    Ok(())
}

/// The log file of the run called `name` under the server's home, its id asked of `div runs
/// --json` (no `sqlite3` needed).
fn local_log(local: &Local, name: &str) -> Result<PathBuf> {
    let listed = local.ok(&["runs", "--json", "--limit", "1000"])?;
    let runs: Vec<serde_json::Value> =
        serde_json::from_slice(&listed).context("div runs --json printed JSON")?;
    let id = runs
        .iter()
        .find(|r| r["name"] == name)
        .and_then(|r| r["id"].as_str())
        .with_context(|| format!("div runs does not list `{name}`"))?;
    let path = local.home.join("runs").join(id).join("log");
    ensure!(path.exists(), "no log at `{}`", path.display());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::drain_own;

    /// A reader that hands out `text` in pieces of `size` bytes.
    struct Pieces<'a>(&'a [u8], usize);

    impl std::io::Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let k = self.0.len().min(self.1).min(buf.len());
            buf[..k].copy_from_slice(&self.0[..k]);
            self.0 = &self.0[k..];
            Ok(k)
        }
    }

    fn own(text: &str) -> Vec<u64> {
        (1..=text.len().max(1))
            .map(|size| drain_own(Pieces(text.as_bytes(), size)).expect("reads"))
            .collect()
    }

    #[test]
    fn the_control_planes_first_lines_are_not_the_runs_bytes() {
        let host = "div: no image pulled: this machine's own system stands in\n";
        let run = "the quick brown fox\ndiv: said by the run\n";
        // However the reads cut it, only the run's bytes count (its own `div: ` line too).
        for n in own(&format!("{host}div: emulated h100\n{run}")) {
            assert_eq!(n, run.len() as u64);
        }
        for n in own(run) {
            assert_eq!(n, run.len() as u64);
        }
        for n in own("di") {
            assert_eq!(n, 2);
        }
        assert_eq!(own(""), [0]);
    }
}
