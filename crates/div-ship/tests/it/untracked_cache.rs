//! The untracked cache: an unchanged repository's folders are not read again, and every
//! change that could change what is untracked (a file made, removed or renamed, an ignore
//! rule edited anywhere git reads one, the index, a folder turned repository) is seen: the
//! set shipped after it is git's own, every time.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use div_ship::{ShipOptions, Shipment};

use crate::support::{git, git_init, git_set, write};

fn ship(dir: &Path, cache: Option<&Path>) -> Shipment {
    div_ship::collect(
        dir,
        &ShipOptions {
            cache: cache.map(Path::to_owned),
            ..Default::default()
        },
    )
    .unwrap()
}

fn paths(shipment: &Shipment) -> Vec<String> {
    shipment
        .manifest
        .entries
        .iter()
        .map(|e| e.path.clone())
        .collect()
}

/// A repository with tracked, untracked and ignored files in nested folders, its own
/// `core.excludesFile`, and where its caches go.
fn repo(root: &Path) -> (PathBuf, PathBuf) {
    let dir = root.join("code");
    git_init(&dir);
    write(&dir, ".gitignore", "*.log\nbuild/\n");
    write(&dir, "src/.gitignore", "*.tmp\n");
    write(&dir, "src/main.py", "print(1)\n");
    write(&dir, "src/deep/er/mod.py", "x = 1\n");
    write(&dir, "src/deep/er/scratch.py", "untracked\n");
    write(&dir, "src/deep/er/notes.tmp", "ignored\n");
    write(&dir, "src/untracked.py", "u\n");
    write(&dir, "run.log", "ignored\n");
    write(&dir, "build/out.bin", "ignored\n");
    write(&dir, "data/a.csv", "1,2\n");
    write(&dir, "data/b.csv", "3,4\n");
    write(&dir, "excludes", "*.csv\n");
    git(
        &dir,
        &["add", ".gitignore", "src/main.py", "src/deep/er/mod.py"],
    );
    let excludes = dir.join("excludes");
    git(
        &dir,
        &["config", "core.excludesFile", excludes.to_str().unwrap()],
    );
    (dir, root.join("cache/ship.cache"))
}

/// Waits until everything under `dir` last changed (its mtime or ctime) longer ago than the
/// untracked cache's racy window (2 s): a walk is kept only then. Polls the clock for that
/// state.
fn settled(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let changed = |m: &fs::Metadata| {
        let ns = |s: i64, ns: i64| i128::from(s) * 1_000_000_000 + i128::from(ns);
        ns(m.mtime(), m.mtime_nsec()).max(ns(m.ctime(), m.ctime_nsec()))
    };
    let mut newest = changed(&fs::metadata(dir).unwrap());
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            newest = newest.max(changed(&meta));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    let now = || {
        let since = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        i128::try_from(since.as_nanos()).unwrap()
    };
    while now() < newest + 2_100_000_000 {
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_unchanged_repository_is_answered_from_the_cache_and_is_the_same_set() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, cache) = repo(tmp.path());
    settled(&dir);
    let walked = ship(&dir, Some(&cache));
    assert!(!walked.stats.untracked_from_cache, "nothing kept yet");
    let again = ship(&dir, Some(&cache));
    assert!(again.stats.untracked_from_cache, "the walk was kept");
    assert_eq!(paths(&again), paths(&walked));
    let expected: Vec<String> = git_set(&dir).into_iter().collect();
    assert_eq!(paths(&again), expected);
    assert!(paths(&again).contains(&"src/deep/er/scratch.py".to_owned()));
    // A file's new content is not the untracked cache's business: the hash cache sees it.
    fs::write(dir.join("src/untracked.py"), "v\n").unwrap();
    let edited = ship(&dir, Some(&cache));
    assert!(edited.stats.untracked_from_cache);
    assert_eq!(edited.stats.hashed_files, 1);
}

#[test]
fn a_walk_of_a_tree_changed_within_the_racy_window_is_not_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, cache) = repo(tmp.path());
    // Just made: every folder changed a moment ago.
    ship(&dir, Some(&cache));
    let again = ship(&dir, Some(&cache));
    if SystemTime::now()
        < fs::metadata(dir.join("src/deep/er"))
            .unwrap()
            .modified()
            .unwrap()
            + Duration::from_millis(1900)
    {
        assert!(!again.stats.untracked_from_cache);
    }
}

/// Each change, made to a repository whose walk was kept; after it the set shipped is git's
/// own (and the same as with no cache at all), and it came from a walk.
#[test]
fn every_change_that_could_change_the_untracked_set_is_seen() {
    type Change = fn(&Path);
    let changes: &[(&str, Change)] = &[
        ("a new file deep down", |d| {
            write(d, "src/deep/er/new.py", "n\n")
        }),
        ("a new file at the top", |d| write(d, "top.py", "t\n")),
        ("an untracked file removed", |d| {
            fs::remove_file(d.join("src/deep/er/scratch.py")).unwrap()
        }),
        ("an untracked file renamed", |d| {
            fs::rename(d.join("src/untracked.py"), d.join("src/renamed.py")).unwrap()
        }),
        ("a nested .gitignore edited in place", |d| {
            // The same size: only its stat shows the change.
            fs::write(d.join("src/.gitignore"), "*.py\n").unwrap()
        }),
        ("a .gitignore made in a folder", |d| {
            write(d, "src/deep/.gitignore", "scratch.py\n")
        }),
        ("the top .gitignore edited", |d| {
            fs::write(d.join(".gitignore"), "build/\n").unwrap()
        }),
        ("info/exclude edited", |d| {
            write(d, ".git/info/exclude", "untracked.py\n")
        }),
        ("the excludes file edited", |d| {
            fs::write(d.join("excludes"), "a.csv\n").unwrap()
        }),
        ("core.excludesFile unset", |d| {
            git(d, &["config", "--unset", "core.excludesFile"]);
        }),
        ("an ignored file added to the index", |d| {
            git(d, &["add", "-f", "run.log"]);
        }),
        ("a folder made a repository", |d| {
            git(&d.join("data"), &["init", "-q"]);
        }),
        ("an untracked file replaced by a folder", |d| {
            fs::remove_file(d.join("src/untracked.py")).unwrap();
            write(d, "src/untracked.py/inner.py", "i\n");
        }),
        ("a folder replaced by a link to another", |d| {
            fs::remove_dir_all(d.join("data")).unwrap();
            std::os::unix::fs::symlink("src", d.join("data")).unwrap();
        }),
        ("a file made in an ignored folder (nothing changes)", |d| {
            write(d, "build/more.bin", "m\n")
        }),
        ("a folder emptied and removed", |d| {
            fs::remove_dir_all(d.join("src/deep")).unwrap()
        }),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let trees: Vec<(PathBuf, PathBuf)> = (0..changes.len())
        .map(|i| repo(&tmp.path().join(i.to_string())))
        .collect();
    settled(tmp.path());
    for ((name, change), (dir, cache)) in changes.iter().zip(&trees) {
        ship(dir, Some(cache));
        let before = ship(dir, Some(cache));
        assert!(
            before.stats.untracked_from_cache,
            "{name}: the walk was kept"
        );
        change(dir);
        let after = ship(dir, Some(cache));
        let expected: Vec<String> = git_set(dir).into_iter().collect();
        assert_eq!(paths(&after), expected, "{name}: git's own set");
        assert_eq!(
            paths(&after),
            paths(&ship(dir, None)),
            "{name}: as uncached"
        );
        // Only a file made inside an ignored folder leaves every recorded stat as it was.
        let holds = name.contains("ignored folder");
        assert_eq!(
            after.stats.untracked_from_cache, holds,
            "{name}: walked again unless nothing the walk read changed"
        );
    }
}

/// Shipped from a folder inside the repository, a `.gitignore` above it counts too.
#[test]
fn a_gitignore_above_the_shipped_folder_is_watched() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, cache) = repo(tmp.path());
    settled(&dir);
    let sub = dir.join("src/deep");
    ship(&sub, Some(&cache));
    let kept = ship(&sub, Some(&cache));
    assert!(kept.stats.untracked_from_cache);
    assert!(paths(&kept).contains(&"er/scratch.py".to_owned()));
    fs::write(dir.join("src/.gitignore"), "scratch.py\n").unwrap();
    let after = ship(&sub, Some(&cache));
    assert!(!after.stats.untracked_from_cache);
    assert!(!paths(&after).contains(&"er/scratch.py".to_owned()));
    assert_eq!(paths(&after), paths(&ship(&sub, None)));
}

/// A repository inside the shipped one (a folder holding `.git`) keeps its parent's walk from
/// being kept: it may turn into a repository, or stop being one, with no folder's stat
/// showing it.
#[test]
fn a_tree_with_a_nested_repository_is_always_walked() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, cache) = repo(tmp.path());
    git_init(&dir.join("data"));
    settled(&dir);
    ship(&dir, Some(&cache));
    let again = ship(&dir, Some(&cache));
    assert!(!again.stats.untracked_from_cache);
    let expected: Vec<String> = git_set(&dir).into_iter().collect();
    assert_eq!(paths(&again), expected);
}

/// A cache file that is not one (cut short, or any bytes) is a walk, never an error.
#[test]
fn a_damaged_cache_file_means_a_walk() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, cache) = repo(tmp.path());
    settled(&dir);
    ship(&dir, Some(&cache));
    let mut untracked = cache.as_os_str().to_owned();
    untracked.push(".untracked");
    let untracked = PathBuf::from(untracked);
    let bytes = fs::read(&untracked).expect("the walk was kept beside the hash cache");
    fs::write(&untracked, &bytes[..bytes.len() / 2]).unwrap();
    let cut = ship(&dir, Some(&cache));
    assert!(!cut.stats.untracked_from_cache);
    let expected: Vec<String> = git_set(&dir).into_iter().collect();
    assert_eq!(paths(&cut), expected);
    // Kept again by that walk.
    assert!(ship(&dir, Some(&cache)).stats.untracked_from_cache);
}
