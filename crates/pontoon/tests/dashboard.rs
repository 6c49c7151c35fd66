//! The manager's web dashboard in a real browser: a `pontoon up` cluster
//! (3 OSDs, the capacity history sampled every second) written at a
//! steady rate (`pontoon bench --fill` over a span 4 MiB longer each
//! time) until the forecast sees it filling, and the dashboard loaded in
//! Debian's headless Chromium (one process per page, with the token in the
//! URL fragment as `pontoon up` prints it). From the DOM Chromium dumps
//! after the page has polled the API a few times: the history chart is
//! drawn (uPlot's canvas inside `#history-chart`) and the forecast gives
//! days until full; once the writes stop, the capacity numbers (their
//! `data-bytes`) are `pontoon df --json`'s and the health shown is
//! `pontoon health --json`'s; every OSD is listed with its endurance; a
//! wrong token gets the login box. Screenshots of the overview, capacity and
//! endurance pages are kept in `target/test-artifacts/dashboard/`.
//!
//! Needs etcd-server and chromium (scripts/deps.sh).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{PONTOON, Up, json, ok};
use serde_json::Value;

/// Longest one Chromium run may take before it is killed.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(40);
/// Virtual time the page gets (it polls every 2 s).
const VIRTUAL_TIME_MS: u32 = 8000;

/// Where the screenshots are kept: `target/test-artifacts/dashboard/`
/// (the binary is `target/<profile>/pontoon`).
fn artifacts() -> PathBuf {
    let target = Path::new(PONTOON)
        .parent()
        .and_then(Path::parent)
        .expect("the binary is in target/<profile>/");
    let dir = target.join("test-artifacts").join("dashboard");
    std::fs::create_dir_all(&dir).expect("create the artifacts directory");
    dir
}

/// Runs headless Chromium on `url` with `mode` (`--dump-dom` or
/// `--screenshot=FILE`), a fresh profile in `scratch`, and returns its
/// output; killed (by pid) if it takes longer than [`BROWSER_TIMEOUT`].
fn chromium(scratch: &Path, mode: &str, url: &str, height: u32) -> Output {
    let profile = tempfile::Builder::new()
        .prefix("chromium-")
        .tempdir_in(scratch)
        .expect("profile dir");
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--window-size=1280,{height}"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={VIRTUAL_TIME_MS}"))
        .arg(mode)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run chromium (Debian package chromium; scripts/deps.sh installs it)");
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    while child.try_wait().expect("wait for chromium").is_none() {
        if Instant::now() >= deadline {
            common::signal(child.id(), libc::SIGKILL);
            let out = child.wait_with_output().expect("collect chromium");
            panic!(
                "chromium {mode} {url} took longer than {BROWSER_TIMEOUT:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("collect chromium")
}

/// The DOM of `url` after the page has run for [`VIRTUAL_TIME_MS`].
fn dump_dom(scratch: &Path, url: &str) -> String {
    let out = chromium(scratch, "--dump-dom", url, 900);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium --dump-dom {url} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// A screenshot of `url` in `file`, 1280 pixels wide and `height` high.
fn screenshot(scratch: &Path, url: &str, file: &Path, height: u32) {
    let _ = std::fs::remove_file(file);
    let mode = format!("--screenshot={}", file.display());
    let out = chromium(scratch, &mode, url, height);
    let len = std::fs::metadata(file).map_or(0, |m| m.len());
    assert!(
        out.status.success() && len > 10_000,
        "chromium --screenshot {url} wrote {len} bytes ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The element with id `id` in `dom`: its start tag and the markup after
/// it up to the next element with an id (enough for the leaves checked
/// here, and for "is there a canvas inside").
struct Element<'a> {
    tag: &'a str,
    rest: &'a str,
}

fn element<'a>(dom: &'a str, id: &str) -> Element<'a> {
    let at = dom
        .find(&format!(" id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let start = dom[..at].rfind('<').expect("a start tag");
    let end = at + dom[at..].find('>').expect("the tag ends");
    let after = &dom[end + 1..];
    let next = after.find(" id=\"").unwrap_or(after.len());
    Element {
        tag: &dom[start..=end],
        rest: &after[..next],
    }
}

impl<'a> Element<'a> {
    /// Attribute `name`'s value.
    fn attr(&self, name: &str) -> Option<&'a str> {
        let key = format!(" {name}=\"");
        let at = self.tag.find(&key)? + key.len();
        Some(&self.tag[at..at + self.tag[at..].find('"')?])
    }

    /// Its text, when it is a leaf.
    fn text(&self) -> &'a str {
        &self.rest[..self.rest.find('<').unwrap_or(self.rest.len())]
    }

    fn bytes(&self) -> u64 {
        self.attr("data-bytes")
            .and_then(|b| b.parse().ok())
            .unwrap_or_else(|| panic!("no data-bytes in {}", self.tag))
    }
}

/// `key = "value"` of cluster.toml.
fn toml_value(dir: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(dir.join("cluster.toml")).expect("cluster.toml");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no {key} in cluster.toml: {text}"))
        .to_string()
}

/// `pontoon df --json` once its raw numbers hold still for a second (the
/// OSDs' reports after the load have landed).
fn settled_df(dir: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = json(dir, &["df", "--json"]);
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let df = json(dir, &["df", "--json"]);
        if df["raw"] == last["raw"] || Instant::now() >= deadline {
            return df;
        }
        last = df;
    }
}

/// Rows of a table's body: the `data-key` of each.
fn row_keys(dom: &str, table: &str) -> Vec<String> {
    let at = dom
        .find(&format!(" id=\"{table}\""))
        .unwrap_or_else(|| panic!("no #{table}"));
    let body = &dom[at..];
    let body = &body[..body.find("</table>").expect("table ends")];
    body.split("<tr data-key=\"")
        .skip(1)
        .map(|r| r[..r.find('"').unwrap()].to_string())
        .collect()
}

/// `GET path` of the REST API at `http` (`http://ADDR`) with the token:
/// the status and the body parsed, `None` on any failure.
fn api_get(http: &str, token: &str, path: &str) -> Option<(u16, Value)> {
    let addr = http.strip_prefix("http://")?;
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, serde_json::from_str(body).ok()?))
}

/// Writes volume `v` in growing spans (4 MiB more each time, `--fill`
/// from its start) until `stop` or 96 MiB: a steady growth for the
/// history to see. Returns the last span written, in MiB.
fn grow(dir: &Path, stop: &AtomicBool) -> u64 {
    let mut span = 0;
    while span < 96 && !stop.load(Ordering::Relaxed) {
        span += 4;
        ok(
            dir,
            &[
                "bench",
                "--volume",
                "v",
                "--fill",
                "--span",
                &format!("{span}M"),
                "--bs",
                "1M",
                "--qd",
                "4",
            ],
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    span
}

#[test]
fn the_dashboard_shows_the_cluster_in_a_browser() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-dashboard-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let _up = Up::start_sized(&dir, 3, "256M", &["--history-interval", "1s"]);
    eprintln!("cluster up after {:?}", started.elapsed());

    // `pontoon up` prints the dashboard's address with the token.
    let (http, token) = (toml_value(&dir, "http"), toml_value(&dir, "api_token"));
    let printed = std::fs::read_to_string(dir.join("up.out")).unwrap_or_default();
    let base = format!("{http}/#token={token}");
    assert!(printed.contains(&format!("dashboard {base}")), "{printed}");
    let shots = artifacts();
    let page = |name: &str| format!("{base}&page={name}");

    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    ok(
        &dir,
        &["volume", "create", "v", "--size", "128M", "--pool", "p"],
    );
    ok(&dir, &["osd", "set-rated-dwpd", "0", "3"]);

    // Data written at a steady rate while the manager samples every
    // second, until the forecast sees the cluster filling.
    let stop = AtomicBool::new(false);
    let (span, forecast) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| grow(&dir, &stop));
        let deadline = Instant::now() + Duration::from_secs(30);
        let forecast = loop {
            let h = api_get(&http, &token, "/api/v1/df/history?series=cluster");
            if let Some((200, h)) = &h
                && h["forecast"]["cluster"]["until_full"]["filling"] == true
            {
                break h["forecast"]["cluster"].clone();
            }
            assert!(
                Instant::now() < deadline && !writer.is_finished(),
                "the forecast did not see the cluster filling: {h:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        eprintln!(
            "filling after {:?}: {}",
            started.elapsed(),
            forecast["until_full"]
        );

        // The capacity page while it fills: chart and forecast.
        let dom = dump_dom(&dir, &page("capacity"));
        let chart = element(&dom, "history-chart");
        assert!(chart.rest.contains("<canvas"), "no chart: {}", chart.rest);
        let points: u64 = chart.attr("data-points").unwrap().parse().unwrap();
        assert!(points >= 5, "{}", chart.tag);
        let full = element(&dom, "forecast-days-full");
        assert_eq!(full.attr("data-state"), Some("filling"), "{}", full.tag);
        let days: f64 = full.attr("data-days").unwrap().parse().unwrap();
        assert!(days > 0.0 && !full.text().is_empty(), "{}", full.tag);
        let nearfull = element(&dom, "forecast-days-nearfull");
        assert!(nearfull.attr("data-days").unwrap().parse::<f64>().unwrap() < days);
        eprintln!(
            "capacity page: {points} points, full in {:?} ({days} days)",
            full.text()
        );
        screenshot(&dir, &page("capacity"), &shots.join("capacity.png"), 1500);
        stop.store(true, Ordering::Relaxed);
        (writer.join().expect("writer"), forecast)
    });
    assert!(forecast["trend"]["rate_per_day"].as_f64().unwrap() > 0.0);
    eprintln!("{span} MiB written after {:?}", started.elapsed());

    // The capacity numbers once the reports hold still: `df --json`'s.
    let mut df = settled_df(&dir);
    let mut health = json(&dir, &["health", "--json"]);
    let mut dom = dump_dom(&dir, &page("capacity"));
    // A report may land between `df` and the page's fetch: then once more.
    if element(&dom, "capacity-used")
        .attr("data-bytes")
        .map(str::to_string)
        != Some(df["raw"]["raw_used_bytes"].to_string())
    {
        df = settled_df(&dir);
        health = json(&dir, &["health", "--json"]);
        dom = dump_dom(&dir, &page("capacity"));
    }
    let raw = &df["raw"];
    let total = element(&dom, "capacity-total").bytes();
    let used = element(&dom, "capacity-used").bytes();
    let free = element(&dom, "capacity-free").bytes();
    assert_eq!(total, raw["size_bytes"].as_u64().unwrap(), "{raw}");
    assert_eq!(used, raw["raw_used_bytes"].as_u64().unwrap(), "{raw}");
    assert_eq!(free, raw["avail_bytes"].as_u64().unwrap(), "{raw}");
    // Thin provisioning: 128 MiB provisioned, `span` written.
    let pool = &df["pools"][0];
    let stored = pool["stored_bytes"].as_u64().unwrap();
    assert_eq!(stored, span << 20, "{pool}");
    assert_eq!(
        element(&dom, "capacity-savings").bytes(),
        pool["provisioned_bytes"].as_u64().unwrap() - stored
    );
    // The breakdown by consumer adds up to the total.
    let mut parts = 0;
    for consumer in [
        "volume-data",
        "snapshots",
        "replica-overhead",
        "other-data",
        "journal-metadata",
        "free",
    ] {
        let key = format!("<tr data-consumer=\"{consumer}\" data-bytes=\"");
        let at = dom
            .find(&key)
            .unwrap_or_else(|| panic!("no {consumer} row"))
            + key.len();
        let n: u64 = dom[at..at + dom[at..].find('"').unwrap()].parse().unwrap();
        match consumer {
            "volume-data" => assert_eq!(n, stored),
            "replica-overhead" => assert_eq!(n, 2 * stored),
            "snapshots" => assert_eq!(n, 0),
            _ => {}
        }
        parts += n;
    }
    assert_eq!(parts, total);
    // A forecast is shown (growth has stopped: it may say so).
    let state = element(&dom, "forecast-days-full").attr("data-state");
    assert!(
        matches!(state, Some("filling" | "not-filling")),
        "{state:?}"
    );

    // Health, with every failing check (on every page: the overview's
    // card and the header's badge are in the DOM).
    let status = health["status"].as_str().unwrap();
    let shown = element(&dom, "health-status");
    assert_eq!(shown.text(), status, "{health}");
    assert_eq!(shown.attr("data-status"), Some(status));
    for c in health["checks"].as_array().unwrap() {
        let code = c["code"].as_str().unwrap();
        assert!(
            dom.contains(&format!("data-code=\"{code}\"")),
            "{code} not shown"
        );
    }
    eprintln!(
        "capacity numbers and health ({status}) checked after {:?}",
        started.elapsed()
    );

    // The overview: health, counts, every OSD listed up and in.
    let dom = dump_dom(&dir, &page("overview"));
    assert_eq!(element(&dom, "health-status").text(), status);
    assert_eq!(element(&dom, "osd-count").text(), "3");
    assert_eq!(element(&dom, "osd-up").text(), "3");
    assert_eq!(element(&dom, "pg-count").text(), "16");
    assert!(element(&dom, "io-chart").rest.contains("<canvas"));
    assert_eq!(row_keys(&dom, "osd-table"), ["0", "1", "2"]);
    assert_eq!(dom.matches("up / in").count(), 3);
    assert_eq!(row_keys(&dom, "volume-table").len(), 1);
    screenshot(&dir, &page("overview"), &shots.join("overview.png"), 900);

    // Endurance: every OSD and its journal; osd.0's rating gives a
    // wear-out date.
    let dom = dump_dom(&dir, &page("endurance"));
    assert_eq!(row_keys(&dom, "endurance-table"), ["0", "1", "2"]);
    assert_eq!(row_keys(&dom, "journal-table"), ["0", "1", "2"]);
    let table = &dom[dom.find(" id=\"endurance-table\"").unwrap()..];
    let row = &table[table.find("<tr data-key=\"0\"").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains(">3</td>") && row.contains(" (in "), "{row}");
    screenshot(&dir, &page("endurance"), &shots.join("endurance.png"), 900);

    // A wrong token: the login box, no data.
    let dom = dump_dom(&dir, &format!("{http}/#token=nope&page=capacity"));
    let login = element(&dom, "login");
    assert!(!login.tag.contains("hidden"), "{}", login.tag);
    assert!(element(&dom, "login-error").text().contains("refused"));
    assert_eq!(element(&dom, "capacity-total").attr("data-bytes"), Some(""));
    eprintln!(
        "done after {:?}; screenshots in {}",
        started.elapsed(),
        shots.display()
    );
}
