//! `cargo xtask bench cache [--mib N] [--mib-per-second N] [--div PATH]`: the shared download
//! cache (docs/local-control-plane.md). A package index on loopback in PyPI's shape (a PEP 503
//! `simple/` page, and a wheel of N MiB served with PyPI's `Cache-Control: max-age=365000000,
//! immutable`, at a rate like a network's), then the same `pip install -r requirements.txt`
//! in two `div run`s of a fresh local control plane: each run has a fresh `/tmp` and installs
//! into it, and only the cache at `/cache` is shared. Prints each install's time and what it
//! downloaded, from the index's own log.
//!
//! pip caches HTTP downloads only from HTTPS indexes and hosts it is told to trust, so the
//! command names `--trusted-host 127.0.0.1`, as it would for a private index over plain HTTP.

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

/// A wheel of `MIB` MiB of one package (pure Python, a module of padding), and its index.
const MAKE_INDEX: &str = r##"
import base64, hashlib, os, sys, zipfile
root, mib = sys.argv[1], int(sys.argv[2])
name, ver = "divbenchpkg", "1.0"
os.makedirs(f"{root}/simple/{name}", exist_ok=True)
whl = f"{name}-{ver}-py3-none-any.whl"
dist = f"{name}-{ver}.dist-info"
files = {
    f"{name}/__init__.py": b"VALUE = 1\n",
    f"{name}/padding.py": b"# " + os.urandom(mib << 19).hex().encode() + b"\n",
    f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n".encode(),
    f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: div-xtask\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(data)}")
record.append(f"{dist}/RECORD,,")
files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{root}/simple/{name}/{whl}", "w", zipfile.ZIP_STORED) as z:
    for path, data in files.items():
        z.writestr(path, data)
open(f"{root}/simple/{name}/index.html", "w").write(f'<a href="{whl}">{whl}</a>\n')
open(f"{root}/simple/index.html", "w").write(f'<a href="{name}/">{name}</a>\n')
"##;

/// The index: files under a root, wheels with PyPI's cache header, sent at a rate; each
/// request logged on stdout as `METHOD PATH STATUS BYTES`.
const SERVE: &str = r#"
import http.server, os, sys, time
root, rate = sys.argv[2], int(sys.argv[3])
class Index(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        path = os.path.join(root, self.path.split("?")[0].lstrip("/"))
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not os.path.isfile(path):
            self.send_response(404); self.end_headers()
            print(f"GET {self.path} 404 0", flush=True)
            return
        data = open(path, "rb").read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        if path.endswith(".whl"):
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Cache-Control", "max-age=365000000, immutable, public")
        else:
            self.send_header("Content-Type", "text/html")
        self.end_headers()
        step = max(rate // 20, 1)
        for i in range(0, len(data), step):
            self.wfile.write(data[i:i + step])
            time.sleep(step / rate)
        print(f"GET {self.path} 200 {len(data)}", flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Index).serve_forever()
"#;

pub(crate) fn run(rest: &[String]) -> Result<()> {
    let mut mib: u64 = 64;
    let mut rate_mib: u64 = 20;
    let mut div: Option<PathBuf> = None;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--mib" => mib = value()?.parse().context("--mib is a count of MiB")?,
            "--mib-per-second" => {
                rate_mib = value()?
                    .parse()
                    .context("--mib-per-second is a count of MiB")?
            }
            "--div" => div = Some(PathBuf::from(value()?)),
            other => bail!("unknown flag `{other}`; expected --mib, --mib-per-second or --div"),
        }
    }
    ensure!(
        mib > 0 && rate_mib > 0,
        "--mib and --mib-per-second are at least 1"
    );
    let div = crate::bench_local::div_binary(div.as_deref())?;
    eprintln!("div: {}", div.display());
    let tmp = tempfile::tempdir().context("creating a temporary folder")?;
    let index = tmp.path().join("index");
    crate::run(
        Command::new("python3")
            .args(["-c", MAKE_INDEX])
            .arg(&index)
            .arg(mib.to_string()),
    )?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = Server(
        Command::new("python3")
            .args(["-u", "-c", SERVE, &port.to_string()])
            .arg(&index)
            .arg((rate_mib << 20).to_string())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the index")?,
    );
    let log = server.0.stdout.take().context("the index's log")?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(log).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    wait_for(port)?;

    let local = crate::bench_local::Local::start(&div, "")?;
    fs::write(local.project.join("requirements.txt"), "divbenchpkg==1.0\n")?;
    let install = format!(
        "pip install -q --disable-pip-version-check --trusted-host 127.0.0.1 --index-url http://127.0.0.1:{port}/simple/ --target /tmp/site -r requirements.txt && python -c 'import sys; sys.path.insert(0, \"/tmp/site\"); import divbenchpkg; print(\"installed\", divbenchpkg.VALUE)'"
    );
    let mut rows = Vec::new();
    for which in [
        "first install (empty cache)",
        "second install (same requirements)",
    ] {
        let started = Instant::now();
        let out = String::from_utf8_lossy(&local.ok(&["run", "--gpu", "cpu", "--", &install])?)
            .into_owned();
        let took = started.elapsed();
        ensure!(
            out.contains("installed 1"),
            "the install did not work: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
        let served: Vec<String> = rx.try_iter().collect();
        let wheel_bytes: u64 = served
            .iter()
            .filter(|l| l.contains(".whl "))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        rows.push((which, took, wheel_bytes, served.len()));
    }
    drop(local);
    println!(
        "pip install -r requirements.txt in `div run`: one {mib} MiB wheel from an index on loopback at {rate_mib} MiB/s"
    );
    for (which, took, bytes, requests) in &rows {
        println!(
            "  {which:<38} {:>7.2} s   wheel bytes downloaded {:>11}   requests to the index {requests}",
            took.as_secs_f64(),
            bytes
        );
    }
    let (first, second) = (rows[0].1, rows[1].1);
    println!(
        "  second / first                         {:>7.2}×   (goal: the second downloads no wheel: {})",
        crate::timing::ratio(second, first),
        crate::timing::verdict(rows[1].2 == 0)
    );
    Ok(())
}

/// The index server, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(Instant::now() < deadline, "the index never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
