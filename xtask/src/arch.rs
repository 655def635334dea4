//! `cargo xtask arch`: the shape rules ARCHITECTURE.md states, checked on the code itself, so
//! that a claim there cannot quietly stop being true.
//!
//! - **No circle of files inside a crate.** A file depends on another when its code (not its
//!   tests) names an item of the other's modules: through `use`, a path from `crate::`,
//!   `super::` or `self::`, or a child module's name. A re-export (`pub use a::B` in `x.rs`)
//!   is followed to where `B` lives, so a facade is not a dependency of its own. The crate's
//!   root (`lib.rs`, `main.rs`) is left out: it declares the modules, re-exports what
//!   callers need and holds the few types any module may name.
//! - **No function over [`MAX_FN_LINES`] lines** outside tests, from `fn` to its closing brace.
//! - **No file over [`MAX_FILE_LINES`] lines** unless a line of its opening `//!` comment says
//!   why, starting `Why it is long:` (or `Why over N lines:`, `Why one long file:`).
//! - **`Result<_, String>` in no library crate** outside tests: an error says what it is.
//! - **`HttpError` only under `div-server/src/http/`**: the domain does not speak HTTP.
//!
//! The workspace's own unit test (`the_workspace_keeps_its_shape`) runs all of it, so CI fails
//! when a rule is newly broken, or when a finding [`KNOWN`] lists is mended and still listed;
//! `cargo xtask arch` prints every finding, and `cargo xtask arch --map CRATE_DIR` what each
//! file of a crate depends on.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use syn::visit::Visit;

use modules::{ModuleTree, dependency_map};
pub(crate) use shape::MAX_FN_LINES;
use shape::ShapeVisitor;

/// The longest a file may be without saying why at its top.
pub(crate) const MAX_FILE_LINES: usize = 700;
/// The findings not yet mended, one a line (the workspace's test allows these and no others).
pub(crate) const KNOWN: &str = "xtask/arch-known.txt";
/// What a long file's opening comment says.
const LONG_REASON: &str = "Why it is long:";

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Finding {
    /// Files that depend on each other in a circle (each depends on the next, the last on the
    /// first).
    Circle {
        krate: String,
        files: Vec<String>,
    },
    LongFn {
        file: String,
        line: usize,
        name: String,
        lines: usize,
    },
    LongFile {
        file: String,
        lines: usize,
    },
    StringError {
        file: String,
        line: usize,
        item: String,
    },
    HttpErrorOutsideHttp {
        file: String,
        line: usize,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Circle { krate, files } => {
                write!(f, "{krate}: a circle of files: {}", files.join(" → "))?;
                if let Some(first) = files.first() {
                    write!(f, " → {first}")?;
                }
                Ok(())
            }
            Finding::LongFn {
                file,
                line,
                name,
                lines,
            } => write!(
                f,
                "{file}:{line}: `{name}` is {lines} lines (at most {MAX_FN_LINES})"
            ),
            Finding::LongFile { file, lines } => write!(
                f,
                "{file}: {lines} lines (over {MAX_FILE_LINES}) and no `//! {LONG_REASON}` at its top"
            ),
            Finding::StringError { file, line, item } => {
                write!(f, "{file}:{line}: `{item}` returns `Result<_, String>`")
            }
            Finding::HttpErrorOutsideHttp { file, line } => {
                write!(f, "{file}:{line}: `HttpError` outside `http/`")
            }
        }
    }
}

/// `cargo xtask arch`: prints each finding and fails when there is one.
pub(crate) fn run(root: &Path) -> Result<()> {
    let findings = check_workspace(root)?;
    #[allow(clippy::print_stdout)]
    for finding in &findings {
        println!("{finding}");
    }
    if !findings.is_empty() {
        bail!(
            "{} finding(s); those not yet mended are listed in {KNOWN}",
            findings.len()
        );
    }
    #[allow(clippy::print_stdout)]
    {
        println!("the workspace keeps its shape");
    }
    Ok(())
}

/// Every rule, over every crate of the workspace (`crates/*`, `xtask`, `examples/*`), vendored
/// code left out.
pub(crate) fn check_workspace(root: &Path) -> Result<Vec<Finding>> {
    let mut dirs = Vec::new();
    for parent in ["crates", "examples"] {
        let Ok(entries) = std::fs::read_dir(root.join(parent)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.path().join("Cargo.toml").is_file() {
                dirs.push(entry.path());
            }
        }
    }
    dirs.push(root.join("xtask"));
    dirs.sort();
    let mut findings = Vec::new();
    for dir in dirs {
        findings.extend(check_crate(root, &dir)?);
    }
    findings.sort();
    Ok(findings)
}

/// The rules over one crate at `dir`.
pub(crate) fn check_crate(root: &Path, dir: &Path) -> Result<Vec<Finding>> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rel = |p: &Path| {
        p.strip_prefix(root)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    let mut findings = Vec::new();
    let library = dir.join("src/lib.rs").is_file();
    for file in rust_files(dir)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES && !says_why_long(&text) {
            findings.push(Finding::LongFile {
                file: rel(&file),
                lines,
            });
        }
    }
    for root_file in ["src/lib.rs", "src/main.rs"] {
        let root_file = dir.join(root_file);
        if !root_file.is_file() {
            continue;
        }
        let tree = ModuleTree::load(&root_file)?;
        for (id, file) in tree.files.iter().enumerate() {
            let src = &tree.sources[id];
            let mut shape = ShapeVisitor::default();
            shape.visit_file(src);
            for (line, fn_name, fn_lines) in shape.long_fns {
                findings.push(Finding::LongFn {
                    file: rel(file),
                    line,
                    name: fn_name,
                    lines: fn_lines,
                });
            }
            if library {
                for (line, item) in shape.string_errors {
                    findings.push(Finding::StringError {
                        file: rel(file),
                        line,
                        item,
                    });
                }
            }
            if name == "div-server" && !file.starts_with(dir.join("src/http")) {
                for line in shape.http_errors {
                    findings.push(Finding::HttpErrorOutsideHttp {
                        file: rel(file),
                        line,
                    });
                }
            }
        }
        for circle in tree.circles() {
            findings.push(Finding::Circle {
                krate: name.clone(),
                files: circle
                    .iter()
                    .map(|&id| rel(&tree.files[id]).replacen(&format!("crates/{name}/"), "", 1))
                    .collect(),
            });
        }
    }
    Ok(findings)
}

/// Whether a long file says why at its top (its opening `//!` lines).
fn says_why_long(text: &str) -> bool {
    text.lines()
        .take_while(|l| l.starts_with("//!") || l.trim().is_empty() || l.starts_with("#!"))
        .map(|l| l.trim_start_matches("//!").trim_start())
        .any(|l| {
            // `Why it is long: …`, or as earlier files say it: `Why over 700 lines: …`,
            // `Why one long file: …`.
            l.starts_with(LONG_REASON)
                || (l.starts_with("Why ")
                    && l.split(':').next().is_some_and(|head| {
                        head.ends_with(" lines") || head.ends_with("long file")
                    }))
        })
}

/// Every `.rs` file under `dir`, `target/`, `vendor/` and fuzz corpora left out.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let entry = entry?;
            let path = entry.path();
            let file_name = entry.file_name();
            if entry.file_type()?.is_dir() {
                if !matches!(
                    file_name.to_str(),
                    Some("target" | "vendor" | "corpus" | "artifacts" | "node_modules")
                ) {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `cargo xtask arch --map DIR`: each file of the crate at `DIR` and the files it depends on.
pub(crate) fn print_map(dir: &Path) -> Result<()> {
    #[allow(clippy::print_stdout)]
    for (file, targets) in dependency_map(dir)? {
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        println!("{file} → {}", targets.join(", "));
    }
    Ok(())
}

mod modules;
mod shape;

#[cfg(test)]
mod tests;
