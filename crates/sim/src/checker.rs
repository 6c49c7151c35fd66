//! The consistency checker: is each block's history consistent with one
//! order of its operations (linearizable, for a register whose writes all
//! store distinct values)?
//!
//! A write whose call failed may or may not have taken effect; it is
//! treated as still running forever. Checked, per block:
//! - every read returns zeros or a value written to this block, never
//!   bytes no write produced (torn, mixed, corrupt);
//! - no read returns a write invoked after the read returned;
//! - no read misses an acknowledged write: if write B was acknowledged
//!   before the read began and B was invoked after write A returned, the
//!   read may not return A (nor zeros, once anything was acknowledged);
//! - reads do not go back: if read 1 returned before read 2 began, read 2
//!   may not return a value that was acknowledged before read 1's value
//!   was even written.
//!
//! These are the pairwise conditions of linearizability for such a
//! register; together they catch lost writes, stale reads after a
//! failover and values resurrected from an old replica.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::workload::{Kind, Op, Outcome};

#[derive(Clone, Copy)]
struct Write {
    invoke: Duration,
    /// When it was acknowledged; `None` if its call failed or never returned.
    acked: Option<Duration>,
}

#[derive(Clone, Copy)]
struct Read {
    invoke: Duration,
    complete: Duration,
    value: u64,
}

/// Violations found in `ops` (empty: consistent). At most a few per block.
pub fn check(ops: &[Op]) -> Vec<String> {
    let mut blocks: BTreeMap<u32, (BTreeMap<u64, Write>, Vec<Read>)> = BTreeMap::new();
    let mut out = Vec::new();
    for op in ops {
        let (writes, reads) = blocks.entry(op.block).or_default();
        match (&op.kind, &op.outcome) {
            (Kind::Write(id), outcome) => {
                let acked = match outcome {
                    Outcome::Ok(_) => op.complete,
                    _ => None,
                };
                writes.insert(
                    *id,
                    Write {
                        invoke: op.invoke,
                        acked,
                    },
                );
            }
            (Kind::Read, Outcome::Ok(Some(v))) => {
                if let Some(complete) = op.complete {
                    reads.push(Read {
                        invoke: op.invoke,
                        complete,
                        value: *v,
                    });
                }
            }
            (Kind::Read, Outcome::Garbled(why)) => out.push(format!(
                "block {}: read by client.{} at {:?} returned bytes no write produced: {why}",
                op.block, op.client, op.invoke
            )),
            _ => {}
        }
    }
    for (block, (writes, reads)) in &blocks {
        let mut found = Vec::new();
        for r in reads {
            check_read(*block, writes, r, &mut found);
        }
        for r1 in reads {
            for r2 in reads.iter().filter(|r2| r2.invoke > r1.complete) {
                if let Some(v) = went_back(writes, r1, r2) {
                    found.push(v);
                }
            }
        }
        out.extend(
            found
                .into_iter()
                .take(3)
                .map(|v| format!("block {block}: {v}")),
        );
    }
    out
}

fn check_read(block: u32, writes: &BTreeMap<u64, Write>, r: &Read, found: &mut Vec<String>) {
    let _ = block;
    let source = if r.value == 0 {
        None
    } else {
        match writes.get(&r.value) {
            Some(w) => Some(*w),
            None => {
                found.push(format!(
                    "read at {:?} returned value #{} that was never written here",
                    r.invoke, r.value
                ));
                return;
            }
        }
    };
    if let Some(w) = source
        && w.invoke > r.complete
    {
        found.push(format!(
            "read at {:?}..{:?} returned #{} which was only written at {:?}",
            r.invoke, r.complete, r.value, w.invoke
        ));
    }
    for (id, b) in writes {
        if *id == r.value {
            continue;
        }
        let Some(b_acked) = b.acked else { continue };
        if b_acked >= r.invoke {
            continue;
        }
        let newer = match source {
            None => true,
            Some(a) => a.acked.is_some_and(|a_acked| b.invoke > a_acked),
        };
        if newer {
            found.push(format!(
                "stale read at {:?}..{:?}: returned {} though #{id} (invoked {:?}) was acknowledged at {:?}, before the read began{}",
                r.invoke,
                r.complete,
                name(r.value),
                b.invoke,
                b_acked,
                if r.value == 0 { String::new() } else { format!(", and after #{} returned", r.value) }
            ));
            return;
        }
    }
}

fn went_back(writes: &BTreeMap<u64, Write>, r1: &Read, r2: &Read) -> Option<String> {
    if r1.value == r2.value || r1.value == 0 {
        return None;
    }
    let older = if r2.value == 0 {
        true
    } else {
        match (writes.get(&r1.value), writes.get(&r2.value)) {
            (Some(w1), Some(w2)) => w2.acked.is_some_and(|a| a < w1.invoke),
            _ => false,
        }
    };
    older.then(|| {
        format!(
            "reads went back: {} read at {:?}..{:?}, then {} read at {:?}",
            name(r1.value),
            r1.invoke,
            r1.complete,
            name(r2.value),
            r2.invoke
        )
    })
}

fn name(v: u64) -> String {
    if v == 0 {
        "zeros (never written)".into()
    } else {
        format!("#{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn w(id: u64, a: u64, b: Option<u64>) -> Op {
        Op::test_write(0, 0, id, a, b)
    }

    fn r(v: u64, a: u64, b: u64) -> Op {
        Op {
            client: 1,
            block: 0,
            kind: Kind::Read,
            invoke: ms(a),
            complete: Some(ms(b)),
            outcome: Outcome::Ok(Some(v)),
        }
    }

    #[test]
    fn sequential_history_passes() {
        let h = [w(1, 0, Some(1)), r(1, 2, 3), w(2, 4, Some(5)), r(2, 6, 7)];
        assert!(check(&h).is_empty(), "{:?}", check(&h));
    }

    #[test]
    fn concurrent_write_may_be_seen_or_not() {
        let h = [w(1, 0, Some(1)), w(2, 2, Some(10)), r(1, 3, 4), r(2, 5, 6)];
        assert!(check(&h).is_empty(), "{:?}", check(&h));
    }

    #[test]
    fn failed_write_may_appear_late() {
        let h = [w(1, 0, Some(1)), w(2, 2, None), r(1, 3, 4), r(2, 50, 60)];
        assert!(check(&h).is_empty(), "{:?}", check(&h));
    }

    #[test]
    fn lost_acknowledged_write_is_caught() {
        let h = [w(1, 0, Some(1)), w(2, 2, Some(3)), r(1, 4, 5)];
        let v = check(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("stale read"), "{v:?}");
    }

    #[test]
    fn zeros_after_an_acknowledged_write_is_caught() {
        let h = [w(1, 0, Some(1)), r(0, 2, 3)];
        assert!(check(&h)[0].contains("stale read"));
    }

    #[test]
    fn reads_going_back_are_caught() {
        // #2 is concurrent with both reads, so each alone is fine, but
        // seeing #2 then #1 again means #1 was written after #2: it was not.
        let h = [w(1, 0, Some(1)), w(2, 2, Some(20)), r(2, 3, 4), r(1, 5, 6)];
        let v = check(&h);
        assert!(v.iter().any(|x| x.contains("went back")), "{v:?}");
    }

    #[test]
    fn value_from_the_future_or_nowhere_is_caught() {
        let h = [r(7, 0, 1), w(3, 5, Some(6)), r(3, 0, 2)];
        let v = check(&h);
        assert!(v.iter().any(|x| x.contains("never written")), "{v:?}");
        assert!(v.iter().any(|x| x.contains("only written at")), "{v:?}");
    }
}
