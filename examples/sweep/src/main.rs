//! `div-sweep`: div-core embedded in a program of its own. It places a few runs of the
//! quickstart (`examples/quickstart`), one per `--env` value, follows them all at once, and
//! prints one line per run: its status, its spend and its checks.
//!
//! ```text
//! div-sweep [--dir DIR] [--gpu SKU] [--check CHECK]... [--div PATH] [KEY=VALUE]...
//! ```
//!
//! With no `KEY=VALUE`, it sweeps the quickstart's learning rate: `LR=0.05`, `LR=0.5`,
//! `LR=2.0`, each checked with `metrics.accuracy>=0.8`.
//!
//! Which control plane: the one `div` would use from the quickstart's folder
//! ([`div_core::resolve_target`]: `DIVERGENT_API_URL` and `DIVERGENT_TOKEN`, `divergent.json`,
//! the user's config file); with none configured, the local one in `DIVERGENT_HOME` (default
//! `$XDG_DATA_HOME/div`), started on demand with [`div_server::LocalControlPlane`] as `div`
//! starts it, by the `div` executable given with `--div` (default: the `div` beside this
//! program, else `div` on `PATH`). Like `div`, this program reads its environment itself; the
//! libraries read none of it.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use div_api::{
    CheckOutcome, ControlPlane, Endpoint, HttpControlPlane, Options, Run, RunStatus, Token,
};
use div_core::{Event, LogsOptions, RunOptions, RunOutcome, Target};
use div_server::LocalControlPlane;
use div_spec::{Check, EnvPair, Money};

/// What was asked on the command line.
#[derive(Debug)]
struct Sweep {
    dir: PathBuf,
    gpu: String,
    checks: Vec<Check>,
    div: Option<PathBuf>,
    values: Vec<EnvPair>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Sweep> {
    let mut sweep = Sweep {
        dir: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../quickstart")),
        gpu: "cpu".into(),
        checks: Vec::new(),
        div: None,
        values: Vec::new(),
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .with_context(|| format!("`{flag}` needs a value"))
        };
        match arg.as_str() {
            "--dir" => sweep.dir = value("--dir")?.into(),
            "--gpu" => sweep.gpu = value("--gpu")?,
            "--div" => sweep.div = Some(value("--div")?.into()),
            "--check" => {
                let typed = value("--check")?;
                sweep.checks.push(
                    typed
                        .parse()
                        .with_context(|| format!("`{typed}` is not a check"))?,
                );
            }
            flag if flag.starts_with('-') => {
                bail!("unknown flag `{flag}`; expected --dir, --gpu, --check, --div or KEY=VALUE")
            }
            pair => sweep.values.push(
                pair.parse()
                    .with_context(|| format!("`{pair}` is not KEY=VALUE"))?,
            ),
        }
    }
    if sweep.values.is_empty() {
        for lr in ["0.05", "0.5", "2.0"] {
            sweep.values.push(format!("LR={lr}").parse()?);
        }
    }
    if sweep.checks.is_empty() {
        sweep.checks.push("metrics.accuracy>=0.8".parse()?);
    }
    Ok(sweep)
}

/// An environment variable, empty as unset.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The control plane `div` would use from `dir`: `DIVERGENT_API_URL`, else `api_url` in the
/// nearest `divergent.json`, else in the user's config file ([`div_core::resolve_target`]);
/// none of them, the local one, started when it is not answering.
async fn connect(dir: &Path, div: Option<PathBuf>) -> Result<Arc<dyn ControlPlane>> {
    let home_dir = env("HOME").map(PathBuf::from);
    let user_config = div_core::user_config_path(
        env("XDG_CONFIG_HOME").map(PathBuf::from).as_deref(),
        home_dir.as_deref(),
    );
    let user_config = match &user_config {
        Some(path) => div_core::read_config_file(path)?,
        None => None,
    };
    let project_file = div_core::find_project_file(dir)?;
    let target = div_core::resolve_target(
        env("DIVERGENT_API_URL"),
        env("DIVERGENT_TOKEN"),
        project_file.as_ref().map(|(p, m)| (p.as_path(), m)),
        user_config.as_ref().map(|(p, m)| (p.as_path(), m)),
    )?;
    if let Target::Remote { url, token, from } = target {
        let endpoint = Endpoint::parse(&url)
            .with_context(|| format!("`{url}` ({from}) is not a control plane address"))?;
        let options = Options {
            token: token.map(Token::new),
            ..Options::default()
        };
        return Ok(Arc::new(HttpControlPlane::new(endpoint, options)?));
    }
    let home = match env("DIVERGENT_HOME") {
        Some(home) => PathBuf::from(home),
        None => div_core::default_local_home(
            env("XDG_DATA_HOME").map(PathBuf::from).as_deref(),
            home_dir.as_deref(),
        )
        .context("neither DIVERGENT_HOME nor HOME is set: where is the local control plane?")?,
    };
    let div = match div {
        Some(div) => div,
        None => std::env::current_exe()
            .ok()
            .and_then(|me| Some(me.parent()?.join("div")))
            .filter(|beside| beside.is_file())
            .unwrap_or_else(|| "div".into()),
    };
    let local = LocalControlPlane::new(home, div).emulate_gpus(env("DIVERGENT_EMULATE_GPUS"));
    match local.connect(Options::default()).await {
        Ok(cp) => Ok(Arc::new(cp)),
        Err(e) => Err(with_hint(e.hint(), anyhow::Error::new(e))),
    }
}

/// The error, then its hint when it has one.
fn with_hint(hint: Option<String>, e: anyhow::Error) -> anyhow::Error {
    match hint {
        Some(hint) => anyhow::anyhow!("{e:#}\nhint: {hint}"),
        None => e,
    }
}

/// `passed 1/1`, `missed 1/2`, `no checks`, `checks unknown 1/1`.
fn checks(run: &Run) -> String {
    let total = run.verdicts.len();
    if total == 0 {
        return if run.checks.is_empty() {
            "no checks".into()
        } else {
            "checks not judged".into()
        };
    }
    let passed = run
        .verdicts
        .iter()
        .filter(|v| v.outcome == CheckOutcome::Passed)
        .count();
    let lines: Vec<&str> = run.verdicts.iter().map(|v| v.line.as_str()).collect();
    let word = if passed == total { "passed" } else { "missed" };
    let count = if passed == total {
        passed
    } else {
        total - passed
    };
    format!("{word} {count}/{total} ({})", lines.join("; "))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match sweep().await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Places, follows and reports; whether every run succeeded and passed its checks.
async fn sweep() -> Result<bool> {
    let sweep = parse(std::env::args().skip(1))?;
    let cp = connect(&sweep.dir, sweep.div.clone()).await?;
    let project_env = env("DIVERGENT_PROJECT");

    // Place every run first (detached), so they run side by side.
    let mut placed: Vec<(String, Run)> = Vec::new();
    for pair in &sweep.values {
        let mut options = RunOptions::new(&sweep.dir, vec!["train.py::main".into()]);
        options.gpu = sweep.gpu.clone();
        options.env = vec![pair.clone()];
        options.checks = sweep.checks.clone();
        options.project_env = project_env.clone();
        options.detach = true;
        // Warnings (a large shipment, an unused image) go to stderr; the rest is quiet.
        let mut sink = |event: Event| {
            if let Event::Warning { message, .. } = event {
                eprintln!("warning: {message}");
            }
        };
        let label = format!("{}={}", pair.key, pair.value);
        match div_core::run(&*cp, &options, &mut sink).await {
            Ok(RunOutcome::Detached(run)) => {
                eprintln!("placed {} with {label}", run.name);
                placed.push((label, run));
            }
            Ok(_) => bail!("a detached run came back as something else"),
            Err(e) => {
                let hint = e.hint();
                let e =
                    anyhow::Error::new(e).context(format!("could not place the run with {label}"));
                return Err(with_hint(hint, e));
            }
        }
    }

    // Follow them all at once; each ends in its own time.
    let mut following = tokio::task::JoinSet::new();
    for (i, (_, run)) in placed.iter().enumerate() {
        let cp = Arc::clone(&cp);
        let options = LogsOptions {
            run: run.id.clone(),
            follow: true,
            node: None,
        };
        following.spawn(async move {
            // The log itself is not shown: one line per run is the point.
            let mut sink = |_: Event| {};
            (i, div_core::logs(&*cp, &options, &mut sink).await)
        });
    }
    let mut ended: Vec<Option<Run>> = vec![None; placed.len()];
    while let Some(joined) = following.join_next().await {
        let (i, result) = joined.context("a follower panicked")?;
        ended[i] = Some(result.with_context(|| format!("following {}", placed[i].1.name))?);
    }

    let mut all_good = true;
    for ((label, _), run) in placed.iter().zip(ended.into_iter().flatten()) {
        let status = run.status;
        all_good &= status == RunStatus::Succeeded
            && run
                .verdicts
                .iter()
                .all(|v| v.outcome == CheckOutcome::Passed);
        println!(
            "{}  {label}  {status}  spent {}  {}",
            run.name,
            Money::from_cents(run.spent_cents),
            checks(&run)
        );
    }
    Ok(all_good)
}
