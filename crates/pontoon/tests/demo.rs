//! `pontoon demo`, the README's main job, runs to the end: raw disk, a
//! 3-OSD cluster serving a 3-replica volume over NBD, the fio workload, the
//! results table beside the raw figures, status, and a clean stop.

use std::process::Command;

#[test]
fn the_demo_runs_and_prints_pontoon_beside_the_raw_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args(["demo", "--seconds", "2", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run pontoon demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    for phase in [
        "64 KiB sequential write",
        "4 KiB random write",
        "4 KiB random read",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(phase))
            .unwrap_or_else(|| panic!("no {phase} row in:\n{stdout}"));
        let nums: Vec<f64> = line[phase.len()..]
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        // Pontoon IOPS, MB/s, raw IOPS, ratio: all measured, all positive.
        assert_eq!(nums.len(), 4, "{line}");
        assert!(nums.iter().all(|n| *n > 0.0), "{line}");
    }
    assert!(
        stdout.contains("active+clean"),
        "status shows the PGs:\n{stdout}"
    );
    // Stopped cleanly: no pid file of the cluster still names a live process.
    let run = dir.path().join("cluster/run");
    for e in std::fs::read_dir(&run).into_iter().flatten().flatten() {
        let pid: i32 = std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        // SAFETY: signal 0 only checks existence.
        assert!(
            pid == 0 || unsafe { libc::kill(pid, 0) } != 0,
            "{} still running",
            e.path().display()
        );
    }
}
