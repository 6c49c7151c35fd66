//! Running the real NBD client tools from the NBD tests; the generic
//! runner lives in `pontoon-testtools`.

use std::process::Command;
use std::time::Duration;

use pontoon_nbd::ServerHandle;
pub use pontoon_testtools::*;

pub fn nbdinfo() -> Command {
    need("nbdinfo", "libnbd-bin")
}

pub fn nbdcopy() -> Command {
    need("nbdcopy", "libnbd-bin")
}

pub fn qemu_img() -> Command {
    need("qemu-img", "qemu-utils")
}

pub fn qemu_io() -> Command {
    need("qemu-io", "qemu-utils")
}

/// `nbd://127.0.0.1:PORT/EXPORT`.
pub fn uri(server: &ServerHandle, export: &str) -> String {
    format!("nbd://127.0.0.1:{}/{export}", server.local_addr().port())
}

/// One line of `nbdinfo --map`: offset, length, type, description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub offset: u64,
    pub length: u64,
    pub kind: u32,
    pub description: String,
}

/// Runs `nbdinfo --map URI` and parses its lines.
pub fn nbd_map(uri: &str) -> Vec<MapEntry> {
    let r = run_ok(nbdinfo().args(["--map", uri]));
    let map: Vec<MapEntry> = r
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 4, "unexpected nbdinfo --map line {l:?}");
            MapEntry {
                offset: f[0].parse().expect("offset"),
                length: f[1].parse().expect("length"),
                kind: f[2].parse().expect("type"),
                description: f[3..].join(" "),
            }
        })
        .collect();
    // The map covers the export contiguously from 0.
    let mut pos = 0;
    for e in &map {
        assert_eq!(e.offset, pos, "map not contiguous: {map:?}");
        pos += e.length;
    }
    map
}

/// A map entry with the type and description nbdinfo prints for
/// `base:allocation` data (0) or a hole (3, "hole,zero").
pub fn extent(offset: u64, length: u64, data: bool) -> MapEntry {
    let (kind, description) = if data { (0, "data") } else { (3, "hole,zero") };
    MapEntry {
        offset,
        length,
        kind,
        description: description.into(),
    }
}

/// Runs the vm-initiator's kernel NBD test (`tests/nbd.sh`, 2 connections,
/// TRIM=1) against `127.0.0.1:port`, export `export`; fails the test
/// unless the guest reports PASS. The guest reaches the host's
/// 127.0.0.1:PORT as 10.0.2.2:PORT. Boots under TCG: callers run it alone.
pub fn kernel_nbd_test(port: u16, export: &str) -> Ran {
    let args = [
        format!("PORT={port}"),
        format!("EXPORT={export}"),
        "CONNS=2".to_string(),
        "TRIM=1".to_string(),
    ];
    let boot = || run_vm("tests/nbd.sh", &args, Duration::from_secs(240));
    let mut r = boot();
    if !r.success() && r.stdout.contains("FAIL export size is 0") {
        // A race in the harness, not the server: nbd-mini returns once the
        // kernel creates the device's pid file, and Linux 6.1 publishes
        // the capacity only after that, so on a slow (TCG, loaded) guest
        // the script may read size 0. The server already answered the
        // handshake with the right size ("INFO_EXPORT size=...").
        eprintln!(
            "vm-initiator hit its size-0 race; booting once more:\n{}",
            r.report()
        );
        r = boot();
    }
    assert!(
        vm_passed(&r),
        "the kernel's nbd driver failed against the server:\n{}",
        r.report()
    );
    r
}
