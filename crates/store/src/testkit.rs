//! Shared by the crash-test writer binary and the tests that check its
//! work: deterministic block contents and the intent/acknowledgement log.
//!
//! Log lines: `I <id> <kind> <volume> <index> <start_blk> <nblk> <seed> <epoch> <seq>`
//! before an operation is issued, `A <id>` after it is acknowledged.

use pontoon_types::{BLOCK_SIZE, ObjectId, Version, mix64};

/// Deterministic contents of one 4 KiB block.
pub fn block_pattern(seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; BLOCK_SIZE];
    let mut x = seed.wrapping_add(0x9E37);
    for c in out.chunks_mut(8) {
        x = mix64(x);
        c.copy_from_slice(&x.to_le_bytes());
    }
    out
}

/// Seed of block `i` of an operation with seed `seed`.
pub fn block_seed(seed: u64, i: u32) -> u64 {
    seed.wrapping_mul(4099).wrapping_add(i as u64)
}

/// What a logged operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// Write `nblk` blocks from `start`.
    Write,
    /// Discard `nblk` blocks from `start`.
    Discard,
    /// Delete the object.
    Delete,
}

/// One logged operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedOp {
    /// Unique id within the log.
    pub id: u64,
    /// What it does.
    pub kind: LogKind,
    /// Target object.
    pub oid: ObjectId,
    /// First block.
    pub start: u32,
    /// Block count.
    pub nblk: u32,
    /// Content seed (writes).
    pub seed: u64,
    /// Version stamped.
    pub version: Version,
}

impl LoggedOp {
    /// The intent line for this operation.
    pub fn intent_line(&self) -> String {
        let k = match self.kind {
            LogKind::Write => "W",
            LogKind::Discard => "T",
            LogKind::Delete => "D",
        };
        format!(
            "I {} {k} {} {} {} {} {} {} {}\n",
            self.id,
            self.oid.volume.0,
            self.oid.index,
            self.start,
            self.nblk,
            self.seed,
            self.version.epoch,
            self.version.seq
        )
    }
}

/// Parses a log: every operation issued, and whether it was acknowledged.
/// A torn last line (the writer was killed mid-write) is ignored.
pub fn parse_log(text: &str) -> Vec<(LoggedOp, bool)> {
    let mut ops: Vec<(LoggedOp, bool)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["I", id, k, vol, idx, start, n, seed, ep, sq] => {
                let parsed = (|| {
                    Some(LoggedOp {
                        id: id.parse().ok()?,
                        kind: match *k {
                            "W" => LogKind::Write,
                            "T" => LogKind::Discard,
                            "D" => LogKind::Delete,
                            _ => return None,
                        },
                        oid: ObjectId::new(vol.parse().ok()?, idx.parse().ok()?),
                        start: start.parse().ok()?,
                        nblk: n.parse().ok()?,
                        seed: seed.parse().ok()?,
                        version: Version::new(ep.parse().ok()?, sq.parse().ok()?),
                    })
                })();
                if let Some(op) = parsed {
                    index.insert(op.id, ops.len());
                    ops.push((op, false));
                }
            }
            ["A", id] => {
                if let Some(&i) = id.parse::<u64>().ok().and_then(|id| index.get(&id)) {
                    ops[i].1 = true;
                }
            }
            _ => {}
        }
    }
    ops
}
