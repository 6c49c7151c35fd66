//! Running fio and reading its JSON output: the reference every Pontoon
//! benchmark is measured against.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::cpu;

/// One fio job's results, in the units our tables use.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// Operations per second.
    pub iops: f64,
    /// Mean latency (µs).
    pub mean_us: f64,
    /// Median completion latency (µs).
    pub p50_us: f64,
    /// 99th percentile (µs).
    pub p99_us: f64,
    /// 99.9th percentile (µs).
    pub p999_us: f64,
    /// CPU microseconds per operation of the measured side.
    pub cpu_us_per_io: f64,
    /// Operations completed.
    pub ios: u64,
}

/// Makes sure `tool` is on PATH, installing Debian package `package` when
/// running as root; otherwise explains how to install it.
pub fn ensure_tool(tool: &str, package: &str) -> Result<()> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("{tool} is not installed: run `sudo apt-get install {package}` and try again");
    }
    eprintln!("installing {package} (for {tool})...");
    let ok = Command::new("apt-get")
        .args(["install", "-y", "-qq", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        bail!("could not install {package}; install it with apt-get and try again");
    }
    Ok(())
}

/// Runs fio with `args` (without output options), and returns the first
/// job's read or write results plus fio's own CPU time per operation.
pub fn run(args: &[String], write: bool) -> Result<Measured> {
    let mut child = Command::new("fio")
        .args(args)
        .args(["--output-format=json", "--percentile_list=50:99:99.9"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting fio")?;
    let mut out = String::new();
    child
        .stdout
        .take()
        .context("fio stdout")?
        .read_to_string(&mut out)
        .context("reading fio output")?;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let (code, cpu) = cpu::wait_child(child.id())?;
    if code != 0 {
        bail!("fio failed ({code}): {}", err.trim());
    }
    parse(&out, write, cpu).with_context(|| format!("parsing fio output: {}", err.trim()))
}

/// Extracts the results from fio's JSON output.
pub fn parse(json: &str, write: bool, cpu: Duration) -> Result<Measured> {
    // fio may print warnings before the JSON object.
    let start = json.find('{').context("no JSON in fio output")?;
    let v: serde_json::Value = serde_json::from_str(&json[start..])?;
    let side = &v["jobs"][0][if write { "write" } else { "read" }];
    let ios = side["total_ios"].as_u64().context("total_ios")?;
    let pct = |k: &str| side["clat_ns"]["percentile"][k].as_f64().unwrap_or(0.0) / 1000.0;
    Ok(Measured {
        iops: side["iops"].as_f64().context("iops")?,
        mean_us: side["lat_ns"]["mean"].as_f64().context("lat mean")? / 1000.0,
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        p999_us: pct("99.900000"),
        cpu_us_per_io: if ios == 0 {
            0.0
        } else {
            cpu.as_secs_f64() * 1e6 / ios as f64
        },
        ios,
    })
}
