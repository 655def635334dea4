//! The user's loop (issue 14): arguments reach the script, mistakes are caught before anything
//! is billed, and coming back to a run later is as good as staying attached. End to end on the
//! local control plane, and against wiremock where only the requests matter.
//!
//! `arguments.rs`: what reaches the script; `mistakes.rs`: what is caught before anything is
//! billed, and the hints a run's end gives; `coming_back.rs`: a run followed later, charted;
//! `shipping.rs`: large files and the progress shown; here, what they share.

mod arguments;
mod coming_back;
mod mistakes;
mod shipping;

use crate::support::{Local, World, text};

const TRAIN: &str = r#"import json, os, sys

def main():
    print("argv", json.dumps(sys.argv[1:]))
    json.dump({"metrics": {"accuracy": 0.91}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))

def crash():
    print("about to exit 3")
    sys.exit(3)

if __name__ == "__main__":
    print("file argv", json.dumps(sys.argv[1:]))
"#;

/// The project `quickstart` on the local control plane.
fn quickstart() -> Local {
    Local::new("quickstart", &[("train.py", TRAIN)])
}

/// What a shell would make of them, spaces, quotes, `$` and `;` included.
const AWKWARD: &[&str] = &[
    "--epochs",
    "3",
    "a b",
    "it's",
    "say \"hi\"",
    "$HOME",
    "x;y",
    "`id`",
    "*.py",
    "",
];

fn awkward_json() -> String {
    serde_json::to_string(AWKWARD).expect("json")
}

async fn refused(world: &World, args: &[&str]) -> String {
    let done = world.div(args).await;
    assert_eq!(done.code, 200, "{args:?}: {}", done.stderr);
    done.stderr
}

impl Local {
    /// `line` run by `sh` on a 150-column pty (made by `script`), colour on; the transcript.
    fn on_terminal(&self, line: &str) -> String {
        let mut script = std::process::Command::new("script");
        script.env_clear();
        for (key, value) in self
            .command(&[])
            .get_envs()
            .filter(|(k, _)| *k != "NO_COLOR")
        {
            if let Some(value) = value {
                script.env(key, value);
            }
        }
        let out = script
            .env("TERM", "xterm")
            .args([
                "-qfec",
                &format!("stty cols 150 rows 50; {line}"),
                "/dev/null",
            ])
            .current_dir(self.project())
            .output()
            .expect("script runs div on a pty");
        text(&out.stdout)
    }
}
