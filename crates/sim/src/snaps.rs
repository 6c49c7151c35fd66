//! Snapshots under the faults: the harness takes snapshots of the
//! volumes as `pontoon snap create` does, at times the seed picks, removes
//! some again (the OSDs then trim their clones), and after healing reads
//! every snapshot still in the map through the client library
//! (`VOLUME@SNAPSHOT`) for [`crate::cuts`] to judge.
//!
//! A create commits one map with the snapshot records and the volumes'
//! higher `snap_seq`, and returns when every OSD holding a lease has
//! reported that map (`pontoon snap create` waits the same way, for at
//! most 15 s, then warns). The log keeps both times.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use pontoon_client::Volume;

use crate::ctx::Ctx;
use crate::cuts::Cut;
use crate::workload::{BLOCK, History, Kind, Outcome, Shape, decode, encode, offset_of, read_one};
use crate::world::World;

/// How long `pontoon snap create` waits for the OSDs' confirmation
/// before it returns with a warning (`cmd_snap::CONFIRM_TIMEOUT`).
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the confirmation is polled (as `MapStore::osds_behind`).
const CONFIRM_POLL: Duration = Duration::from_millis(100);

/// One snapshot the harness took.
#[derive(Clone, Debug)]
pub struct Taken {
    /// The volume's name.
    pub volume: &'static str,
    /// The snapshot's name.
    pub name: String,
    /// Its id (the volume's `snap_seq` the create set).
    pub id: u64,
    /// When the create started and returned.
    pub cut: Cut,
    /// Removed from the map later (not read at the end).
    pub removed: bool,
    /// Protected, with a clone made of it (never removed).
    pub protected: bool,
}

/// Every snapshot of a run.
#[derive(Default)]
pub struct SnapLog {
    /// In the order taken.
    pub taken: RefCell<Vec<Taken>>,
    /// Snapshot images read and checked after healing.
    pub images_checked: Cell<usize>,
    /// Blocks read from them.
    pub blocks_read: Cell<usize>,
    /// Images judged, as a self-test, against the times of the previous
    /// snapshot of their volume (where the two images differ).
    pub shifted_judged: Cell<usize>,
    /// Of those, the ones the checker rejected.
    pub shifted_rejected: Cell<usize>,
    /// Blocks of the clone checked against its parent (0: none made).
    pub clone_blocks: Cell<usize>,
    /// Snapshot reads under the faults.
    pub reads: RefCell<Vec<SnapRead>>,
    /// Of those, the ones checked (of snapshots still live at the end).
    pub reads_checked: Cell<usize>,
}

impl SnapLog {
    /// Snapshots still in the map.
    pub fn live(&self) -> Vec<Taken> {
        self.taken
            .borrow()
            .iter()
            .filter(|t| !t.removed)
            .cloned()
            .collect()
    }

    /// Snapshots whose create waited longer than [`CONFIRM_TIMEOUT`] for
    /// the OSDs (the real command would have returned with a warning).
    pub fn late(&self) -> usize {
        self.taken
            .borrow()
            .iter()
            .filter(|t| {
                t.cut
                    .end
                    .is_none_or(|e| e.saturating_sub(t.cut.start) > CONFIRM_TIMEOUT)
            })
            .count()
    }
}

/// Takes 2–5 snapshots of each of `volumes` (one map change each time)
/// at times the seed picks before `until`; each time, with chance one in
/// three, also removes the oldest snapshot still live of one of them.
pub async fn take_snapshots(
    world: Rc<World>,
    log: Rc<SnapLog>,
    volumes: Vec<&'static str>,
    until: Duration,
) {
    let ctx = world.ctx.clone();
    let ms = until.as_millis() as u64;
    let n = ctx.range(2, 6);
    let mut times: Vec<u64> = (0..n)
        .map(|_| ctx.range(500, ms.saturating_sub(500)))
        .collect();
    times.sort_unstable();
    for (i, at) in times.into_iter().enumerate() {
        let wait = Duration::from_millis(at).saturating_sub(ctx.exec.elapsed());
        pontoon_rt::sleep(wait).await;
        let name = format!("s{i}");
        let Some((ids, epoch)) = world.create_snapshots(&volumes, &name) else {
            continue;
        };
        let start = ctx.exec.elapsed();
        let first = log.taken.borrow().len();
        for (v, id) in volumes.iter().zip(ids) {
            log.taken.borrow_mut().push(Taken {
                volume: v,
                name: name.clone(),
                id,
                cut: Cut {
                    name: format!("{v}@{name}"),
                    start,
                    end: None,
                },
                removed: false,
                protected: false,
            });
        }
        let (w, l, made) = (world.clone(), log.clone(), first..first + volumes.len());
        pontoon_rt::spawn(async move {
            while !w.all_alive_have(epoch) {
                pontoon_rt::sleep(CONFIRM_POLL).await;
            }
            let now = w.ctx.exec.elapsed();
            w.ctx.log(format!(
                "snapshot s{i} confirmed by every OSD holding a lease ({:?} after the create)",
                now - start
            ));
            for t in l.taken.borrow_mut()[made].iter_mut() {
                t.cut.end = Some(now);
            }
        });
        if ctx.range(0, 3) == 0 {
            let v = volumes[ctx.pick(volumes.len())];
            let oldest =
                log.taken.borrow().iter().position(|t| {
                    t.volume == v && !t.removed && !t.protected && t.cut.end.is_some()
                });
            if let Some(k) = oldest {
                let snap = {
                    let mut taken = log.taken.borrow_mut();
                    taken[k].removed = true;
                    taken[k].name.clone()
                };
                world.remove_snapshot(v, &snap);
            }
        }
    }
}

/// Reads every block of snapshot `spec` (`VOLUME@SNAPSHOT`) with a
/// client opened on `client`'s map: per block, the value id read (0 for
/// zeros) or why the bytes are no value; `Err` if the open or a read
/// failed.
pub async fn read_image(
    client: &pontoon_client::Client,
    spec: &str,
    shape: Shape,
) -> Result<Vec<Result<u64, String>>, String> {
    let vol: Volume = client
        .open(spec)
        .map_err(|e| format!("opening {spec}: {e}"))?;
    let mut image = Vec::with_capacity(shape.blocks as usize);
    for b in 0..shape.blocks {
        let at = offset_of(b, shape.blocks_per_object, shape.object_size);
        let buf = vol
            .read_at(at, BLOCK as u64)
            .await
            .map_err(|e| format!("reading block {b} of {spec}: {e}"))?;
        image.push(decode(&buf));
    }
    Ok(image)
}

/// The clone's writer, for the final check.
#[derive(Default)]
pub struct CloneLog {
    /// The snapshot it is a clone of (an index into [`SnapLog::taken`]),
    /// once made.
    pub parent: Cell<Option<usize>>,
    /// Blocks whose first write was acknowledged: only these are read and
    /// written again (no read of them can legitimately return the
    /// parent's data any more).
    pub owned: RefCell<BTreeSet<u32>>,
    /// Blocks written at all: the others must read the parent snapshot's.
    pub tried: RefCell<BTreeSet<u32>>,
}

/// The clone's one writer: first writes to blocks at random, then reads
/// and rewrites of the blocks whose first write was acknowledged, until
/// `until`. A block whose first write failed is left alone.
pub async fn clone_worker(
    ctx: Rc<Ctx>,
    hist: Rc<History>,
    vol: Volume,
    client: u32,
    shape: Shape,
    until: Duration,
    log: Rc<CloneLog>,
) {
    while ctx.exec.elapsed() < until {
        let block = ctx.pick(shape.blocks as usize) as u32;
        let at = offset_of(block, shape.blocks_per_object, shape.object_size);
        let owned = log.owned.borrow().contains(&block);
        let tried = log.tried.borrow().contains(&block);
        if owned && ctx.range(0, 2) == 0 {
            read_one(&ctx, &hist, &vol, client, block, at).await;
        } else if owned || !tried {
            log.tried.borrow_mut().insert(block);
            let id = hist.next_value();
            let i = hist.invoke(&ctx, client, block, Kind::Write(id));
            let out = match vol.write_at(at, &encode(id)).await {
                Ok(()) => Outcome::Ok(None),
                Err(e) => Outcome::Failed(e.to_string()),
            };
            if out == Outcome::Ok(None) {
                log.owned.borrow_mut().insert(block);
            }
            hist.complete(&ctx, i, out);
        }
        let think = ctx.range(0, shape.max_think.as_micros() as u64);
        pontoon_rt::sleep(Duration::from_micros(think)).await;
    }
}

/// Checks the clone's image against its parent snapshot's: a block the
/// clone never wrote reads the parent's value; one whose only write failed
/// reads the parent's or that write's. (Blocks it owns are checked by the
/// linearizability checker, with the final reads.)
pub fn check_clone(
    hist: &History,
    log: &CloneLog,
    clone: &[Result<u64, String>],
    parent: &[Result<u64, String>],
) -> Vec<String> {
    let ops = hist.ops();
    let mut bad = Vec::new();
    for (b, (c, p)) in clone.iter().zip(parent).enumerate() {
        let b = b as u32;
        if log.owned.borrow().contains(&b) {
            continue;
        }
        let written = |v: u64| ops.iter().any(|o| o.block == b && o.kind == Kind::Write(v));
        let ok = match (c, p) {
            (Ok(c), Ok(p)) => c == p || (log.tried.borrow().contains(&b) && written(*c)),
            _ => false,
        };
        if !ok {
            bad.push(format!(
                "clone block {b} reads {c:?} where its parent snapshot reads {p:?}{}",
                if log.tried.borrow().contains(&b) {
                    " (the clone's one write to it failed)"
                } else {
                    " (the clone never wrote it)"
                }
            ));
        }
    }
    bad.truncate(8);
    bad
}

/// One read of a snapshot under the faults.
#[derive(Clone, Debug)]
pub struct SnapRead {
    /// Which snapshot (an index into [`SnapLog::taken`]).
    pub snap: usize,
    /// The block.
    pub block: u32,
    /// When it was invoked.
    pub invoke: Duration,
    /// The value id read (0: zeros), or why the bytes are no value.
    pub value: Result<u64, String>,
}

/// Reads random blocks of random confirmed snapshots of `volume` until
/// `until`, under the faults, recording each read that returned data (a
/// read may fail while the cluster is impaired, or because the snapshot
/// was removed meanwhile).
pub async fn snap_reader(
    ctx: Rc<Ctx>,
    client: pontoon_client::Client,
    log: Rc<SnapLog>,
    volume: &'static str,
    shape: Shape,
    until: Duration,
) {
    while ctx.exec.elapsed() < until {
        pontoon_rt::sleep(Duration::from_millis(ctx.range(50, 400))).await;
        let ready: Vec<(usize, String)> = log
            .taken
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.volume == volume && !t.removed && t.cut.end.is_some())
            .map(|(i, t)| (i, t.cut.name.clone()))
            .collect();
        if ready.is_empty() {
            continue;
        }
        let (snap, spec) = ready[ctx.pick(ready.len())].clone();
        let Ok(vol) = client.open(&spec) else {
            continue;
        };
        let block = ctx.pick(shape.blocks as usize) as u32;
        let at = offset_of(block, shape.blocks_per_object, shape.object_size);
        let invoke = ctx.exec.elapsed();
        let Ok(buf) = vol.read_at(at, BLOCK as u64).await else {
            continue;
        };
        let value = decode(&buf);
        ctx.log(format!("snapshot read {spec} block {block} -> {value:?}"));
        log.reads.borrow_mut().push(SnapRead {
            snap,
            block,
            invoke,
            value,
        });
    }
}

/// Checks the reads of snapshot `snap` made under the faults against its
/// image read after healing: a read returns the image's value, or one the
/// snapshot held before a write still unacknowledged when the read began
/// replaced it (a write issued before the create returned may land late).
pub fn check_snap_reads(
    ops: &[crate::workload::Op],
    log: &SnapLog,
    snap: usize,
    image: &[Result<u64, String>],
) -> Vec<String> {
    let write = |b: u32, v: u64| {
        ops.iter()
            .find(|o| o.block == b && o.kind == Kind::Write(v))
            .map(|o| match o.outcome {
                Outcome::Ok(_) => (o.invoke, o.complete),
                _ => (o.invoke, None),
            })
    };
    let name = log
        .taken
        .borrow()
        .get(snap)
        .map_or(String::new(), |t| t.cut.name.clone());
    let mut bad = Vec::new();
    for r in log.reads.borrow().iter().filter(|r| r.snap == snap) {
        let Some(Ok(last)) = image.get(r.block as usize) else {
            continue;
        };
        let x = match &r.value {
            Ok(x) if x == last => continue,
            Ok(x) => *x,
            Err(why) => {
                bad.push(format!(
                    "{name}: a read of block {} at {:?} returned bytes no write produced: {why}",
                    r.block, r.invoke
                ));
                continue;
            }
        };
        // The image's value `last` may have landed after the read began
        // only if it was not acknowledged before; and `x` must be a value
        // that may precede it.
        let late = *last != 0
            && write(r.block, *last).is_some_and(|(_, a)| a.is_none_or(|a| a >= r.invoke));
        let before = x == 0
            || write(r.block, x).is_some_and(|(xi, _)| {
                write(r.block, *last).is_some_and(|(_, la)| la.is_none_or(|la| la >= xi))
            });
        if !(late && before) {
            bad.push(format!(
                "{name}: a read of block {} at {:?} under the faults returned {}, but the snapshot reads #{last} after healing",
                r.block,
                r.invoke,
                if x == 0 { "zeros".to_string() } else { format!("#{x}") }
            ));
        }
    }
    bad.truncate(8);
    bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Op;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn w(block: u32, id: u64, a: u64, b: Option<u64>) -> Op {
        Op::test_write(0, block, id, a, b)
    }

    fn log_with(reads: &[(u32, u64, u64)]) -> SnapLog {
        let log = SnapLog::default();
        log.taken.borrow_mut().push(Taken {
            volume: "v",
            name: "s".into(),
            id: 1,
            cut: Cut {
                name: "v@s".into(),
                start: ms(100),
                end: Some(ms(110)),
            },
            removed: false,
            protected: false,
        });
        for (block, value, at) in reads {
            log.reads.borrow_mut().push(SnapRead {
                snap: 0,
                block: *block,
                invoke: ms(*at),
                value: Ok(*value),
            });
        }
        log
    }

    #[test]
    fn a_snapshot_read_under_faults_must_match_its_final_image() {
        // Block 0: #1 acknowledged at 10; #2 invoked at 105 (before the
        // create returned), acknowledged only at 300.
        let ops = [w(0, 1, 0, Some(10)), w(0, 2, 105, Some(300))];
        let image = [Ok(2)];
        // Before #2 was acknowledged the snapshot may still read #1.
        let log = log_with(&[(0, 1, 200), (0, 2, 250)]);
        let v = check_snap_reads(&ops, &log, 0, &image);
        assert!(v.is_empty(), "{v:?}");
        // Once #2 was acknowledged, reading #1 went back; a value never
        // written to the block is wrong at any time.
        let log = log_with(&[(0, 1, 400)]);
        assert_eq!(check_snap_reads(&ops, &log, 0, &image).len(), 1);
        let log = log_with(&[(0, 7, 200)]);
        assert_eq!(check_snap_reads(&ops, &log, 0, &image).len(), 1);
    }

    #[test]
    fn a_clone_reads_its_parent_where_it_did_not_write() {
        let hist = History::default();
        let log = CloneLog::default();
        log.tried.borrow_mut().insert(1);
        let parent = [Ok(5), Ok(6), Ok(0)];
        // Block 1's one write failed: parent or that write; block 0 and 2
        // untouched: the parent's.
        assert!(check_clone(&hist, &log, &[Ok(5), Ok(6), Ok(0)], &parent).is_empty());
        let v = check_clone(&hist, &log, &[Ok(0), Ok(6), Ok(5)], &parent);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("never wrote"), "{v:?}");
        let v = check_clone(&hist, &log, &[Ok(5), Ok(9), Ok(0)], &parent);
        assert!(v[0].contains("one write to it failed"), "{v:?}");
    }
}
