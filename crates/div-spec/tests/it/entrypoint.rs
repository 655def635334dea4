use div_spec::{Entrypoint, EntrypointKind};
use insta::assert_snapshot;

use crate::refused;

/// `typed` is told to the container as `command`.
fn check(typed: &str, command: &str) {
    let entry = Entrypoint::parse(typed).unwrap_or_else(|e| panic!("`{typed}`: {e}"));
    assert_eq!(entry.command(), command, "`{typed}`");
    assert_eq!(entry.typed(), typed);
    assert_eq!(
        entry
            .to_string()
            .parse::<Entrypoint>()
            .expect("display parses"),
        entry
    );
}

fn words(words: &[&str], command: &str) {
    let owned: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    let entry = Entrypoint::from_words(&owned).expect("words make a command");
    assert_eq!(entry.command(), command, "{words:?}");
    if words.len() > 1 {
        assert_eq!(entry.typed(), command, "{words:?}");
    }
}

#[test]
fn read_three_ways() {
    check(
        "train.py::run",
        "python -u -c 'from train import run; run()'",
    );
    check(
        "models/lora.py::train",
        "python -u -c 'from models.lora import train; train()'",
    );
    check(
        "finetune.py::lora",
        "python -u -c 'from finetune import lora; lora()'",
    );
    check(
        "./train.py::run",
        "python -u -c 'from train import run; run()'",
    );
    check("train.py", "python -u train.py");
    check("eval.py", "python -u eval.py");
    check("./train.py", "python -u train.py");
    check("my-scripts/train-v2.py", "python -u my-scripts/train-v2.py");
    check("/opt/app/serve.py", "python -u /opt/app/serve.py");
    check(
        "torchrun --nproc-per-node 8 train.py",
        "torchrun --nproc-per-node 8 train.py",
    );
    check(
        "pip install -r requirements.txt && python train.py",
        "pip install -r requirements.txt && python train.py",
    );
    check(
        "mkdir -p /mnt/mask-models/base && python download.py",
        "mkdir -p /mnt/mask-models/base && python download.py",
    );
    check("nvidia-smi", "nvidia-smi");
    check("python", "python");
}

#[test]
fn kinds_and_the_file_to_ship() {
    let entry = Entrypoint::parse("./models/lora.py::train").unwrap();
    assert_eq!(
        entry.kind(),
        &EntrypointKind::PythonFunction {
            file: "models/lora.py".into(),
            module: "models.lora".into(),
            function: "train".into(),
        }
    );
    assert_eq!(entry.python_file(), Some("models/lora.py"));
    assert_eq!(
        Entrypoint::parse("./train.py").unwrap().python_file(),
        Some("train.py")
    );
    assert_eq!(
        Entrypoint::parse("/opt/serve.py").unwrap().python_file(),
        None
    );
    assert_eq!(Entrypoint::parse("nvidia-smi").unwrap().python_file(), None);
    assert_eq!(
        Entrypoint::parse("python train.py").unwrap().python_file(),
        None
    );
}

#[test]
fn several_words_keep_their_meaning_under_sh() {
    words(
        &["torchrun", "--nproc-per-node", "8", "train.py"],
        "torchrun --nproc-per-node 8 train.py",
    );
    words(&["python", "-c", "print(1)"], "python -c 'print(1)'");
    words(&["echo", "it's"], r"echo 'it'\''s'");
    words(&["echo", ""], "echo ''");
    words(&["echo", "$HOME", "a b"], "echo '$HOME' 'a b'");
    words(&["ls", "*.py"], "ls '*.py'");
    words(&["env", "A=1", "=x"], "env A=1 '=x'");
    // One word goes through `parse`.
    words(
        &["train.py::run"],
        "python -u -c 'from train import run; run()'",
    );
    words(
        &["pip install -r requirements.txt && python train.py"],
        "pip install -r requirements.txt && python train.py",
    );
}

#[test]
fn refusals() {
    assert_snapshot!(refused::<Entrypoint>(""), @"the command is empty; give a file like `train.py`, a function like `train.py::run`, or a command");
    assert_snapshot!(refused::<Entrypoint>("   "), @"the command is empty; give a file like `train.py`, a function like `train.py::run`, or a command");
    assert_snapshot!(refused::<Entrypoint>("train.py::"), @"`train.py::` names no function after `::`; write `train.py::function`");
    assert_snapshot!(refused::<Entrypoint>("train.py::2run"), @"`2run` in `train.py::2run` is not a Python function name: letters, digits and `_`, not starting with a digit, and not a keyword");
    assert_snapshot!(refused::<Entrypoint>("train.py::class"), @"`class` in `train.py::class` is not a Python function name: letters, digits and `_`, not starting with a digit, and not a keyword");
    assert_snapshot!(refused::<Entrypoint>("train.py::run()"), @"`run()` in `train.py::run()` is not a Python function name: letters, digits and `_`, not starting with a digit, and not a keyword");
    assert_snapshot!(refused::<Entrypoint>("train.py::a::b"), @"`a::b` in `train.py::a::b` is not a Python function name: letters, digits and `_`, not starting with a digit, and not a keyword");
    assert_snapshot!(refused::<Entrypoint>("train::run"), @"`train::run` names a function in `train`, which is not a `.py` file; write `file.py::function`");
    assert_snapshot!(refused::<Entrypoint>("nvidia-smi::run"), @"`nvidia-smi::run` names a function in `nvidia-smi`, which is not a `.py` file; write `file.py::function`");
    assert_snapshot!(refused::<Entrypoint>("::run"), @"`::run` names no file before `::`; write `file.py::run`");
    assert_snapshot!(refused::<Entrypoint>("my-models/lora.py::train"), @"`my-models/lora.py` in `my-models/lora.py::train` cannot be imported as a module: `my-models` has a dash; rename it, or run the file with `python my-models/lora.py` as a command");
    assert_snapshot!(refused::<Entrypoint>("2models/lora.py::train"), @"`2models/lora.py` in `2models/lora.py::train` cannot be imported as a module: `2models` starts with a digit; rename it, or run the file with `python 2models/lora.py` as a command");
    assert_snapshot!(refused::<Entrypoint>("models/class.py::train"), @"`models/class.py` in `models/class.py::train` cannot be imported as a module: `class` is a Python keyword; rename it, or run the file with `python models/class.py` as a command");
    assert_snapshot!(refused::<Entrypoint>("models/lora.v2.py::train"), @"`models/lora.v2.py` in `models/lora.v2.py::train` cannot be imported as a module: `lora.v2` has a dot; rename it, or run the file with `python models/lora.v2.py` as a command");
    assert_snapshot!(refused::<Entrypoint>("models//lora.py::train"), @"`models//lora.py` in `models//lora.py::train` cannot be imported as a module: the path has an empty folder name; rename it, or run the file with `python models//lora.py` as a command");
    assert_snapshot!(refused::<Entrypoint>("../train.py::run"), @"`../train.py` in `../train.py::run` is outside the code div ships; give a path inside this directory");
    assert_snapshot!(refused::<Entrypoint>("/abs/train.py::run"), @"`/abs/train.py` in `/abs/train.py::run` cannot be imported as a module: an absolute path is not a module path; rename it, or run the file with `python /abs/train.py` as a command");
    assert_snapshot!(refused::<Entrypoint>("../train.py"), @"`../train.py` in `../train.py` is outside the code div ships; give a path inside this directory");
    let empty = Entrypoint::from_words(&[]).unwrap_err().to_string();
    assert_snapshot!(empty, @"the command is empty; give a file like `train.py`, a function like `train.py::run`, or a command");
}

fn parts(head: &[&str], args: &[&str]) -> Result<Entrypoint, String> {
    let own = |w: &[&str]| w.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    Entrypoint::from_parts(&own(head), &own(args)).map_err(|e| e.to_string())
}

/// `div run train.py -- --epochs 3`: the words after `--` are the script's arguments, each
/// quoted for `sh` where it needs it, and what was typed keeps them.
#[test]
fn arguments_after_dashes_reach_the_script() {
    let e = parts(&["train.py"], &["--epochs", "3"]).unwrap();
    assert_eq!(e.command(), "python -u train.py --epochs 3");
    assert_eq!(e.typed(), "train.py -- --epochs 3");
    assert_eq!(e.python_file(), Some("train.py"));

    let e = parts(&["train.py::main"], &["--epochs", "3"]).unwrap();
    assert_eq!(
        e.command(),
        "python -u -c 'from train import main; main()' --epochs 3"
    );
    assert_eq!(e.typed(), "train.py::main -- --epochs 3");
    assert_eq!(e.python_file(), Some("train.py"));

    let e = parts(&["train.py"], &["a b", "it's", "$HOME", "x;y", "\"q\""]).unwrap();
    assert_eq!(
        e.command(),
        r#"python -u train.py 'a b' 'it'\''s' '$HOME' 'x;y' '"q"'"#
    );

    // Nothing before `--`: the user's own command, unchanged.
    let e = parts(&[], &["torchrun", "--nproc-per-node", "8", "train.py"]).unwrap();
    assert_eq!(e.command(), "torchrun --nproc-per-node 8 train.py");
    assert_eq!(e.typed(), "torchrun --nproc-per-node 8 train.py");
    assert_eq!(e.kind(), &EntrypointKind::Command);

    // A command before `--` gets the arguments too.
    let e = parts(&["python", "train.py"], &["--lr", "1e-4"]).unwrap();
    assert_eq!(e.command(), "python train.py --lr 1e-4");
    assert_eq!(e.typed(), "python train.py -- --lr 1e-4");

    // Nothing after `--`: as before.
    let e = parts(&["train.py"], &[]).unwrap();
    assert_eq!(e.command(), "python -u train.py");
    assert_eq!(e.typed(), "train.py");
}

#[test]
fn arguments_before_dashes_are_refused_with_the_form_that_works() {
    assert_snapshot!(parts(&["train.py", "3"], &[]).unwrap_err(), @"`train.py 3` runs `train.py` with arguments; arguments for a script go after `--`: `div run train.py -- 3`");
    assert_snapshot!(parts(&["train.py::main", "a b"], &["--x"]).unwrap_err(), @"`train.py::main 'a b'` runs `train.py::main` with arguments; arguments for a script go after `--`: `div run train.py::main -- 'a b' --x`");
    assert_snapshot!(parts(&["train.py:main"], &["--x"]).unwrap_err(), @"`train.py:main` has one colon; a function in a file is named with two: `train.py::main`");
}

#[test]
fn one_colon_is_refused_with_the_two_it_means() {
    assert_snapshot!(refused::<Entrypoint>("train.py:main"), @"`train.py:main` has one colon; a function in a file is named with two: `train.py::main`");
    assert_snapshot!(refused::<Entrypoint>("models/lora.py:train"), @"`models/lora.py:train` has one colon; a function in a file is named with two: `models/lora.py::train`");
    // Not a Python file and a function: left alone.
    check("host:8080", "host:8080");
    check("a.py:", "a.py:");
}
