//! The snapshot checker: is a snapshot's image one consistent cut of its
//! volume's history?
//!
//! The definition is `crates/pontoon/tests/snap_failure.rs`'s, for a
//! history in which writes to one block may overlap in time. A snapshot
//! whose `snap create` started at `start` and returned at `end` (every
//! OSD holding a lease had confirmed the map with it) is a cut if:
//! - every block reads zeros or a value written to that block, whole;
//! - it holds no write invoked after `end`;
//! - it holds every write acknowledged before `start`;
//! - it holds every write acknowledged before any write it holds was
//!   invoked.
//!
//! "Holds write B" on a block that reads value A means A is B, or A is
//! not known to precede B (A was not acknowledged before B was invoked):
//! A may then have been ordered after B. Zeros hold nothing. A write
//! whose call failed may or may not have taken effect, so it is never
//! known to precede anything and never counts as acknowledged.
//!
//! The last rule is promised only when one client process writes the
//! volume: writes carry the snapshot sequence of their client's map, and
//! a client that has not seen the new map yet may still land a write in
//! the snapshot after another client's write, stamped with the new
//! sequence, was acknowledged outside it. [`Scope`] says which writes
//! the rule relates.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::workload::{Kind, Op, Outcome};

/// One snapshot as the harness took it.
#[derive(Clone, Debug)]
pub struct Cut {
    /// `VOLUME@SNAPSHOT`, for messages.
    pub name: String,
    /// Virtual time the create started (the map with it was committed).
    pub start: Duration,
    /// Virtual time it returned: every OSD holding a lease had confirmed
    /// the map (`None`: never, in the run).
    pub end: Option<Duration>,
}

/// Which pairs of writes the cut rule relates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every pair: the volume's writers are one client process, or the
    /// check is to show that several break it.
    AllWrites,
    /// Only the rules that hold whoever wrote: every block a value
    /// written to it, nothing invoked after the create returned,
    /// everything acknowledged before it started.
    StartAndEnd,
}

#[derive(Clone, Copy)]
struct Write {
    client: u32,
    invoke: Duration,
    acked: Option<Duration>,
}

/// Violations of the cut definition by `image` (per block: the value id
/// read, 0 for zeros, or why the bytes are no value) of snapshot `cut`
/// against the volume's history `ops`. At most a few per kind.
pub fn check_cut(
    ops: &[Op],
    cut: &Cut,
    image: &[Result<u64, String>],
    scope: Scope,
) -> Vec<String> {
    let mut writes: BTreeMap<u32, BTreeMap<u64, Write>> = BTreeMap::new();
    for op in ops {
        if let Kind::Write(id) = op.kind {
            let acked = match op.outcome {
                Outcome::Ok(_) => op.complete,
                _ => None,
            };
            writes.entry(op.block).or_default().insert(
                id,
                Write {
                    client: op.client,
                    invoke: op.invoke,
                    acked,
                },
            );
        }
    }
    let none = BTreeMap::new();
    let name = &cut.name;
    let mut bad = Vec::new();
    // The writes it holds, with the latest invocation among them overall
    // and per client.
    let mut latest: Option<(Duration, u32, u64)> = None;
    let mut latest_of: BTreeMap<u32, (Duration, u32, u64)> = BTreeMap::new();
    for (b, read) in image.iter().enumerate() {
        let b = b as u32;
        let v = match read {
            Ok(0) => continue,
            Ok(v) => *v,
            Err(why) => {
                bad.push(format!(
                    "{name}: block {b} holds bytes no write produced: {why}"
                ));
                continue;
            }
        };
        let Some(w) = writes.get(&b).unwrap_or(&none).get(&v) else {
            bad.push(format!("{name}: block {b} reads #{v}, never written to it"));
            continue;
        };
        if let Some(end) = cut.end
            && w.invoke > end
        {
            bad.push(format!(
                "{name} holds #{v} (block {b}) invoked at {:?}, after the create returned at {end:?}",
                w.invoke
            ));
        }
        if latest.is_none_or(|l| w.invoke > l.0) {
            latest = Some((w.invoke, b, v));
        }
        let e = latest_of.entry(w.client).or_insert((w.invoke, b, v));
        if w.invoke > e.0 {
            *e = (w.invoke, b, v);
        }
    }
    for (b, ws) in &writes {
        let value = match image.get(*b as usize) {
            Some(Ok(v)) => *v,
            Some(Err(_)) => continue,
            None => {
                bad.push(format!("{name}: block {b} was not read"));
                continue;
            }
        };
        let held = ws.get(&value).copied();
        for (id, w) in ws {
            let Some(acked) = w.acked else { continue };
            let holds = *id == value
                || (value != 0 && held.is_some_and(|a| a.acked.is_none_or(|aa| aa >= w.invoke)));
            if holds {
                continue;
            }
            let reads = if value == 0 {
                "zeros".to_string()
            } else {
                format!("#{value}")
            };
            let after = match scope {
                Scope::AllWrites => latest,
                Scope::StartAndEnd => None,
            };
            if acked < cut.start {
                bad.push(format!(
                    "{name} misses #{id} (block {b} reads {reads}): acknowledged at {acked:?}, before the create started at {:?}",
                    cut.start
                ));
            } else if let Some((at, hb, hv)) = after.filter(|l| l.0 > acked) {
                let who = latest_of.get(&w.client).filter(|l| l.0 > acked);
                let same = match who {
                    Some((_, _, v)) => format!(" (of its own client: #{v})"),
                    None => " (only of other clients)".to_string(),
                };
                bad.push(format!(
                    "{name} is not a cut: it holds #{hv} (block {hb}) invoked at {at:?}, but misses #{id} of client.{} (block {b} reads {reads}) acknowledged before that, at {acked:?}{same}",
                    w.client
                ));
            }
        }
    }
    bad.truncate(8);
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn w(client: u32, block: u32, id: u64, a: u64, b: Option<u64>) -> Op {
        Op::test_write(client, block, id, a, b)
    }

    fn cut(start: u64, end: u64) -> Cut {
        Cut {
            name: "v@s".into(),
            start: ms(start),
            end: Some(ms(end)),
        }
    }

    fn image(v: &[u64]) -> Vec<Result<u64, String>> {
        v.iter().map(|x| Ok(*x)).collect()
    }

    /// Block 0: #1 [0,10], #3 [40,50]; block 1: #2 [20,30], #4 [60,70].
    fn history() -> Vec<Op> {
        vec![
            w(0, 0, 1, 0, Some(10)),
            w(0, 1, 2, 20, Some(30)),
            w(0, 0, 3, 40, Some(50)),
            w(0, 1, 4, 60, Some(70)),
        ]
    }

    #[test]
    fn cuts_of_the_history_pass() {
        let h = history();
        for (c, img) in [
            (cut(15, 35), [1, 0]),
            (cut(15, 35), [1, 2]),
            (cut(35, 45), [1, 2]),
            (cut(35, 45), [3, 2]),
            (cut(75, 80), [3, 4]),
        ] {
            let v = check_cut(&h, &c, &image(&img), Scope::AllWrites);
            assert!(v.is_empty(), "{c:?} {img:?}: {v:?}");
        }
    }

    #[test]
    fn a_write_acknowledged_before_the_create_started_must_be_held() {
        let v = check_cut(
            &history(),
            &cut(35, 45),
            &image(&[1, 0]),
            Scope::StartAndEnd,
        );
        assert!(
            v.iter().any(|x| x.contains("before the create started")),
            "{v:?}"
        );
        let v = check_cut(
            &history(),
            &cut(15, 45),
            &image(&[0, 0]),
            Scope::StartAndEnd,
        );
        assert!(v.iter().any(|x| x.contains("misses #1")), "{v:?}");
    }

    #[test]
    fn a_write_invoked_after_the_create_returned_must_not_be_held() {
        let v = check_cut(
            &history(),
            &cut(15, 35),
            &image(&[3, 2]),
            Scope::StartAndEnd,
        );
        assert!(
            v.iter().any(|x| x.contains("after the create returned")),
            "{v:?}"
        );
    }

    #[test]
    fn holding_a_write_but_not_one_acknowledged_before_it_is_no_cut() {
        // #4 (block 1) was invoked at 60, after #3 (block 0) was
        // acknowledged at 50; the image holds #4 but reads #1 on block 0.
        let h = history();
        let c = Cut {
            end: None,
            ..cut(15, 0)
        };
        let v = check_cut(&h, &c, &image(&[1, 4]), Scope::AllWrites);
        assert!(v.iter().any(|x| x.contains("is not a cut")), "{v:?}");
        // Only the start and end rules: the same image passes.
        assert!(check_cut(&h, &c, &image(&[1, 4]), Scope::StartAndEnd).is_empty());
    }

    #[test]
    fn overlapping_and_failed_writes_may_be_held_either_way() {
        // #2 overlaps #1 on block 0; #3 failed: each may be the last.
        let h = vec![
            w(0, 0, 1, 0, Some(20)),
            w(1, 0, 2, 10, Some(30)),
            w(0, 0, 3, 40, None),
        ];
        for img in [[1], [2], [3]] {
            let v = check_cut(&h, &cut(35, 45), &image(&img), Scope::AllWrites);
            assert!(v.is_empty(), "{img:?}: {v:?}");
        }
        // #1 overlapped #2, so holding #1 alone misses nothing, but zeros do.
        let v = check_cut(&h, &cut(35, 45), &image(&[0]), Scope::AllWrites);
        assert_eq!(v.len(), 2, "{v:?}");
    }

    #[test]
    fn values_never_written_there_or_garbled_are_caught() {
        let h = history();
        let v = check_cut(&h, &cut(15, 35), &image(&[2, 0]), Scope::StartAndEnd);
        assert!(v.iter().any(|x| x.contains("never written to it")), "{v:?}");
        let img = vec![Err("torn".to_string()), Ok(0)];
        let v = check_cut(&h, &cut(5, 6), &img, Scope::StartAndEnd);
        assert!(v.iter().any(|x| x.contains("no write produced")), "{v:?}");
    }
}
