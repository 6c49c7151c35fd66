//! Backfill and recovery never push an OSD past backfillfull; they wait
//! and say so. On a real four-OSD `pontoon up` cluster (size-3 pool, 16
//! PGs, a 64 MiB volume filled through the client library):
//! - with the backfillfull ratio set below every OSD's fill (writes still
//!   allowed: full stays at 0.95), marking an OSD out leaves its PGs
//!   degraded instead of copying their objects onto the remaining OSDs:
//!   none of those OSDs' used bytes grows at all, the PGs are not all
//!   clean, the primaries say why in `status --json` `pg_notes` ("osd.N is
//!   backfillfull: recovery onto it waits for space"), and no OSD dies;
//! - once the ratios are raised again, recovery resumes by itself: every
//!   PG becomes active+clean with the OSD still out, the notes go, the out
//!   OSD's copies are deleted as strays, and `df` shows exactly three
//!   copies of the volume again;
//! - a backfillfull ratio above the full ratio is refused (exit 1) with an
//!   error naming the required order, and the ratios stay as they were.
//!
//! Needs etcd (Debian's etcd-server; scripts/deps.sh installs it).

mod common;

use common::*;
use std::time::{Duration, Instant};

use serde_json::Value;

const MIB: u64 = 1 << 20;
const OSDS: u64 = 4;
const PGS: u64 = 16;
/// The volume written before the ratios are lowered: 16 objects of 4 MiB.
const VOL: u64 = 64 * MIB;
/// The OSD marked out.
const OUT: u64 = 0;
/// How long recovery is watched while the OSDs are backfillfull.
const HOLD: Duration = Duration::from_secs(12);
/// How long recovery may take to finish once the ratios are raised.
const RESUME_LIMIT: Duration = Duration::from_secs(90);
/// How long stray copies may take to be deleted once the PGs are clean.
const STRAY_LIMIT: Duration = Duration::from_secs(60);

fn all_clean(s: &Value) -> bool {
    s["osds"]["up"] == OSDS && s["pgs"]["states"]["active+clean"].as_u64() == Some(PGS)
}

/// The OSD's full state as the manager flagged it ("ok" when omitted).
fn state(df: &Value, id: u64) -> &str {
    df_osd(df, id)["state"].as_str().unwrap_or("ok")
}

/// The PG notes saying that recovery waits for a backfillfull OSD.
fn backfillfull_notes(s: &Value) -> Vec<String> {
    s["pg_notes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n["note"].as_str().map(|t| (n["pg"].as_str(), t)))
                .filter(|(_, t)| t.contains("backfillfull"))
                .map(|(pg, t)| format!("{}: {t}", pg.unwrap_or("?")))
                .collect()
        })
        .unwrap_or_default()
}

fn assert_alive(pids: &[u32], when: &str) {
    for (id, pid) in pids.iter().enumerate() {
        assert!(alive(*pid), "osd.{id} (pid {pid}) died {when}");
    }
}

#[test]
fn backfill_and_recovery_wait_at_backfillfull_and_say_so() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-backfillfull-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let _up = Up::start_sized(&dir, OSDS as usize, "512M", &[]);
    // Placement must stay put between the measurements.
    ok(&dir, &["balancer", "off"]);
    eprintln!("cluster up after {:?}", started.elapsed());
    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    ok(&dir, &["volume", "create", "v", "--size", "64M"]);
    wait_status(&dir, "all clean", all_clean);
    let pids: Vec<u32> = (0..OSDS).map(|i| osd_pid(&dir, i)).collect();

    // 1. Three copies of 64 MiB over four OSDs.
    ok(
        &dir,
        &[
            "bench", "--volume", "v", "--fill", "--bs", "4M", "--qd", "4",
        ],
    );
    let df = wait_json(&dir, &["df", "--json"], "v's data", WAIT, |d| {
        df_volume(d, "v")["raw_used_bytes"] == 3 * VOL
    });
    eprintln!("written after {:?}", started.elapsed());
    let ratios: Vec<f64> = (0..OSDS)
        .map(|i| df_osd(&df, i)["used_ratio"].as_f64().unwrap_or(0.0))
        .collect();
    eprintln!("used ratios: {ratios:?}");
    // Every OSD must hold data, or recovery could rightly push to an
    // empty one (16 objects on 3 of 4 OSDs each: all four are all but
    // certain to get some).
    assert!(
        (0..OSDS).all(|i| df_used(&df, i) > 0 && ratios[i as usize] > 0.0),
        "an OSD holds no data, so it would not be backfillfull: {df:#}"
    );

    // 2. Backfillfull at half the emptiest OSD's fill, nearfull at a
    // quarter, full untouched: every OSD is backfillfull, none full.
    let smallest = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let backfillfull = (smallest / 2.0 * 1000.0).floor() / 1000.0;
    let nearfull = (smallest / 4.0 * 1000.0).floor() / 1000.0;
    assert!(
        nearfull > 0.0 && nearfull < backfillfull,
        "fills too small to pick ratios from: {ratios:?}"
    );
    let (nf, bf) = (nearfull.to_string(), backfillfull.to_string());
    // Lower nearfull first, so the order holds after each step.
    ok(&dir, &["osd", "set-nearfull-ratio", &nf]);
    ok(&dir, &["osd", "set-backfillfull-ratio", &bf]);
    eprintln!("ratios set: nearfull {nf}, backfillfull {bf}, full 0.95");
    let df = wait_json(
        &dir,
        &["df", "--json"],
        "every OSD backfillfull",
        WAIT,
        |d| (0..OSDS).all(|i| state(d, i) == "backfillfull"),
    );
    assert_eq!(df["full_ratios"]["full"], 0.95, "{df:#}");
    let s = json(&dir, &["status", "--json"]);
    let flagged = s["full_osds"].as_array().map_or(0, Vec::len);
    assert_eq!(flagged as u64, OSDS, "status full_osds: {s:#}");
    assert!(
        all_clean(&s),
        "lowering the ratios changed PG states: {s:#}"
    );
    eprintln!("all OSDs backfillfull after {:?}", started.elapsed());

    // 3. osd.0 out: its PGs' third copies must go to the other three
    // OSDs, all backfillfull, so recovery must wait. Without client
    // writes, only recovery could allocate data blocks on them, and every
    // object recovered would add a whole 4 MiB, so the slack is zero:
    // their used bytes must not grow at all.
    let before: Vec<u64> = (0..OSDS).map(|i| df_used(&df, i)).collect();
    ok(&dir, &["osd", "out", &OUT.to_string()]);
    let out_at = Instant::now();
    let mut notes: Vec<String> = Vec::new();
    let mut grew: Vec<u64> = vec![0; OSDS as usize];
    let mut last = Value::Null;
    while out_at.elapsed() < HOLD {
        let s = json(&dir, &["status", "--json"]);
        let df = json(&dir, &["df", "--json"]);
        for i in (0..OSDS).filter(|i| *i != OUT) {
            let g = df_used(&df, i).saturating_sub(before[i as usize]);
            grew[i as usize] = grew[i as usize].max(g);
        }
        let n = backfillfull_notes(&s);
        if notes.is_empty() && !n.is_empty() {
            eprintln!(
                "backfillfull note {:?} after osd out: {n:?}",
                out_at.elapsed()
            );
        }
        if !n.is_empty() {
            notes = n;
        }
        assert_alive(&pids, "while recovery waited");
        last = s;
        std::thread::sleep(Duration::from_millis(500));
    }
    let s = last;
    eprintln!(
        "after {HOLD:?} out: pgs {} objects {} notes {notes:?}",
        s["pgs"]["states"], s["objects"]
    );
    assert_eq!(s["osds"]["in"], OSDS - 1, "{s:#}");
    assert!(
        grew.iter().all(|g| *g == 0),
        "recovery copied onto backfillfull OSDs: used bytes grew by {grew:?} \
         (before {before:?}); status: {s:#}"
    );
    assert!(
        !notes.is_empty()
            && notes.iter().all(|n| n.contains("waits"))
            && notes
                .iter()
                .any(|n| (0..OSDS).any(|i| i != OUT && n.contains(&format!("osd.{i} ")))),
        "no PG said its recovery waits for a backfillfull OSD; last status: {s:#}"
    );
    assert!(
        s["pgs"]["states"]["active+clean"].as_u64().unwrap_or(0) < PGS,
        "every PG is clean although recovery could not copy anything: {s:#}"
    );
    assert_eq!(
        s["objects"]["recovered"], 0,
        "objects were recovered onto backfillfull OSDs: {s:#}"
    );
    assert!(
        s["objects"]["degraded"].as_u64().unwrap_or(0) > 0
            || s["objects"]["missing"].as_u64().unwrap_or(0) > 0,
        "no object is degraded or missing with osd.{OUT} out: {s:#}"
    );
    let df = json(&dir, &["df", "--json"]);
    assert!(
        df_used(&df, OUT) > 0,
        "osd.{OUT}'s copies went before any other copy was made: {df:#}"
    );

    // 4. Ratios back to the defaults, in an order that stays valid:
    // recovery resumes by itself.
    ok(&dir, &["osd", "set-backfillfull-ratio", "0.90"]);
    ok(&dir, &["osd", "set-nearfull-ratio", "0.85"]);
    let raised = Instant::now();
    let s = wait_json(
        &dir,
        &["status", "--json"],
        "all PGs clean without osd.0 and no backfillfull note",
        RESUME_LIMIT,
        |s| s["osds"]["in"] == OSDS - 1 && all_clean(s) && backfillfull_notes(s).is_empty(),
    );
    eprintln!(
        "clean {:?} after the ratios were raised: objects {}",
        raised.elapsed(),
        s["objects"]
    );
    assert_alive(&pids, "during recovery");
    let df = wait_json(
        &dir,
        &["df", "--json"],
        "three copies of v and osd.0's strays deleted",
        STRAY_LIMIT,
        |d| {
            df_volume(d, "v")["raw_used_bytes"] == 3 * VOL
                && df_used(d, OUT) == 0
                && d["raw"]["reclaim_pending_objects"] == 0
                && (0..OSDS).all(|i| state(d, i) == "ok")
        },
    );
    let rest: u64 = (0..OSDS)
        .filter(|i| *i != OUT)
        .map(|i| df_used(&df, i))
        .sum();
    assert_eq!(
        rest,
        3 * VOL,
        "the in OSDs hold other than 3 copies: {df:#}"
    );
    eprintln!(
        "strays gone {:?} after the ratios were raised: {:?}",
        raised.elapsed(),
        (0..OSDS).map(|i| df_used(&df, i)).collect::<Vec<_>>()
    );

    // 5. A backfillfull ratio above full is refused, and changes nothing.
    let err = fails(&dir, &["osd", "set-backfillfull-ratio", "0.99"], 1);
    assert!(
        err.contains("nearfull <= backfillfull <= full"),
        "the refusal does not name the order: {err}"
    );
    let df = json(&dir, &["df", "--json"]);
    assert_eq!(df["full_ratios"]["backfillfull"], 0.90, "{df:#}");
    assert_eq!(df["full_ratios"]["full"], 0.95, "{df:#}");
    assert_eq!(df["full_ratios"]["nearfull"], 0.85, "{df:#}");
    assert_alive(&pids, "at the end");
    eprintln!("done after {:?}", started.elapsed());
}
