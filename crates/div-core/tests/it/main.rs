//! div-core in-process, against div-test-support's `FakeControlPlane`: each user action as
//! an embedder calls it, with no `div` binary and no HTTP in between. (The `div` binary's
//! own tests cover the same actions through the CLI; the fake is checked against the real
//! server by the conformance suite.)

mod follow;
mod rest;
mod result;
mod run;
mod storage;

use std::path::Path;

use div_core::Event;

/// A project folder named `very-cool-classifier` with a `train.py`, in a temp dir.
pub(crate) fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let dir = tmp.path().join("very-cool-classifier");
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("train.py"), "def run():\n    print('hi')\n").expect("write");
    std::fs::write(dir.join("data/labels.csv"), "a,b\n1,2\n").expect("write");
    tmp
}

pub(crate) fn dir(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    tmp.path().join("very-cool-classifier")
}

/// Every event, kept.
#[derive(Debug, Default)]
pub(crate) struct Events(pub(crate) Vec<Event>);

impl Events {
    pub(crate) fn sink(&mut self) -> impl FnMut(Event) + Send + '_ {
        |e| self.0.push(e)
    }

    /// The log's bytes, in order.
    pub(crate) fn log(&self) -> Vec<u8> {
        self.0
            .iter()
            .filter_map(|e| match e {
                Event::Log(b) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("reads")
}
