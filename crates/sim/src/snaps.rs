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
use std::rc::Rc;
use std::time::Duration;

use pontoon_client::Volume;

use crate::cuts::Cut;
use crate::workload::{Shape, decode, offset_of};
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
            let oldest = log
                .taken
                .borrow()
                .iter()
                .position(|t| t.volume == v && !t.removed && t.cut.end.is_some());
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
            .read_at(at, crate::workload::BLOCK as u64)
            .await
            .map_err(|e| format!("reading block {b} of {spec}: {e}"))?;
        image.push(decode(&buf));
    }
    Ok(image)
}
