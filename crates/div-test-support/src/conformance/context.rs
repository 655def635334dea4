//! What the suite is told of the control plane under test, what it reports, and the quick
//! run it places.

use std::time::Duration;

use div_api::CreateRun;

/// What the suite needs to know about the control plane under test.
#[derive(Debug, Clone)]
pub struct ConformanceContext {
    /// A SKU that places a quick run (`cpu`).
    pub sku: String,
    /// GPUs to ask for (0 for `cpu`).
    pub gpus: u32,
    /// A command that ends quickly, printing `expected_output` and exiting with
    /// `expected_exit_code`.
    pub command: String,
    /// Bytes the quick run's log holds (other lines, such as a notice, may surround them).
    pub expected_output: Vec<u8>,
    /// The quick run's exit code.
    pub expected_exit_code: i32,
    /// Whether runs really execute (a fake's stay queued until stopped).
    pub runs_execute: bool,
    /// The project runs are placed in.
    pub project: String,
    /// Prefixed to every volume, secret and run name, so suites can share a server.
    pub prefix: String,
    /// How long to wait for a quick run to end.
    pub run_deadline: Duration,
}

impl Default for ConformanceContext {
    fn default() -> Self {
        ConformanceContext {
            sku: "cpu".to_owned(),
            gpus: 0,
            command: "echo hello; exit 3".to_owned(),
            expected_output: b"hello\n".to_vec(),
            expected_exit_code: 3,
            runs_execute: false,
            project: "conformance".to_owned(),
            prefix: "conf".to_owned(),
            run_deadline: Duration::from_secs(60),
        }
    }
}

/// What the suite found: each check's name, and why it failed when it did.
#[derive(Debug, Default)]
pub struct ConformanceReport {
    pub passed: Vec<&'static str>,
    pub failed: Vec<(&'static str, String)>,
}

impl ConformanceReport {
    /// Panic listing every failed check, if any failed.
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.failed.is_empty() {
            let lines: Vec<String> = self
                .failed
                .iter()
                .map(|(name, why)| format!("  {name}: {why}"))
                .collect();
            panic!(
                "{} of {} conformance checks failed:\n{}",
                self.failed.len(),
                self.failed.len() + self.passed.len(),
                lines.join("\n")
            );
        }
    }
}

/// A quick run's request.
pub fn quick_run(ctx: &ConformanceContext, name: Option<String>) -> CreateRun {
    CreateRun {
        project: ctx.project.clone(),
        name,
        entrypoint: ctx.command.clone(),
        command: ctx.command.clone(),
        sku: ctx.sku.clone(),
        gpus: ctx.gpus,
        cpu: None,
        memory_gib: None,
        max_spend_cents: None,
        image: None,
        pull: None,
        env: Vec::new(),
        checks: Vec::new(),
        code: None,
        telemetry_layout: None,
        model: None,
        extra: Default::default(),
    }
}

/// A key unique to this suite run.
pub(crate) fn key(ctx: &ConformanceContext, what: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{what}-{t:x}-{n}", ctx.prefix)
}
