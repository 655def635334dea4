//! The scan's tests: Python's own syntax, corner by corner, and its standard library.

use super::*;

fn names(src: &str) -> Vec<String> {
    match module_names(src.as_bytes()) {
        Defines::Names(n) => n.into_iter().collect(),
        Defines::Unknown(why) => panic!("unknown: {why}\n{src}"),
    }
}

fn unknown(src: &str) -> &'static str {
    match module_names(src.as_bytes()) {
        Defines::Unknown(why) => why,
        Defines::Names(n) => panic!("expected unknown, got {n:?}\n{src}"),
    }
}

#[test]
fn module_level_definitions_are_found() {
    let src = r#"
"""A docstring with def fake(): inside."""
import os, numpy as np
import torch.nn
from sklearn.neural_network import BernoulliRBM
from x import (a,
    b as bee)
from . import sibling

LR = 1e-3
x: int = 3
y: float
p, (q, *r) = 1, (2, 3)
s = t = 4
obj.attr = 5
d["key"] = 6
counter += 1

@decorator(arg=1)
def main(epochs: int = 3) -> None:
    inner = 1
    def nested():
        pass
    print(f"{epochs!r:>{width}} {d["k"]}")

async def serve(): return 1

class Model(Base):
    field = 1
    def method(self):
        pass

if __name__ == "__main__":
    main()
else:
    fallback = 1

try:
    from fast import loader
except ImportError as err:
    def loader():
        pass

for i, (j, k) in enumerate(pairs):
    pass
with open("f") as fh, lock:
    pass
if (n := 10) > 5: late = n
type Alias = list[int]
f = lambda v=1: v
"#;
    let got = names(src);
    for want in [
        "os",
        "np",
        "torch",
        "BernoulliRBM",
        "a",
        "bee",
        "sibling",
        "LR",
        "x",
        "y",
        "p",
        "q",
        "r",
        "s",
        "t",
        "main",
        "serve",
        "Model",
        "fallback",
        "loader",
        "err",
        "i",
        "j",
        "k",
        "fh",
        "n",
        "late",
        "Alias",
        "f",
    ] {
        assert!(got.contains(&want.to_string()), "{want} in {got:?}");
    }
    for not in [
        "inner",
        "nested",
        "field",
        "method",
        "fake",
        "obj",
        "attr",
        "d",
        "key",
        "epochs",
        "counter",
        "numpy",
        "nn",
        "neural_network",
        "ImportError",
        "enumerate",
        "pairs",
    ] {
        assert!(!got.contains(&not.to_string()), "{not} in {got:?}");
    }
}

#[test]
fn what_it_cannot_tell_it_says() {
    assert_eq!(unknown("from x import *\n"), "`from … import *`");
    assert_eq!(unknown("globals()['main'] = f\n"), "`globals()`");
    assert_eq!(
        names("def setup():\n    global main, other\n    main = f\n"),
        ["main", "other", "setup"]
    );
    assert_eq!(unknown("ｍａｉｎ = 1\n"), "a name that is not ASCII");
    assert_eq!(unknown("print(vars())\n"), "`vars()`");
    assert_eq!(
        unknown("def __getattr__(name):\n    pass\n"),
        "a module-level `__getattr__`"
    );
    assert_eq!(
        unknown("import sys\nsys.modules[__name__] = M()\n"),
        "`sys.modules`"
    );
    assert_eq!(unknown("exec('main = 1')\n"), "`exec`");
    // What ML scripts do all day is no reason to give up.
    assert_eq!(
        names(
            "import torch\nmodel = torch.nn.Linear(1, 1)\nmodel.eval()\nfor m in model.modules(): pass\nprint(vars(args))\nsetattr(cfg, 'lr', 1)\ndef eval(): pass\n"
        ),
        ["eval", "m", "model", "torch"]
    );
    assert_eq!(
        unknown("match x:\n    case main:\n        pass\n"),
        "a `match` statement"
    );
    assert_eq!(unknown("s = 'never closed\n"), "a string that never closes");
    assert_eq!(unknown("f(\n"), "a bracket that never closes");
    assert_eq!(unknown("x = 1 \\ 2\n"), "a backslash outside a string");
    assert_eq!(
        unknown("x = a ? b\n"),
        "a character Python does not have outside a string"
    );
    assert!(matches!(module_names(b"\xff\xfe"), Defines::Unknown(_)));
}

#[test]
fn lines_join_across_brackets_backslashes_and_triple_quotes() {
    let src = "x = (1,\n  2)\ny = 1 + \\\n  2\nz = '''\ndef fake():\n'''\n\tdef tabbed(): pass\nmatch = 3\n";
    assert_eq!(names(src), ["match", "tabbed", "x", "y", "z"]);
    assert_eq!(names("\u{feff}def main(): pass\r\n"), ["main"]);
    assert_eq!(names("(pars): bool = True\nobj.attr: int = 1\n"), ["pars"]);
    assert_eq!(names(""), Vec::<String>::new());
}

/// Pieces of Python, so the scan gets deep into strings, brackets and statements.
const PIECES: &[&str] = &[
    "def ", "class ", "async ", "import ", "from ", " as ", "global ", "lambda ", "if ", "for ",
    " in ", "with ", "match ", "type ", "f\"", "f'", "'''", "\"\"\"", "\"", "'", "\\", "{", "}",
    "{{", "(", ")", "[", "]", ":", "=", ":=", "+=", ",", ";", ".", "*", "@", "#", "\n", "\r\n",
    "\t", " ", "    ", "main", "x", "1", "é", "\u{feff}", "\\\n",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

    /// Any bytes at all: an answer, never a panic.
    #[test]
    fn never_panics_on_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let _ = module_names(&bytes);
    }

    /// Python-like text: an answer, never a panic; a name it lists is one the text has.
    #[test]
    fn never_panics_on_python_like_text(pieces in proptest::collection::vec(proptest::sample::select(PIECES), 0..80)) {
        let src = pieces.concat();
        if let Defines::Names(names) = module_names(src.as_bytes()) {
            for n in names {
                proptest::prop_assert!(src.contains(&n), "{n} in {src:?}");
            }
        }
    }
}

/// What Python's own parser says the module level of each of 600 files of its standard
/// library binds (`ast`), and what the scan says: every name Python finds, the scan finds
/// (it may find more, or say it cannot tell; it never misses one, which would refuse a run
/// that works).
#[test]
fn never_misses_a_name_python_finds_in_its_standard_library() {
    let out = std::process::Command::new("python3")
        .args(["-c", PYTHON_AST_NAMES])
        .output()
        .expect("python3 runs (the local control plane's runs need it too)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut read, mut missing) = (0, Vec::new());
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        let path = v["path"].as_str().unwrap_or_default();
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        if let Defines::Names(got) = module_names(&bytes) {
            read += 1;
            for want in v["names"].as_array().into_iter().flatten() {
                let want = want.as_str().unwrap_or_default();
                if !got.contains(want) {
                    missing.push(format!("{path}: {want}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
    // Most of the library is read, not given up on.
    assert!(read > 400, "only {read} files read");
}

const PYTHON_AST_NAMES: &str = r#"import ast, json, sys, glob
import os
root = os.path.dirname(ast.__file__)
files = sorted(glob.glob(root + '/**/*.py', recursive=True))[:600]
for p in files:
    try:
        src = open(p, 'rb').read()
        tree = ast.parse(src)
    except Exception:
        continue
    names = set()
    def targets(t):
        if isinstance(t, ast.Name): names.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts: targets(e)
        elif isinstance(t, ast.Starred): targets(t.value)
    def walk(body):
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.Assign):
                for t in n.targets: targets(t)
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)):
                targets(n.target)
            elif isinstance(n, ast.Import):
                for a in n.names: names.add(a.asname or a.name.split('.')[0])
            elif isinstance(n, ast.ImportFrom):
                for a in n.names:
                    if a.name != '*': names.add(a.asname or a.name)
            elif isinstance(n, (ast.For, ast.AsyncFor)):
                targets(n.target); walk(n.body); walk(n.orelse)
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                for i in n.items:
                    if i.optional_vars is not None: targets(i.optional_vars)
                walk(n.body)
            elif isinstance(n, ast.If) or isinstance(n, ast.While):
                walk(n.body); walk(n.orelse)
            elif isinstance(n, ast.Try) or (hasattr(ast, 'TryStar') and isinstance(n, ast.TryStar)):
                walk(n.body); walk(n.orelse); walk(n.finalbody)
                for h in n.handlers:
                    if h.name: names.add(h.name)
                    walk(h.body)
    walk(tree.body)
    print(json.dumps({"path": p, "names": sorted(names)}))
"#;
