//! Running a pool out of space, end to end, through a real NBD client: a
//! three-OSD `pontoon up` cluster with a size-3 pool, filled with fio over
//! NBD until it is full. Proves that fio then gets ENOSPC (not EIO, not a
//! hang), every time it needs new blocks; that reads, overwrites of written
//! blocks and discards still work while full; that `pontoon volume rm` of
//! another volume frees its space and writes resume with nothing restarted;
//! that no OSD crashes; and that `pontoon df` agrees with the bytes written
//! within 1% at every step.
//!
//! Needs etcd (Debian's etcd-server) and fio with its nbd engine
//! (scripts/deps.sh installs both).

mod common;

use common::*;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const MIB: u64 = 1 << 20;
/// Longest one fio run may take (each writes at most a few hundred MiB).
const FIO_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest `df` may take to show what was written (OSD reports refresh
/// every 0.5-10 s).
const DF_WAIT: Duration = Duration::from_secs(40);
/// Written to `other` before the fill.
const OTHER_BYTES: u64 = 24 * MIB;
/// Discarded from `filler` while the pool is full: two whole 4 MiB objects.
const TRIM_AT: u64 = 16 * MIB;
const TRIM_BYTES: u64 = 8 * MIB;
/// Written to new blocks of `filler` once `other` is gone.
const RESUME_BYTES: u64 = 8 * MIB;
/// The data pattern every write uses, so reads can verify it.
const PATTERN: &str = "0x5a";

/// One finished fio run.
struct Fio {
    what: String,
    success: bool,
    /// fio's errno for the job (0: none).
    error: i64,
    /// Bytes fio completed without error, per direction.
    write: u64,
    read: u64,
    trim: u64,
    stdout: String,
    stderr: String,
}

impl Fio {
    /// Everything fio printed, for assertion messages.
    fn output(&self) -> String {
        format!(
            "fio {}: success={} error={} write={} read={} trim={}\n--- stderr ---\n{}--- stdout ---\n{}",
            self.what,
            self.success,
            self.error,
            self.write,
            self.read,
            self.trim,
            self.stderr,
            self.stdout
        )
    }

    fn assert_ok(&self) {
        assert!(
            self.success && self.error == 0 && !self.stderr.contains("error"),
            "{} failed:\n{}",
            self.what,
            self.output()
        );
    }

    /// fio stopped on "No space left on device" (errno 28), and on nothing
    /// else: no EIO, no other error.
    fn is_enospc(&self) -> bool {
        !self.success
            && self.error == 28
            && self.stderr.contains("No space left on device")
            && !self.stderr.contains("Input/output error")
            && !self.stdout.contains("Input/output error")
    }

    fn assert_enospc(&self) {
        assert!(
            self.is_enospc(),
            "{}: expected ENOSPC (err=28, \"No space left on device\") and nothing else:\n{}",
            self.what,
            self.output()
        );
    }
}

/// Runs one fio job (nbd engine, 1 MiB direct I/O, queue depth 1, so what
/// it completed is exactly a prefix of its range) on `volume`, killed if it
/// takes longer than [`FIO_TIMEOUT`].
fn fio(aux: &Path, port: u16, volume: &str, what: &str, args: &[&str]) -> Fio {
    let name: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let out_path = aux.join(format!("{name}.out"));
    let err_path = aux.join(format!("{name}.err"));
    let started = Instant::now();
    let mut child = Command::new("fio")
        .arg(format!("--name={name}"))
        .arg("--ioengine=nbd")
        .arg(format!("--uri=nbd://127.0.0.1:{port}/{volume}"))
        .args([
            "--thread",
            "--direct=1",
            "--bs=1M",
            "--iodepth=1",
            "--continue_on_error=none",
            "--runtime=80",
            "--output-format=json",
            // No verify state files (the job runs in `aux` anyway).
            "--verify_state_save=0",
        ])
        .args(args)
        .current_dir(aux)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("create fio stdout"))
        .stderr(File::create(&err_path).expect("create fio stderr"))
        .process_group(0)
        .spawn()
        .expect("run fio (is it installed?)");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for fio") {
            break status;
        }
        if started.elapsed() > FIO_TIMEOUT {
            let pgid = libc::pid_t::try_from(child.id()).expect("pid fits");
            // SAFETY: kill on the process group of the fio we started.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            let _ = child.wait();
            panic!(
                "fio {what} hung: no answer within {FIO_TIMEOUT:?}\n--- stderr ---\n{}--- stdout ---\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default(),
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    // fio's nbd engine prints "fio: connected to NBD server" before the JSON.
    let json: Value = stdout
        .find('{')
        .and_then(|at| serde_json::from_str(&stdout[at..]).ok())
        .unwrap_or_else(|| {
            panic!("fio {what} ({status}) printed no JSON:\n--- stderr ---\n{stderr}--- stdout ---\n{stdout}")
        });
    let job = &json["jobs"][0];
    let bytes = |dir: &str| job[dir]["io_bytes"].as_u64().unwrap_or(0);
    let run = Fio {
        what: what.to_string(),
        success: status.success(),
        error: job["error"].as_i64().unwrap_or(-1),
        write: bytes("write"),
        read: bytes("read"),
        trim: bytes("trim"),
        stdout,
        stderr,
    };
    eprintln!(
        "fio {what}: {} in {:?} (error {}, wrote {} MiB, read {} MiB, trimmed {} MiB)",
        status,
        started.elapsed(),
        run.error,
        run.write / MIB,
        run.read / MIB,
        run.trim / MIB
    );
    run
}

/// fio arguments for `len` bytes at `offset`.
fn range(offset: u64, len: u64) -> Vec<String> {
    vec![format!("--offset={offset}"), format!("--size={len}")]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A sequential write of `len` bytes at `offset` with [`PATTERN`].
fn write(aux: &Path, port: u16, volume: &str, what: &str, offset: u64, len: u64) -> Fio {
    let mut args = vec![
        "--rw=write".to_string(),
        "--verify=pattern".to_string(),
        format!("--verify_pattern={PATTERN}"),
        "--do_verify=0".to_string(),
    ];
    args.extend(range(offset, len));
    fio(aux, port, volume, what, &strs(&args))
}

/// A sequential read of `len` bytes at `offset`, checked against [`PATTERN`].
fn read(aux: &Path, port: u16, volume: &str, what: &str, offset: u64, len: u64) -> Fio {
    let mut args = vec![
        "--rw=read".to_string(),
        "--verify=pattern".to_string(),
        format!("--verify_pattern={PATTERN}"),
    ];
    args.extend(range(offset, len));
    fio(aux, port, volume, what, &strs(&args))
}

/// A discard of `len` bytes at `offset`.
fn trim(aux: &Path, port: u16, volume: &str, what: &str, offset: u64, len: u64) -> Fio {
    let mut args = vec!["--rw=trim".to_string()];
    args.extend(range(offset, len));
    fio(aux, port, volume, what, &strs(&args))
}

/// `pontoon df --json`.
fn df(dir: &Path) -> Value {
    json(dir, &["df", "--json"])
}

fn u(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// Whether `got` is within 1% of `want`.
fn within_1pct(got: u64, want: u64) -> bool {
    got.abs_diff(want) * 100 <= want
}

fn osd_states(d: &Value) -> Vec<String> {
    d["osds"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| o["state"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn any_full(d: &Value) -> bool {
    osd_states(d).iter().any(|s| s == "full")
}

/// Why `df` disagrees (by more than 1%) with `filler` bytes in `filler`
/// and `other` in `other` (None: the volume is gone), if it does: pool p's
/// stored bytes, each volume's used bytes, every OSD's used bytes (a size-3
/// pool on three OSDs puts a copy of everything on each) and the pool's raw
/// used bytes (three copies).
fn df_disagrees(d: &Value, filler: u64, other: Option<u64>) -> Option<String> {
    let logical = filler + other.unwrap_or(0);
    let mut why = Vec::new();
    let pools = d["pools"].as_array().cloned().unwrap_or_default();
    match pools.iter().find(|p| p["name"] == "p") {
        Some(p) => {
            let stored = u(&p["stored_bytes"], "stored_bytes");
            if !within_1pct(stored, logical) {
                why.push(format!("pool p stored_bytes {stored}, written {logical}"));
            }
            let raw = u(&p["raw_used_bytes"], "raw_used_bytes");
            if !within_1pct(raw, 3 * logical) {
                why.push(format!(
                    "pool p raw_used_bytes {raw}, 3 copies of {logical} are {}",
                    3 * logical
                ));
            }
        }
        None => why.push("no pool p".to_string()),
    }
    let vols = d["volumes"].as_array().cloned().unwrap_or_default();
    for (name, want) in [("filler", Some(filler)), ("other", other)] {
        let vol = vols.iter().find(|v| v["name"] == name);
        match (vol, want) {
            (Some(v), Some(want)) => {
                let used = u(&v["used_bytes"], "used_bytes");
                if !within_1pct(used, want) {
                    why.push(format!("volume {name} used_bytes {used}, written {want}"));
                }
            }
            (None, Some(_)) => why.push(format!("no volume {name}")),
            (Some(_), None) => why.push(format!("volume {name} is still listed")),
            (None, None) => {}
        }
    }
    let osds = d["osds"].as_array().cloned().unwrap_or_default();
    if osds.len() != 3 {
        why.push(format!("{} OSDs listed", osds.len()));
    }
    for o in &osds {
        let used = u(&o["used_bytes"], "used_bytes");
        if !within_1pct(used, logical) {
            why.push(format!(
                "osd.{} used_bytes {used}, written {logical}",
                o["id"]
            ));
        }
        if o["reclaim_pending_objects"] != 0 {
            why.push(format!(
                "osd.{} has {} objects to reclaim",
                o["id"], o["reclaim_pending_objects"]
            ));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Polls `df` until `pred` holds (it returns why not, if not); returns
/// that df.
fn wait_df(dir: &Path, what: &str, pred: impl Fn(&Value) -> Option<String>) -> Value {
    let deadline = Instant::now() + DF_WAIT;
    loop {
        let d = df(dir);
        let Some(why) = pred(&d) else {
            return d;
        };
        assert!(
            Instant::now() < deadline,
            "df did not show {what} within {DF_WAIT:?}: {why}\nlast df: {d:#}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn all_clean(s: &Value) -> bool {
    s["osds"]["up"] == 3
        && s["osds"]["in"] == 3
        && s["pgs"]["states"]["active+clean"].as_u64() == Some(16)
}

/// The cluster's processes by pid file name (osd.0 ... osd.2, nbd, etcd).
fn cluster_pids(dir: &Path) -> Vec<(String, u32)> {
    ["osd.0", "osd.1", "osd.2", "nbd", "etcd"]
        .iter()
        .map(|name| {
            let file = dir.join(format!("run/{name}.pid"));
            let pid = read_pid(&file).unwrap_or_else(|| panic!("no pid in {}", file.display()));
            (name.to_string(), pid)
        })
        .collect()
}

/// The lines of the cluster's logs that say a process panicked.
fn panics_in_logs(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for sub in ["log", "logs"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for e in entries.flatten() {
            let path: PathBuf = e.path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines() {
                if line.contains("panicked") || line.contains("RUST_BACKTRACE") {
                    found.push(format!("{}: {line}", path.display()));
                }
            }
        }
    }
    found
}

/// Every process of the cluster still runs, with the pid it started with,
/// and no log reports a panic.
fn assert_nothing_crashed(dir: &Path, up: &Up, pids: &[(String, u32)], when: &str) {
    for (name, pid) in pids {
        assert!(
            alive(*pid),
            "{name} (pid {pid}) died {when}; panics in the logs: {:#?}",
            panics_in_logs(dir)
        );
    }
    assert!(alive(up.pid()), "pontoon up died {when}");
    let now = cluster_pids(dir);
    assert_eq!(now, pids, "a cluster process was restarted {when}");
    let panics = panics_in_logs(dir);
    assert!(panics.is_empty(), "panics {when}: {panics:#?}");
}

/// Writes `filler` sequentially from `offset` until fio stops on ENOSPC
/// (and nothing else); returns the bytes it wrote.
fn fill(aux: &Path, port: u16, what: &str, offset: u64, max: u64) -> u64 {
    let f = write(aux, port, "filler", what, offset, max);
    f.assert_enospc();
    f.write
}

#[test]
fn a_full_pool_refuses_new_writes_with_enospc_and_recovers_when_space_is_freed() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-full-")
        .tempdir()
        .expect("tempdir");
    let root = tmp.path().canonicalize().expect("canonical tempdir");
    let dir = root.join("cluster");
    let aux = root.join("fio");
    std::fs::create_dir(&dir).expect("create cluster dir");
    std::fs::create_dir(&aux).expect("create fio dir");
    let port = free_port();
    let nbd = format!("127.0.0.1:{port}");
    let up = Up::start_with(&dir, 3, &["--nbd", &nbd]);
    let pids = cluster_pids(&dir);
    eprintln!(
        "cluster ready after {:?}, nbd on {nbd}, pids {pids:?}",
        started.elapsed()
    );

    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    wait_status(&dir, "3 OSDs up/in and 16 PGs active+clean", all_clean);

    // Size the volumes from the OSDs' data areas: `filler` can hold twice
    // what the pool can.
    let d = wait_df(&dir, "every OSD reported", |d| {
        let osds = d["osds"].as_array().cloned().unwrap_or_default();
        (osds.len() != 3 || osds.iter().any(|o| o["reported"] != true))
            .then(|| "not every OSD has reported".to_string())
    });
    let data = d["osds"]
        .as_array()
        .expect("osds")
        .iter()
        .map(|o| u(&o["data_bytes"], "data_bytes"))
        .min()
        .expect("an OSD");
    let full_ratio = d["full_ratios"]["full"].as_f64().expect("full ratio");
    assert!(data > 64 * MIB, "data areas of {data} bytes: {d:#}");
    let filler_size = (2 * data).div_ceil(MIB) * MIB;
    ok(
        &dir,
        &[
            "volume",
            "create",
            "filler",
            "--size",
            &format!("{}M", filler_size / MIB),
            "--pool",
            "p",
        ],
    );
    ok(
        &dir,
        &["volume", "create", "other", "--size", "64M", "--pool", "p"],
    );
    eprintln!(
        "pool clean after {:?}: OSD data areas {} MiB, full at {full_ratio}, filler {} MiB",
        started.elapsed(),
        data / MIB,
        filler_size / MIB
    );

    // 1. `other` gets a known amount, and df shows it.
    write(&aux, port, "other", "write other", 0, OTHER_BYTES).assert_ok();
    wait_df(&dir, "other's 24 MiB", |d| {
        df_disagrees(d, 0, Some(OTHER_BYTES))
    });

    // 2. Fill `filler` until fio gets ENOSPC.
    let mut filler = fill(&aux, port, "fill filler", 0, filler_size);
    let total = filler + OTHER_BYTES;
    eprintln!(
        "full after {:?}: filler {} MiB + other {} MiB = {:.1}% of a data area",
        started.elapsed(),
        filler / MIB,
        OTHER_BYTES / MIB,
        total as f64 * 100.0 / data as f64
    );
    // Full means the full ratio: not much earlier, never past the data area.
    assert!(
        total as f64 >= (full_ratio - 0.02) * data as f64 && total <= data,
        "ENOSPC after {total} bytes; the data area is {data} bytes, full at {full_ratio}"
    );
    assert!(
        filler >= TRIM_AT + TRIM_BYTES,
        "filler only got {filler} bytes"
    );

    // 3. df agrees with the bytes written; the OSDs say full.
    let d = wait_df(&dir, "the bytes written and an OSD full", |d| {
        df_disagrees(d, filler, Some(OTHER_BYTES))
            .or_else(|| (!any_full(d)).then(|| format!("OSD states {:?}", osd_states(d))))
    });
    eprintln!("df agrees, OSD states {:?}", osd_states(&d));
    let s = wait_status(&dir, "full OSDs listed", |s| {
        s["full_osds"].as_array().is_some_and(|a| !a.is_empty())
    });
    assert!(
        s["full_osds"]
            .as_array()
            .is_some_and(|a| a.iter().all(|o| o["state"] == "full")),
        "{s:#}"
    );
    assert_nothing_crashed(&dir, &up, &pids, "while filling the pool");

    // 4. While full: reads and overwrites work; new blocks get ENOSPC,
    // every time.
    let r = read(&aux, port, "filler", "read while full", 0, MIB);
    r.assert_ok();
    assert_eq!(r.read, MIB, "{}", r.output());
    let w = write(&aux, port, "filler", "overwrite while full", 0, 4 * MIB);
    w.assert_ok();
    assert_eq!(w.write, 4 * MIB, "{}", w.output());
    read(&aux, port, "filler", "read overwritten", 0, 4 * MIB).assert_ok();
    write(&aux, port, "filler", "new write while full", filler, MIB).assert_enospc();
    std::thread::sleep(Duration::from_secs(1));
    write(
        &aux,
        port,
        "filler",
        "new write while full again",
        filler_size - MIB,
        MIB,
    )
    .assert_enospc();
    let d = df(&dir);
    assert!(any_full(&d), "still full: {d:#}");
    assert!(
        df_disagrees(&d, filler, Some(OTHER_BYTES)).is_none(),
        "the refused writes took no space: {:?}\n{d:#}",
        df_disagrees(&d, filler, Some(OTHER_BYTES))
    );
    assert_nothing_crashed(&dir, &up, &pids, "serving I/O while full");
    eprintln!(
        "reads, overwrites and refusals while full checked after {:?}",
        started.elapsed()
    );

    // 5. A discard works while full, and frees its space.
    let t = trim(&aux, port, "filler", "trim while full", TRIM_AT, TRIM_BYTES);
    t.assert_ok();
    assert_eq!(t.trim, TRIM_BYTES, "{}", t.output());
    filler -= TRIM_BYTES;
    wait_df(&dir, "the discard's space freed", |d| {
        df_disagrees(d, filler, Some(OTHER_BYTES))
            .or_else(|| any_full(d).then(|| format!("OSD states {:?}", osd_states(d))))
    });
    read(&aux, port, "filler", "read after trim", 0, TRIM_AT).assert_ok();
    eprintln!("discard freed its space after {:?}", started.elapsed());

    // Fill it up again: fio stops on ENOSPC once more, at about the same
    // place (every refusal until the OSDs see the space is ENOSPC too).
    let mut end = filler + TRIM_BYTES;
    let deadline = Instant::now() + DF_WAIT;
    let mut runs = 0;
    loop {
        runs += 1;
        let wrote = fill(
            &aux,
            port,
            &format!("refill {runs}"),
            end,
            filler_size - end,
        );
        end += wrote;
        filler += wrote;
        let d = df(&dir);
        if any_full(&d) || filler + OTHER_BYTES >= total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "refilling never made the pool full again within {DF_WAIT:?}: filler {filler} bytes\n{d:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        within_1pct(filler + OTHER_BYTES, total),
        "full again after {} bytes, first full after {total}",
        filler + OTHER_BYTES
    );
    wait_df(&dir, "the refill and an OSD full", |d| {
        df_disagrees(d, filler, Some(OTHER_BYTES))
            .or_else(|| (!any_full(d)).then(|| format!("OSD states {:?}", osd_states(d))))
    });
    write(&aux, port, "filler", "new write when full again", end, MIB).assert_enospc();
    assert_nothing_crashed(&dir, &up, &pids, "refilling the pool");
    eprintln!(
        "full again after {:?} ({runs} refill run(s))",
        started.elapsed()
    );

    // 6. `volume rm` works while full, frees the volume's space, and
    // writes of new blocks resume with nothing restarted.
    let removing = Instant::now();
    ok(&dir, &["volume", "rm", "other"]);
    let d = wait_df(&dir, "other's space freed", |d| {
        df_disagrees(d, filler, None)
            .or_else(|| any_full(d).then(|| format!("OSD states {:?}", osd_states(d))))
    });
    eprintln!(
        "other's space freed {:?} after volume rm, OSD states {:?}",
        removing.elapsed(),
        osd_states(&d)
    );
    // The manager clears the OSDs' full flags in the map (what the OSDs
    // enforce, and what `status` lists) on its next pass over the reports.
    wait_status(&dir, "no full OSDs", |s| {
        s["full_osds"].as_array().is_some_and(Vec::is_empty)
    });
    eprintln!(
        "status lists no full OSD {:?} after volume rm",
        removing.elapsed()
    );
    // The OSDs learn the manager's new full flags from the map: a write
    // may still be refused (with ENOSPC, nothing else) for a moment.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut tries = 0;
    loop {
        tries += 1;
        let w = write(
            &aux,
            port,
            "filler",
            &format!("write after rm {tries}"),
            end,
            RESUME_BYTES,
        );
        if w.success {
            w.assert_ok();
            assert_eq!(w.write, RESUME_BYTES, "{}", w.output());
            break;
        }
        w.assert_enospc();
        assert!(
            Instant::now() < deadline,
            "writes did not resume within 15 s of other's space being freed:\n{}",
            w.output()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    filler += RESUME_BYTES;
    read(
        &aux,
        port,
        "filler",
        "read resumed write",
        end,
        RESUME_BYTES,
    )
    .assert_ok();
    eprintln!(
        "writes resumed {:?} after volume rm ({tries} tries)",
        removing.elapsed()
    );
    wait_df(&dir, "the resumed write", |d| df_disagrees(d, filler, None));
    assert_nothing_crashed(&dir, &up, &pids, "after the space was freed");

    drop(up);
    eprintln!("done after {:?}", started.elapsed());
}
