//! Client scenarios shared by the in-process and the cluster tests: a
//! qemu-io model of writes, zeroes and discards checked byte for byte,
//! big random files, and parsers for nbdinfo and fio output.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use super::MIB;
use super::pattern;
use super::tools::*;

/// `nbdinfo --list` as (export, size), in the order printed.
pub fn listed_exports(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut name: Option<String> = None;
    for line in text.lines() {
        let l = line.trim();
        if let Some(n) = l.strip_prefix("export=\"") {
            name = n.strip_suffix("\":").map(str::to_string);
        } else if let Some(size) = l.strip_prefix("export-size:") {
            let n: u64 = size
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad export-size line {line:?}"));
            out.push((name.take().expect("export-size before export="), n));
        }
    }
    out
}

/// One qemu-io operation.
#[derive(Clone, Copy)]
pub enum Op {
    /// `write [-f] -P pat off len`.
    Write {
        pat: u8,
        off: u64,
        len: u64,
        fua: bool,
    },
    /// `write -z [-u] off len`.
    Zero { off: u64, len: u64, unmap: bool },
    /// `discard off len`.
    Discard { off: u64, len: u64 },
}

/// Marks a byte whose content the protocol leaves unspecified (trimmed).
pub const UNKNOWN: u16 = 0x100;

/// What a sequence of ops leaves in `0..window`, and the qemu-io commands
/// that perform them.
pub fn apply(ops: &[Op], window: u64) -> (Vec<u16>, Vec<String>) {
    let mut model = vec![0u16; window as usize];
    let mut cmds = Vec::new();
    for op in ops {
        let (off, len, val, cmd) = match *op {
            Op::Write { pat, off, len, fua } => {
                let f = if fua { "-f " } else { "" };
                (
                    off,
                    len,
                    u16::from(pat),
                    format!("write {f}-P {pat:#x} {off} {len}"),
                )
            }
            Op::Zero { off, len, unmap } => {
                let u = if unmap { "-u " } else { "" };
                (off, len, 0, format!("write -z {u}{off} {len}"))
            }
            Op::Discard { off, len } => (off, len, UNKNOWN, format!("discard {off} {len}")),
        };
        assert!(off + len <= window);
        model[off as usize..(off + len) as usize].fill(val);
        cmds.push(cmd);
    }
    (model, cmds)
}

/// qemu-io reads that check every byte of the model: one read per run of
/// equal bytes, plus one per run that starts and ends up to 1000 bytes
/// outside it (checking only the run), so reads straddle data, holes and
/// block edges at odd offsets.
pub fn verify_cmds(model: &[u16]) -> Vec<String> {
    let mut cmds = Vec::new();
    let mut start = 0usize;
    while start < model.len() {
        let v = model[start];
        let end = start + model[start..].iter().take_while(|&&b| b == v).count();
        if v != UNKNOWN {
            let len = end - start;
            cmds.push(format!("read -q -P {v:#x} {start} {len}"));
            let (lo, hi) = (start.saturating_sub(1000), (end + 1000).min(model.len()));
            cmds.push(format!(
                "read -q -P {v:#x} -s {} -l {len} {lo} {}",
                start - lo,
                hi - lo
            ));
        }
        start = end;
    }
    cmds
}

/// Runs qemu-io on `uri` with the given commands; fails on any error or
/// pattern mismatch.
pub fn qemu_io_run(uri: &str, cmds: &[String]) {
    let mut c = qemu_io();
    c.args(["-f", "raw", uri]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    let r = run_ok(&mut c);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        !all.contains("failed") && !all.contains("error"),
        "qemu-io reported a failure:\n{}",
        r.report()
    );
}

/// Unaligned, aligned and boundary-crossing writes, zeroes and discards
/// through qemu-io, checked byte for byte by a second qemu-io.
pub fn qemu_io_scenario(uri: &str) -> Vec<u16> {
    const M: u64 = MIB;
    let ops = [
        // Odd offset and length inside one block, then a 512-aligned
        // write overlapping its start.
        Op::Write {
            pat: 0xab,
            off: 1000,
            len: 3000,
            fua: false,
        },
        Op::Write {
            pat: 0xcd,
            off: 512,
            len: 512,
            fua: false,
        },
        // Across the 4 MiB object boundary, unaligned at both ends.
        Op::Write {
            pat: 0x11,
            off: 4 * M - 3000,
            len: 6000,
            fua: false,
        },
        // Aligned, across the 8 MiB boundary.
        Op::Write {
            pat: 0x22,
            off: 8 * M - 65536,
            len: 131072,
            fua: false,
        },
        // Two bytes straddling 12 MiB.
        Op::Write {
            pat: 0x33,
            off: 12 * M - 1,
            len: 2,
            fua: false,
        },
        // 8 MiB + 1000 bytes from an odd offset: crosses 16 and 20 MiB.
        Op::Write {
            pat: 0x44,
            off: 13 * M + 5,
            len: 8 * M + 1000,
            fua: false,
        },
        // FUA, unaligned; and one aligned block.
        Op::Write {
            pat: 0x55,
            off: 30000,
            len: 10000,
            fua: true,
        },
        Op::Write {
            pat: 0x66,
            off: 40960,
            len: 4096,
            fua: false,
        },
        // Zeroes: unaligned (no unmap) inside data, aligned with unmap.
        Op::Zero {
            off: 14 * M + 123,
            len: M,
            unmap: false,
        },
        Op::Zero {
            off: 16 * M,
            len: M,
            unmap: true,
        },
        // Twenty zero bytes across 4 MiB, then one byte written into them.
        Op::Zero {
            off: 4 * M - 10,
            len: 20,
            unmap: false,
        },
        Op::Write {
            pat: 0x77,
            off: 4 * M - 1,
            len: 1,
            fua: false,
        },
        // Discards: aligned, and unaligned (bytes outside must survive).
        Op::Discard {
            off: 18 * M,
            len: M,
        },
        Op::Discard {
            off: 20 * M + 100,
            len: M,
        },
    ];
    let (model, mut cmds) = apply(&ops, 24 * M);
    let verify = verify_cmds(&model);
    cmds.extend(verify.iter().cloned());
    cmds.push("flush".into());
    qemu_io_run(uri, &cmds);
    // A fresh connection sees the same bytes.
    qemu_io_run(uri, &verify);
    model
}

/// True if `off..off+len` lies inside map entries of the given kind.
pub fn covered(map: &[MapEntry], off: u64, len: u64, data: bool) -> bool {
    let kind = if data { 0 } else { 3 };
    map.iter()
        .filter(|e| e.offset < off + len && off < e.offset + e.length)
        .all(|e| e.kind == kind)
}

/// Writes `len` bytes of pseudo-random data to a new file.
pub fn random_file(path: &Path, len: u64, seed: u64) {
    let mut f = File::create(path).unwrap();
    for i in 0..len / MIB {
        f.write_all(&pattern(seed * 1_000_003 + i, MIB as usize))
            .unwrap();
    }
    f.sync_all().unwrap();
}

/// Fails unless `path` from `from` on holds only zeros.
pub fn assert_zero_from(path: &Path, from: u64) {
    let mut f = File::open(path).unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(from)).unwrap();
    let mut buf = vec![0u8; 8 << 20];
    let mut at = from;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if let Some(i) = buf[..n].iter().position(|&b| b != 0) {
            panic!(
                "{} has a non-zero byte at {}",
                path.display(),
                at + i as u64
            );
        }
        at += n as u64;
    }
}

/// fio's JSON output (after its "connected" line) and the values of its
/// "error" fields.
pub fn fio_errors(out: &str) -> Vec<u64> {
    let errors = json_u64s(out, "error");
    assert!(!errors.is_empty(), "no \"error\" in fio output:\n{out}");
    errors
}
