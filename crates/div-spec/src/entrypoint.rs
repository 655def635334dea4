//! What a run runs: a Python function, a Python file, or the user's own command.

use std::fmt;
use std::str::FromStr;

/// What a run runs, as typed and as the container is told.
///
/// Read three ways (see `docs/input-rules.md`):
/// `train.py::run` calls the function (`python -u -c 'from train import run; run()'`),
/// `train.py` runs the file (`python -u train.py`), and anything with whitespace in it, or
/// any other bare word, is the user's own command, passed to `sh -lc` unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entrypoint {
    typed: String,
    command: String,
    kind: EntrypointKind,
}

/// Which of the three readings an [`Entrypoint`] got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntrypointKind {
    /// `file.py::function`: import the module and call the function.
    PythonFunction {
        /// The file, normalised (no leading `./`): `models/lora.py`.
        file: String,
        /// The module it imports as: `models.lora`.
        module: String,
        /// The function called: `train`.
        function: String,
    },
    /// `file.py`: run the file with Python.
    PythonFile {
        /// The file, normalised (no leading `./`).
        file: String,
    },
    /// The user's own command, passed through unchanged.
    Command,
}

/// The error returned by [`Entrypoint::parse`] and [`Entrypoint::from_words`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntrypointError {
    /// Nothing to run.
    #[error(
        "the command is empty; give a file like `train.py`, a function like `train.py::run`, or a command"
    )]
    Empty,
    /// `::` after something that is not a `.py` file.
    #[error(
        "`{typed}` names a function in `{file}`, which is not a `.py` file; write `file.py::function`"
    )]
    NotPythonFile { typed: String, file: String },
    /// `::` with nothing before it.
    #[error("`{typed}` names no file before `::`; write `file.py{typed}`")]
    NoFile { typed: String },
    /// `::` with nothing after it.
    #[error("`{typed}` names no function after `::`; write `{file}::function`")]
    NoFunction { typed: String, file: String },
    /// The function is not a Python identifier.
    #[error(
        "`{function}` in `{typed}` is not a Python function name: letters, digits and `_`, not starting with a digit, and not a keyword"
    )]
    BadFunction { typed: String, function: String },
    /// The file cannot be imported under the module path it names.
    #[error(
        "`{file}` in `{typed}` cannot be imported as a module: {why}; rename it, or run the file with `python {file}` as a command"
    )]
    NotImportable {
        typed: String,
        file: String,
        why: String,
    },
    /// `file.py:function`, one colon, where `file.py::function` was meant.
    #[error("`{typed}` has one colon; a function in a file is named with two: `{meant}`")]
    OneColon { typed: String, meant: String },
    /// Several words before `--` whose first names a Python file or function: the rest
    /// would be read as a command of their own, not as the script's arguments.
    #[error(
        "`{typed}` runs `{first}` with arguments; arguments for a script go after `--`: `{meant}`"
    )]
    ArgumentsBeforeDashes {
        typed: String,
        first: String,
        meant: String,
    },
    /// A path that leaves the shipped code.
    #[error(
        "`{file}` in `{typed}` is outside the code div ships; give a path inside this directory"
    )]
    OutsideCode { typed: String, file: String },
}

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Whether `s` is an ASCII Python identifier that is not a keyword.
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&s)
}

/// `./a/./b.py` -> `a/b.py`: drops leading `./` and inner `.` segments.
fn normalise(file: &str) -> String {
    if file.starts_with('/') {
        return file.to_owned();
    }
    file.split('/')
        .filter(|seg| *seg != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether a word keeps its meaning under `sh` without quotes.
fn shell_safe(word: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,^".contains(&b))
        && !word.starts_with('=')
}

/// `word` quoted for `sh` when it needs it: `it's` -> `'it'\''s'`.
pub fn shell_quote(word: &str) -> String {
    if shell_safe(word) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

impl Entrypoint {
    /// One argument as typed (`train.py::run`, `train.py`, `torchrun --nproc-per-node 8 train.py`).
    pub fn parse(typed: &str) -> Result<Entrypoint, EntrypointError> {
        if typed.trim().is_empty() {
            return Err(EntrypointError::Empty);
        }
        if typed.chars().any(char::is_whitespace) {
            return Ok(Entrypoint {
                typed: typed.to_owned(),
                command: typed.to_owned(),
                kind: EntrypointKind::Command,
            });
        }
        if let Some((file, function)) = typed.split_once("::") {
            return python_function(typed, file, function);
        }
        if let Some((file, function)) = typed.split_once(':')
            && file.ends_with(".py")
            && is_identifier(function)
        {
            return Err(EntrypointError::OneColon {
                typed: typed.to_owned(),
                meant: format!("{file}::{function}"),
            });
        }
        if typed.ends_with(".py") && typed.len() > 3 {
            let file = normalise(typed);
            check_inside(typed, &file)?;
            if file.is_empty() || file.ends_with("/.py") || file == ".py" {
                return Ok(command(typed));
            }
            return Ok(Entrypoint {
                typed: typed.to_owned(),
                command: format!("python -u {}", shell_quote(&file)),
                kind: EntrypointKind::PythonFile { file },
            });
        }
        Ok(command(typed))
    }

    /// Several words (what came after `--`, or several positional words): one command whose
    /// words keep their meaning under `sh -lc`; each word that needs it is single-quoted.
    /// A single word goes through [`Entrypoint::parse`].
    pub fn from_words(words: &[String]) -> Result<Entrypoint, EntrypointError> {
        match words {
            [] => Err(EntrypointError::Empty),
            [one] => Entrypoint::parse(one),
            many => Ok(command(&join_quoted(many))),
        }
    }

    /// What was typed before `--` (`head`) and after it (`args`), as `div run` got them.
    ///
    /// - Nothing before `--`: the words after it are the user's own command
    ///   ([`Entrypoint::from_words`]), `div run -- torchrun --nproc-per-node 8 train.py`.
    /// - Nothing after `--` (or no `--`): `head` alone, read by [`Entrypoint::from_words`];
    ///   several words whose first is a Python file or function are refused, with the
    ///   `--` form that passes the rest as arguments.
    /// - Both: `head` is read as the entrypoint and `args` are its arguments, each quoted for
    ///   `sh` where it needs it: `train.py -- --epochs 3` runs `python -u train.py --epochs 3`,
    ///   and `train.py::main -- --epochs 3` calls `main()` with `sys.argv[1:]` the arguments.
    ///   [`Entrypoint::typed`] is then `train.py -- --epochs 3`.
    pub fn from_parts(head: &[String], args: &[String]) -> Result<Entrypoint, EntrypointError> {
        if head.is_empty() {
            return Entrypoint::from_words(args);
        }
        if head.len() > 1 {
            let first = Entrypoint::parse(&head[0]);
            if let Ok(first) = &first
                && !matches!(first.kind, EntrypointKind::Command)
            {
                let typed = join_quoted(head);
                let rest: Vec<String> = head[1..].iter().chain(args).cloned().collect();
                return Err(EntrypointError::ArgumentsBeforeDashes {
                    meant: format!(
                        "div run {} -- {}",
                        shell_quote(&head[0]),
                        join_quoted(&rest)
                    ),
                    first: head[0].clone(),
                    typed,
                });
            }
            if let Err(e @ EntrypointError::OneColon { .. }) = first {
                return Err(e);
            }
        }
        let entry = Entrypoint::from_words(head)?;
        if args.is_empty() {
            return Ok(entry);
        }
        let args = join_quoted(args);
        Ok(Entrypoint {
            typed: format!("{} -- {args}", entry.typed),
            command: format!("{} {args}", entry.command),
            kind: entry.kind,
        })
    }

    /// What the user typed (several words joined with spaces, quoted where needed).
    pub fn typed(&self) -> &str {
        &self.typed
    }

    /// What the container is told, run under `sh -lc`.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Which reading this entrypoint got.
    pub fn kind(&self) -> &EntrypointKind {
        &self.kind
    }

    /// The `.py` file that must exist in the shipped code, if any. An absolute path names a
    /// file in the image, not in the shipped code, so it gives `None`.
    pub fn python_file(&self) -> Option<&str> {
        match &self.kind {
            EntrypointKind::PythonFunction { file, .. } | EntrypointKind::PythonFile { file }
                if !file.starts_with('/') =>
            {
                Some(file)
            }
            _ => None,
        }
    }
}

/// Words joined with spaces, each quoted for `sh` where it needs it.
fn join_quoted(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

fn command(typed: &str) -> Entrypoint {
    Entrypoint {
        typed: typed.to_owned(),
        command: typed.to_owned(),
        kind: EntrypointKind::Command,
    }
}

fn check_inside(typed: &str, file: &str) -> Result<(), EntrypointError> {
    if file.split('/').any(|seg| seg == "..") {
        return Err(EntrypointError::OutsideCode {
            typed: typed.to_owned(),
            file: file.to_owned(),
        });
    }
    Ok(())
}

fn python_function(
    typed: &str,
    raw_file: &str,
    function: &str,
) -> Result<Entrypoint, EntrypointError> {
    if raw_file.is_empty() {
        return Err(EntrypointError::NoFile {
            typed: typed.to_owned(),
        });
    }
    if !raw_file.ends_with(".py") {
        return Err(EntrypointError::NotPythonFile {
            typed: typed.to_owned(),
            file: raw_file.to_owned(),
        });
    }
    if function.is_empty() {
        return Err(EntrypointError::NoFunction {
            typed: typed.to_owned(),
            file: raw_file.to_owned(),
        });
    }
    if !is_identifier(function) {
        return Err(EntrypointError::BadFunction {
            typed: typed.to_owned(),
            function: function.to_owned(),
        });
    }
    let not_importable = |why: &str| EntrypointError::NotImportable {
        typed: typed.to_owned(),
        file: raw_file.to_owned(),
        why: why.to_owned(),
    };
    if raw_file.starts_with('/') {
        return Err(not_importable("an absolute path is not a module path"));
    }
    let file = normalise(raw_file);
    check_inside(typed, &file)?;
    let module_path = file.strip_suffix(".py").unwrap_or(&file);
    let mut segments = Vec::new();
    for seg in module_path.split('/') {
        if seg.is_empty() {
            return Err(not_importable("the path has an empty folder name"));
        }
        if seg.contains('-') {
            return Err(not_importable(&format!("`{seg}` has a dash")));
        }
        if seg.contains('.') {
            return Err(not_importable(&format!("`{seg}` has a dot")));
        }
        if seg.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(not_importable(&format!("`{seg}` starts with a digit")));
        }
        if KEYWORDS.contains(&seg) {
            return Err(not_importable(&format!("`{seg}` is a Python keyword")));
        }
        if !is_identifier(seg) {
            return Err(not_importable(&format!(
                "`{seg}` is not letters, digits and `_`"
            )));
        }
        segments.push(seg);
    }
    let module = segments.join(".");
    Ok(Entrypoint {
        typed: typed.to_owned(),
        command: format!("python -u -c 'from {module} import {function}; {function}()'"),
        kind: EntrypointKind::PythonFunction {
            file,
            module,
            function: function.to_owned(),
        },
    })
}

impl fmt::Display for Entrypoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.typed)
    }
}

impl FromStr for Entrypoint {
    type Err = EntrypointError;

    fn from_str(typed: &str) -> Result<Entrypoint, EntrypointError> {
        Entrypoint::parse(typed)
    }
}
