//! Snapshots in the store: redirect-on-write clones, snapshot reads, holes,
//! deletes, trimming, diffs, and all of it across checkpoints, reopens and
//! power failures, checked against an in-memory model.

mod common;

use std::collections::BTreeMap;

use common::{Harness, OBJECT_BLOCKS, block, blocks};
use pontoon_store::{CloneImage, HEAD, MemDevice, SnapImage, StoreError};
use pontoon_types::{BLOCK_SIZE, ObjectId, Version, VolumeId, mix64};
use proptest::prelude::*;

const VOL: u64 = 5;
const OBJ_BYTES: u64 = OBJECT_BLOCKS as u64 * BLOCK_SIZE as u64;

type Blocks = BTreeMap<u32, u64>;
/// A write issued by a writer: object, first block, count, seed, acknowledged.
type Logged = (ObjectId, u32, u32, u64, bool);

/// What the volume's objects hold now and at every live snapshot.
#[derive(Clone, Debug, Default)]
struct SnapModel {
    seq: u64,
    head: BTreeMap<ObjectId, Blocks>,
    cuts: BTreeMap<u64, BTreeMap<ObjectId, Blocks>>,
    versions: BTreeMap<ObjectId, Version>,
    /// Objects written under the current sequence since their last delete:
    /// a write under an older one counts under it (and is safe to model).
    seen: BTreeMap<ObjectId, u64>,
}

impl SnapModel {
    fn snapshot(&mut self) -> u64 {
        self.seq += 1;
        self.cuts.insert(self.seq, self.head.clone());
        self.seq
    }

    fn write(&mut self, oid: ObjectId, start: u32, n: u32, seed: u64, v: Version) {
        let o = self.head.entry(oid).or_default();
        for i in 0..n {
            o.insert(start + i, seed * 1000 + i as u64);
        }
        self.versions.insert(oid, v);
        self.seen.insert(oid, self.seq);
    }

    fn discard(&mut self, oid: ObjectId, start: u32, n: u32, v: Version) {
        if let Some(o) = self.head.get_mut(&oid) {
            o.retain(|b, _| *b < start || *b >= start + n);
            self.versions.insert(oid, v);
        }
    }

    fn delete(&mut self, oid: ObjectId) {
        self.seen.remove(&oid);
        self.head.remove(&oid);
        self.versions.remove(&oid);
    }

    fn live(&self) -> Vec<u64> {
        self.cuts.keys().copied().collect()
    }

    fn head_blocks(&self) -> u64 {
        self.head.values().map(|b| b.len() as u64).sum()
    }
}

fn expected(m: Option<&Blocks>) -> Vec<u8> {
    let mut out = vec![0u8; OBJ_BYTES as usize];
    for (b, s) in m.into_iter().flatten() {
        let at = *b as usize * BLOCK_SIZE;
        out[at..at + BLOCK_SIZE].copy_from_slice(&block(*s));
    }
    out
}

fn differing(got: &[u8], want: &[u8]) -> Vec<usize> {
    (0..OBJECT_BLOCKS as usize)
        .filter(|b| {
            got[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE] != want[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE]
        })
        .collect()
}

/// Every object's head and every live snapshot read as the model says;
/// space adds up exactly (no leak, nothing counted twice).
fn check(h: &mut Harness, m: &SnapModel, universe: &[ObjectId], what: &str) {
    for oid in universe {
        let s = h.store.clone();
        let got = h.run(s.read(*oid, 0, OBJ_BYTES)).expect("head read");
        let want = expected(m.head.get(oid));
        assert!(
            got.data[..] == want[..],
            "{what}: head of {oid}: blocks {:?} differ",
            differing(&got.data, &want)
        );
        assert_eq!(
            h.store.version(*oid),
            m.versions.get(oid).copied(),
            "{what}: version of {oid}"
        );
        for (id, cut) in &m.cuts {
            let got = h
                .run(s.read_snap(*oid, *id, 0, OBJ_BYTES))
                .expect("snapshot read");
            let want = expected(cut.get(oid));
            assert!(
                got.data[..] == want[..],
                "{what}: snapshot {id} of {oid}: blocks {:?} differ",
                differing(&got.data, &want)
            );
        }
    }
    let listed: Vec<ObjectId> = h.store.list().into_iter().map(|(o, _)| o).collect();
    let want: Vec<ObjectId> = m.head.keys().copied().collect();
    assert_eq!(listed, want, "{what}: listed objects");
    let usage = h.store.volume_usage();
    let (blocks, snap_blocks) = usage
        .iter()
        .fold((0, 0), |(b, s), (_, u)| (b + u.blocks, s + u.snap_blocks));
    assert_eq!(blocks, m.head_blocks(), "{what}: head blocks counted");
    let st = h.store.stats();
    assert_eq!(
        st.used_bytes,
        (blocks + snap_blocks) * BLOCK_SIZE as u64,
        "{what}: every used block is owned by exactly one head or clone entry"
    );
}

/// After a trim with no snapshot left, no clone holds anything. (Between a
/// snapshot's removal and the trim, writes under its sequence may still
/// keep blocks for it: the store learns of removals only from the trim.)
fn assert_no_snapshot_space(h: &Harness, what: &str) {
    let snap: u64 = h
        .store
        .volume_usage()
        .iter()
        .map(|(_, u)| u.snap_blocks)
        .sum();
    assert_eq!(snap, 0, "{what}: no snapshot left, yet clones hold blocks");
    assert_eq!(h.store.stats().snapshot_bytes, 0, "{what}");
    assert!(h.store.snap_usage(VolumeId(VOL)).is_empty(), "{what}");
}

/// Trims every clone the model's live snapshots no longer need.
fn trim(h: &mut Harness, m: &SnapModel) -> pontoon_store::TrimProgress {
    let s = h.store.clone();
    let p = h
        .run(s.trim_snaps(VolumeId(VOL), &m.live(), m.seq, usize::MAX))
        .expect("trim");
    if m.cuts.is_empty() {
        assert_no_snapshot_space(h, "after trimming every snapshot");
    }
    p
}

fn oid(i: u64) -> ObjectId {
    ObjectId::new(VOL, i)
}

fn w(h: &mut Harness, m: &mut SnapModel, o: ObjectId, start: u32, n: u32, seed: u64) {
    let v = Version::new(1, seed);
    let s = h.store.clone();
    h.run(s.write_snap(o, start as u64 * 4096, blocks(seed, n), v, m.seq))
        .expect("write");
    m.write(o, start, n, seed, v);
}

#[test]
fn a_snapshot_reads_the_old_data_while_the_head_reads_the_new() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(1);
    w(&mut h, &mut m, o, 0, 8, 1);
    let snap = m.snapshot();
    w(&mut h, &mut m, o, 2, 3, 2);
    check(&mut h, &m, &[o], "after one overwrite");
    let info = h.store.snaps(o).expect("snapshot state");
    assert_eq!(info.clones.len(), 1);
    assert_eq!(info.clones[0].id, snap);
    assert_eq!(
        info.clones[0].blocks, 3,
        "only the replaced blocks moved, no copy"
    );
    // A second overwrite of the same blocks keeps nothing more.
    w(&mut h, &mut m, o, 2, 3, 3);
    assert_eq!(h.store.snaps(o).unwrap().clones[0].blocks, 3);
    check(&mut h, &m, &[o], "after a second overwrite");
}

#[test]
fn blocks_written_after_a_snapshot_read_as_zeros_in_it() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let (o, fresh) = (oid(1), oid(2));
    w(&mut h, &mut m, o, 0, 2, 1);
    m.snapshot();
    w(&mut h, &mut m, o, 10, 4, 2);
    w(&mut h, &mut m, fresh, 0, 4, 3);
    check(&mut h, &m, &[o, fresh], "holes");
    assert_eq!(h.store.snaps(o).unwrap().clones[0].holes, 4);
    assert!(
        h.store.snaps(fresh).unwrap().clones[0].complete,
        "born after the snapshot"
    );
}

#[test]
fn several_snapshots_each_read_their_own_cut() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let universe: Vec<ObjectId> = (0..3).map(oid).collect();
    let mut seed = 1;
    for round in 0..6 {
        for (i, o) in universe.iter().enumerate() {
            let start = (round * 7 + i as u32 * 5) % 50;
            w(&mut h, &mut m, *o, start, 1 + round % 9, seed);
            seed += 1;
        }
        m.snapshot();
        w(&mut h, &mut m, universe[0], 40, 2, seed);
        seed += 1;
        // A write under an older sequence (a client that has not seen the
        // snapshot yet) counts under the object's newer one: once the
        // object has been written after the snapshot, it stays out of it.
        let v = Version::new(1, seed);
        let s = h.store.clone();
        h.run(s.write_snap(universe[0], 0, blocks(seed, 1), v, m.seq.saturating_sub(1)))
            .unwrap();
        m.write(universe[0], 0, 1, seed, v);
        seed += 1;
    }
    check(&mut h, &m, &universe, "six snapshots");
}

/// A client that has not seen the newest snapshot writes under the older
/// sequence: the store counts it under the object's sequence (as Ceph
/// does), so an object already written after the snapshot keeps the
/// snapshot intact, and one not yet written lets the write in (the write
/// was issued before the snapshot, as far as the store can know).
#[test]
fn a_write_under_an_older_sequence_counts_under_the_objects_sequence() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let (a, b) = (oid(1), oid(2));
    w(&mut h, &mut m, a, 0, 4, 1);
    w(&mut h, &mut m, b, 0, 4, 2);
    let snap = m.snapshot();
    w(&mut h, &mut m, a, 0, 1, 3);
    let s = h.store.clone();
    for (o, seed) in [(a, 4), (b, 5)] {
        h.run(s.write_snap(o, 4096, blocks(seed, 1), Version::new(1, seed), 0))
            .unwrap();
    }
    m.write(a, 1, 1, 4, Version::new(1, 4));
    m.write(b, 1, 1, 5, Version::new(1, 5));
    // b's stale write landed in the snapshot too.
    m.cuts
        .get_mut(&snap)
        .unwrap()
        .get_mut(&b)
        .unwrap()
        .insert(1, 5000);
    check(&mut h, &m, &[a, b], "stale writers");
}

#[test]
fn a_discard_after_a_snapshot_keeps_the_data_for_the_snapshot() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(1);
    w(&mut h, &mut m, o, 0, 16, 1);
    m.snapshot();
    let v = Version::new(1, 9);
    let s = h.store.clone();
    h.run(s.discard_snap(o, 4 * 4096, 8 * 4096, v, m.seq))
        .unwrap();
    m.discard(o, 4, 8, v);
    check(&mut h, &m, &[o], "discard");
    assert_eq!(h.store.snaps(o).unwrap().clones[0].blocks, 8);
    assert_eq!(h.store.snaps(o).unwrap().clones[0].holes, 0);
}

/// Deleting the head keeps what snapshots read; the object is gone for
/// head reads, listings and versions, and a later write creates a new head
/// that the older snapshots do not see.
#[test]
fn a_deleted_head_lives_on_for_its_snapshots() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(1);
    w(&mut h, &mut m, o, 0, 6, 1);
    m.snapshot();
    w(&mut h, &mut m, o, 3, 6, 2);
    m.snapshot();
    let s = h.store.clone();
    h.run(s.delete_snap(o, Version::new(1, 3), m.seq)).unwrap();
    m.delete(o);
    check(&mut h, &m, &[o], "deleted head");
    let s = h.store.clone();
    assert!(
        matches!(h.run(s.read_object(o)), Ok(None)),
        "no head to recover"
    );
    let info = h.store.snaps(o).unwrap();
    assert!(!info.has_head);
    w(&mut h, &mut m, o, 1, 2, 4);
    check(&mut h, &m, &[o], "recreated head");
    // Removing every snapshot leaves only the new head.
    m.cuts.clear();
    trim(&mut h, &m);
    check(&mut h, &m, &[o], "trimmed");
    // Deleting without snapshots removes the object entirely.
    let s = h.store.clone();
    h.run(s.delete_snap(o, Version::new(1, 5), m.seq)).unwrap();
    m.delete(o);
    check(&mut h, &m, &[o], "deleted for good");
    assert_eq!(h.store.snaps(o), None);
    let u = h.store.volume_usage();
    assert!(u.is_empty(), "nothing left: {u:?}");
}

/// Builds three snapshots with overlapping overwrites, discards and a
/// delete, then removes them in every order: the rest read the same, and
/// once all are gone exactly the head's blocks are allocated.
#[test]
fn trimming_snapshots_in_any_order_keeps_the_others_and_frees_exactly() {
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let mut h = Harness::fresh();
        let mut m = SnapModel::default();
        let universe: Vec<ObjectId> = (0..3).map(oid).collect();
        w(&mut h, &mut m, universe[0], 0, 32, 1);
        w(&mut h, &mut m, universe[1], 8, 8, 2);
        let mut ids = vec![m.snapshot()];
        w(&mut h, &mut m, universe[0], 4, 8, 3);
        w(&mut h, &mut m, universe[2], 0, 4, 4);
        ids.push(m.snapshot());
        w(&mut h, &mut m, universe[0], 0, 6, 5);
        let v = Version::new(1, 6);
        let s = h.store.clone();
        h.run(s.discard_snap(universe[1], 8 * 4096, 4 * 4096, v, m.seq))
            .unwrap();
        m.discard(universe[1], 8, 4, v);
        ids.push(m.snapshot());
        w(&mut h, &mut m, universe[0], 10, 20, 7);
        let s = h.store.clone();
        h.run(s.delete_snap(universe[2], Version::new(1, 8), m.seq))
            .unwrap();
        m.delete(universe[2]);
        check(&mut h, &m, &universe, "before trimming");
        for (k, &i) in order.iter().enumerate() {
            m.cuts.remove(&ids[i]);
            let p = trim(&mut h, &m);
            assert!(
                p.clones > 0 || k < 2,
                "order {order:?}: the last trim removes clones"
            );
            assert!(!p.more);
            check(
                &mut h,
                &m,
                &universe,
                &format!("order {order:?}, after removing {}", ids[i]),
            );
        }
        // Trimming again finds nothing.
        assert_eq!(trim(&mut h, &m), Default::default());
        assert!(h.store.snap_usage(VolumeId(VOL)).is_empty());
    }
}

#[test]
fn trimming_never_touches_clones_newer_than_the_callers_sequence() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(1);
    w(&mut h, &mut m, o, 0, 4, 1);
    let old = m.snapshot();
    w(&mut h, &mut m, o, 0, 4, 2);
    m.snapshot();
    w(&mut h, &mut m, o, 0, 4, 3);
    // The caller read the live list before the second snapshot existed.
    let s = h.store.clone();
    let p = h.run(s.trim_snaps(VolumeId(VOL), &[], old, 16)).unwrap();
    assert_eq!(p.clones, 1);
    m.cuts.remove(&old);
    check(&mut h, &m, &[o], "newer snapshot kept");
}

#[test]
fn per_snapshot_usage_counts_exclusive_blocks() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(1);
    w(&mut h, &mut m, o, 0, 10, 1);
    let a = m.snapshot();
    w(&mut h, &mut m, o, 0, 4, 2);
    let b = m.snapshot();
    w(&mut h, &mut m, o, 0, 8, 3);
    let u = h.store.snap_usage(VolumeId(VOL));
    assert_eq!(u.len(), 2);
    assert_eq!((u[0].id, u[0].blocks, u[0].exclusive_blocks), (a, 4, 4));
    // Clone b holds blocks 0..4 (seed 2, read by b only: a has its own)
    // and 4..8 (seed 1, read by a and b through it).
    assert_eq!((u[1].id, u[1].blocks, u[1].exclusive_blocks), (b, 8, 4));
    let vu = h.store.volume_usage();
    assert_eq!(vu[0].1.snap_blocks, 12);
    check(&mut h, &m, &[o], "usage");
}

/// Metadata-only diffs equal a brute-force comparison of reads.
fn check_diffs(h: &mut Harness, m: &SnapModel, universe: &[ObjectId]) {
    let mut views: Vec<Option<u64>> = vec![None];
    views.extend(m.cuts.keys().map(|k| Some(*k)));
    views.push(Some(HEAD));
    for o in universe {
        let read = |h: &mut Harness, v: Option<u64>| -> Vec<u8> {
            let s = h.store.clone();
            match v {
                None => vec![0u8; OBJ_BYTES as usize],
                Some(HEAD) => h.run(s.read(*o, 0, OBJ_BYTES)).unwrap().data.to_vec(),
                Some(id) => h
                    .run(s.read_snap(*o, id, 0, OBJ_BYTES))
                    .unwrap()
                    .data
                    .to_vec(),
            }
        };
        // Rolling the head back: applying the extents from the head to a
        // snapshot (its data where listed as data, zeros elsewhere) to the
        // head's bytes gives the snapshot's.
        let head = read(h, Some(HEAD));
        for to in m.cuts.keys() {
            let want = read(h, Some(*to));
            let mut got = head.clone();
            for e in h.store.diff_extents(*o, Some(HEAD), *to) {
                let r = e.range.start as usize..e.range.end as usize;
                if e.data {
                    got[r.clone()].copy_from_slice(&want[r]);
                } else {
                    got[r].fill(0);
                }
            }
            assert!(got == want, "{o}: rolling the head back to {to}");
        }
        for (i, from) in views.iter().enumerate() {
            for to in &views[i + 1..] {
                let to = to.expect("to is a snapshot or the head");
                let ranges = h.store.diff(*o, *from, to);
                let mut listed = vec![false; OBJECT_BLOCKS as usize];
                for r in &ranges {
                    for b in r.start / 4096..r.end / 4096 {
                        listed[b as usize] = true;
                    }
                }
                let (a, b) = (read(h, *from), read(h, Some(to)));
                // What the extents say `to` reads: zeros where not data.
                for e in h.store.diff_extents(*o, *from, to) {
                    let bytes = &b[e.range.start as usize..e.range.end as usize];
                    if !e.data {
                        assert!(
                            bytes.iter().all(|x| *x == 0),
                            "{o} {from:?}->{to}: {:?} listed as zeros",
                            e.range
                        );
                    }
                }
                for blk in 0..OBJECT_BLOCKS as usize {
                    let same = a[blk * BLOCK_SIZE..(blk + 1) * BLOCK_SIZE]
                        == b[blk * BLOCK_SIZE..(blk + 1) * BLOCK_SIZE];
                    // Every changed block is listed; a listed block may
                    // hold the same bytes only if it was rewritten.
                    assert!(
                        same || listed[blk],
                        "{o} {from:?}->{to}: block {blk} changed but not listed"
                    );
                    if from.is_none() {
                        let zero = b[blk * BLOCK_SIZE..(blk + 1) * BLOCK_SIZE]
                            .iter()
                            .all(|x| *x == 0);
                        assert_eq!(listed[blk], !zero, "{o} full diff to {to}: block {blk}");
                    }
                }
            }
        }
    }
}

#[test]
fn diffs_from_metadata_match_a_comparison_of_reads() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let universe: Vec<ObjectId> = (0..3).map(oid).collect();
    let mut x = 7u64;
    for step in 1..=60u64 {
        x = mix64(x);
        let o = universe[(x % 3) as usize];
        let start = ((x >> 8) % OBJECT_BLOCKS as u64) as u32;
        let n = (1 + (x >> 20) % 6).min((OBJECT_BLOCKS - start) as u64) as u32;
        match (x >> 32) % 10 {
            0 => {
                m.snapshot();
            }
            1 => {
                let v = Version::new(1, step);
                let s = h.store.clone();
                h.run(s.discard_snap(o, start as u64 * 4096, n as u64 * 4096, v, m.seq))
                    .unwrap();
                m.discard(o, start, n, v);
            }
            _ => w(&mut h, &mut m, o, start, n, step),
        }
    }
    check(&mut h, &m, &universe, "diff workload");
    check_diffs(&mut h, &m, &universe);
    // The diff is about the changed blocks, not the object.
    let o = oid(9);
    w(&mut h, &mut m, o, 0, 64, 100);
    let a = m.snapshot();
    w(&mut h, &mut m, o, 5, 2, 101);
    assert_eq!(h.store.diff(o, Some(a), HEAD), vec![5 * 4096..7 * 4096]);
}

/// Power failures after every step of a snapshot workload (writes,
/// discards, deletes, snapshots, trims): after each, every acknowledged
/// write and every snapshot reads as before, and space adds up.
#[test]
fn snapshots_survive_a_power_failure_after_every_step() {
    let universe: Vec<ObjectId> = (0..3).map(oid).collect();
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let mut x = 99u64;
    for step in 1..=80u64 {
        x = mix64(x);
        let o = universe[(x % 3) as usize];
        let start = ((x >> 8) % OBJECT_BLOCKS as u64) as u32;
        let n = (1 + (x >> 20) % 24).min((OBJECT_BLOCKS - start) as u64) as u32;
        let v = Version::new(2, step);
        let s = h.store.clone();
        match (x >> 32) % 12 {
            0 | 1 => {
                m.snapshot();
            }
            2 => {
                h.run(s.discard_snap(o, start as u64 * 4096, n as u64 * 4096, v, m.seq))
                    .unwrap();
                m.discard(o, start, n, v);
            }
            3 => {
                h.run(s.delete_snap(o, v, m.seq)).unwrap();
                m.delete(o);
            }
            4 => {
                if let Some(&id) = m.cuts.keys().nth(((x >> 40) % 3) as usize) {
                    m.cuts.remove(&id);
                    trim(&mut h, &m);
                }
            }
            5 => h.run(s.checkpoint()).unwrap(),
            _ => w(&mut h, &mut m, o, start, n, step),
        }
        drop(s);
        h = h.crash(step);
        check(
            &mut h,
            &m,
            &universe,
            &format!("after step {step} and a power failure"),
        );
    }
}

/// Enough writes under snapshots to wrap the journal several times: the
/// flusher moves journaled blocks that now belong to clones, checkpoints
/// carry the clones, and trimming the journal drops nothing a clone needs.
#[test]
fn clones_survive_journal_wraps_flusher_cycles_and_reopens() {
    let universe: Vec<ObjectId> = (0..6).map(oid).collect();
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let mut x = 4242u64;
    for step in 1..=5000u64 {
        x = mix64(x);
        let o = universe[(x % 6) as usize];
        let start = ((x >> 8) % OBJECT_BLOCKS as u64) as u32;
        let n = if (x >> 40) & 15 == 0 {
            (OBJECT_BLOCKS - start).min(24)
        } else {
            1
        };
        w(&mut h, &mut m, o, start, n, step);
        if step % 400 == 0 {
            m.snapshot();
            if m.cuts.len() > 4 {
                let id = *m.cuts.keys().nth(1).unwrap();
                m.cuts.remove(&id);
                trim(&mut h, &m);
            }
        }
        if step % 1250 == 0 {
            check(&mut h, &m, &universe, &format!("step {step}"));
            h = if step % 2500 == 0 {
                h.crash(step)
            } else {
                h.reopen()
            };
            check(&mut h, &m, &universe, &format!("step {step}, reopened"));
        }
    }
    let st = h.store.stats();
    assert!(st.checkpoints > 0 || st.replayed_records > 0);
    m.cuts.clear();
    trim(&mut h, &m);
    check(&mut h, &m, &universe, "all snapshots trimmed");
}

/// A power failure while writers run under snapshots, a removed snapshot
/// is trimmed and checkpoints stream: objects are their acknowledged
/// history or that plus the one operation in flight, every remaining
/// snapshot reads its cut exactly, and space adds up.
#[test]
fn power_failure_mid_flight_keeps_every_snapshot_exact() {
    for round in 0..40u64 {
        let seed = mix64(round + 11);
        let mut h = Harness::fresh();
        let mut m = SnapModel::default();
        let universe: Vec<ObjectId> = (0..4).map(oid).collect();
        // History with snapshots, all acknowledged.
        for (i, o) in universe.iter().enumerate() {
            w(&mut h, &mut m, *o, 0, 20, 1 + i as u64);
        }
        m.snapshot();
        for (i, o) in universe.iter().enumerate() {
            w(&mut h, &mut m, *o, 5 + i as u32, 10, 10 + i as u64);
        }
        m.snapshot();
        let s = h.store.clone();
        h.run(s.checkpoint()).unwrap();
        // One writer per object, a checkpointer, and a freeze.
        h.dev.set_yielding(true);
        h.dev.freeze_after(20 + seed % 300);
        let log: std::rc::Rc<std::cell::RefCell<Vec<Logged>>> = Default::default();
        let spawner = h.pool.spawner();
        use futures::task::LocalSpawnExt;
        for (wi, o) in universe.iter().copied().enumerate() {
            let store = h.store.clone();
            let log = log.clone();
            let seq = m.seq;
            spawner
                .spawn_local(async move {
                    let mut x = seed ^ wi as u64;
                    for k in 0..1000u64 {
                        x = mix64(x);
                        let start = (x % 60) as u32;
                        let n = 1 + ((x >> 10) % 4) as u32;
                        let sd = 100 + wi as u64 * 10_000 + k;
                        let idx = {
                            let mut l = log.borrow_mut();
                            l.push((o, start, n, sd, false));
                            l.len() - 1
                        };
                        let v = Version::new(3, sd);
                        if store
                            .write_snap(o, start as u64 * 4096, blocks(sd, n), v, seq)
                            .await
                            .is_err()
                        {
                            return;
                        }
                        log.borrow_mut()[idx].4 = true;
                    }
                })
                .unwrap();
        }
        let store = h.store.clone();
        spawner
            .spawn_local(async move { while store.checkpoint().await.is_ok() {} })
            .unwrap();
        // Snapshot 1 is removed; its trim runs beside the writers.
        let first = *m.cuts.keys().next().unwrap();
        m.cuts.remove(&first);
        let (store, live, seq) = (h.store.clone(), m.live(), m.seq);
        spawner
            .spawn_local(async move {
                // One object per call, until nothing is left (or the
                // device froze under it).
                while let Ok(p) = store.trim_snaps(VolumeId(VOL), &live, seq, 1).await {
                    if p.objects == 0 && !p.more {
                        break;
                    }
                }
            })
            .unwrap();
        h.pool.run_until_stalled();
        let img = h
            .dev
            .crash_image(|i| !mix64(seed ^ i as u64).is_multiple_of(3));
        let log = log.borrow().clone();
        drop(h);
        let mut h = Harness::open(MemDevice::from_image(img));
        // Snapshots are untouched by the later writes.
        for o in &universe {
            for (id, cut) in &m.cuts {
                let s = h.store.clone();
                let got = h.run(s.read_snap(*o, *id, 0, OBJ_BYTES)).unwrap();
                let want = expected(cut.get(o));
                assert!(
                    got.data[..] == want[..],
                    "round {round}: snapshot {id} of {o}: blocks {:?} differ",
                    differing(&got.data, &want)
                );
            }
            // Head: acknowledged writes, plus maybe the one in flight.
            let mut acked = m.head.get(o).cloned().unwrap_or_default();
            let mut pending = None;
            for &(lo, start, n, sd, done) in log.iter().filter(|l| l.0 == *o) {
                if done {
                    for i in 0..n {
                        acked.insert(start + i, sd * 1000 + i as u64);
                    }
                } else {
                    pending = Some((lo, start, n, sd));
                }
            }
            let s = h.store.clone();
            let got = h.run(s.read(*o, 0, OBJ_BYTES)).unwrap();
            let mut with = acked.clone();
            if let Some((_, start, n, sd)) = pending {
                for i in 0..n {
                    with.insert(start + i, sd * 1000 + i as u64);
                }
            }
            assert!(
                got.data[..] == expected(Some(&acked))[..]
                    || got.data[..] == expected(Some(&with))[..],
                "round {round}: head of {o} is neither its acknowledged state nor that plus its in-flight write"
            );
        }
        let usage = h.store.volume_usage();
        let total: u64 = usage.iter().map(|(_, u)| u.blocks + u.snap_blocks).sum();
        assert_eq!(
            h.store.stats().used_bytes,
            total * 4096,
            "round {round}: space adds up"
        );
    }
}

#[test]
fn replace_installs_a_head_and_keeps_the_clones() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(1);
    w(&mut h, &mut m, o, 0, 8, 1);
    m.snapshot();
    w(&mut h, &mut m, o, 0, 4, 2);
    let s = h.store.clone();
    let img = h.run(s.read_object(o)).unwrap().unwrap();
    h.run(s.replace(o, img.version, &img.extents)).unwrap();
    check(&mut h, &m, &[o], "replaced head");
    let h = h.crash(1);
    let mut h = h;
    check(&mut h, &m, &[o], "replaced head, after a power failure");
}

/// Recovery copies an object with its clones: the rebuilt replica reads
/// every snapshot and the head exactly like the source, also after a power
/// failure, and accounts the same space.
#[test]
fn a_replica_rebuilt_from_a_snapshot_image_reads_every_snapshot_alike() {
    let mut src = Harness::fresh();
    let mut m = SnapModel::default();
    let universe: Vec<ObjectId> = (0..4).map(oid).collect();
    let mut x = 31u64;
    for step in 1..=120u64 {
        x = mix64(x);
        let o = universe[(x % 4) as usize];
        let start = ((x >> 8) % OBJECT_BLOCKS as u64) as u32;
        let n = (1 + (x >> 20) % 20).min((OBJECT_BLOCKS - start) as u64) as u32;
        let s = src.store.clone();
        match (x >> 32) % 12 {
            0 => {
                m.snapshot();
            }
            1 => {
                let v = Version::new(1, step);
                src.run(s.discard_snap(o, start as u64 * 4096, n as u64 * 4096, v, m.seq))
                    .unwrap();
                m.discard(o, start, n, v);
            }
            2 if step > 100 => {
                src.run(s.delete_snap(o, Version::new(1, step), m.seq))
                    .unwrap();
                m.delete(o);
            }
            _ => w(&mut src, &mut m, o, start, n, step),
        }
    }
    check(&mut src, &m, &universe, "source");
    // The target holds stale copies (with snapshot state of its own).
    let mut dst = Harness::fresh();
    let mut stale = SnapModel::default();
    for o in &universe {
        w(&mut dst, &mut stale, *o, 0, 10, 9);
    }
    stale.snapshot();
    for o in &universe {
        w(&mut dst, &mut stale, *o, 0, 5, 10);
    }
    for o in &universe {
        let s = src.store.clone();
        let img = src
            .run(s.read_object_snaps(*o))
            .unwrap()
            .expect("object exists");
        let d = dst.store.clone();
        dst.run(d.replace_snaps(*o, &img)).unwrap();
        assert_eq!(dst.store.snaps(*o), src.store.snaps(*o), "{o}: same clones");
    }
    check(&mut dst, &m, &universe, "rebuilt replica");
    let mut dst = dst.crash(5);
    check(
        &mut dst,
        &m,
        &universe,
        "rebuilt replica after a power failure",
    );
    assert_eq!(dst.store.volume_usage(), src.store.volume_usage());
    m.cuts.clear();
    trim(&mut dst, &m);
    check(&mut dst, &m, &universe, "rebuilt replica, trimmed");
}

/// An object fragmented under many snapshots (every other block rewritten
/// between them, holes where a clone saw nothing) needs more entries than
/// one journal record holds: its copy is installed as a chain of records,
/// and reads every snapshot alike, also after a power failure.
#[test]
fn a_copy_larger_than_one_record_is_installed_whole() {
    let mut src = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(7);
    let alternate = |h: &mut Harness, m: &mut SnapModel, odd: u32, seed: u64| {
        for b in (odd..OBJECT_BLOCKS).step_by(2) {
            w(h, m, o, b, 1, seed + u64::from(b));
        }
    };
    w(&mut src, &mut m, o, 0, OBJECT_BLOCKS / 2, 1);
    for k in 0..24u32 {
        m.snapshot();
        alternate(&mut src, &mut m, k % 2, 1000 * u64::from(k + 1));
    }
    check(&mut src, &m, &[o], "source");
    let s = src.store.clone();
    let img = src.run(s.read_object_snaps(o)).unwrap().expect("held");
    let ranges: usize = img
        .clones
        .iter()
        .map(|c| c.extents.len() + c.holes.len())
        .sum::<usize>()
        + img.head.as_ref().map_or(0, Vec::len);
    assert!(ranges > 512, "{ranges} ranges: more than one record holds");
    let mut dst = Harness::fresh();
    let d = dst.store.clone();
    let records = dst.store.stats().records;
    dst.run(d.replace_snaps(o, &img))
        .expect("installed as a chain");
    assert!(
        dst.store.stats().records >= records + 2,
        "a chain of records"
    );
    assert_eq!(dst.store.snaps(o), src.store.snaps(o));
    check(&mut dst, &m, &[o], "copy");
    let mut dst = dst.crash(9);
    check(&mut dst, &m, &[o], "copy after a power failure");
    assert_eq!(dst.store.volume_usage(), src.store.volume_usage());
}

/// A headless object whose newest clones were trimmed keeps a sequence
/// above its newest clone: the copy has the same, so later writes open
/// (or do not open) the same clones on both.
#[test]
fn a_headless_copy_keeps_the_sequence_beyond_its_newest_clone() {
    let mut src = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(2);
    w(&mut src, &mut m, o, 0, 6, 1);
    m.snapshot();
    w(&mut src, &mut m, o, 2, 2, 2);
    m.snapshot();
    let s = src.store.clone();
    src.run(s.delete_snap(o, Version::new(1, 3), m.seq))
        .unwrap();
    m.delete(o);
    m.cuts.remove(&2);
    trim(&mut src, &m);
    let info = src.store.snaps(o).expect("snapshot state");
    assert!(!info.has_head);
    assert_eq!(info.seq, 2);
    assert_eq!(
        info.clones.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![1]
    );
    let img = src.run(s.read_object_snaps(o)).unwrap().expect("held");
    let mut dst = Harness::fresh();
    let d = dst.store.clone();
    dst.run(d.replace_snaps(o, &img)).unwrap();
    assert_eq!(dst.store.snaps(o), src.store.snaps(o));
    assert_eq!(dst.store.held_version(o), Some(Version::new(1, 3)));
    assert_eq!(dst.store.version(o), None, "no head");
    check(&mut dst, &m, &[o], "headless copy");
    let mut dst = dst.crash(3);
    assert_eq!(
        dst.store.snaps(o),
        src.store.snaps(o),
        "after a power failure"
    );
    check(&mut dst, &m, &[o], "headless copy after a power failure");
}

/// Images come from peers now: a bad one is refused with
/// `InvalidArgument` before anything changes (no block leaks, the old copy
/// stays), whatever is wrong with it.
#[test]
fn a_malformed_snapshot_image_is_refused_and_changes_nothing() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let o = oid(3);
    w(&mut h, &mut m, o, 0, 8, 1);
    m.snapshot();
    w(&mut h, &mut m, o, 0, 4, 2);
    let s = h.store.clone();
    let good = || -> SnapImage {
        let data = |seed: u64, n: u32| blocks(seed, n);
        SnapImage {
            version: Version::new(2, 1),
            seq: 3,
            head: Some(vec![(0, data(7, 2))]),
            clones: vec![
                CloneImage {
                    id: 1,
                    complete: false,
                    extents: vec![(0, data(8, 2)), (16384, data(9, 1))],
                    holes: vec![8192..12288, 24576..28672],
                },
                CloneImage {
                    id: 3,
                    complete: true,
                    extents: vec![(4096, data(10, 1))],
                    holes: Vec::new(),
                },
            ],
        }
    };
    let used = h.store.stats().used_bytes;
    let snaps = h.store.snaps(o);
    let bad: Vec<(&str, SnapImage)> = vec![
        ("a clone newer than the sequence", {
            let mut i = good();
            i.seq = 2;
            i
        }),
        ("clone ids that do not ascend", {
            let mut i = good();
            i.clones.swap(0, 1);
            i
        }),
        ("a clone id of 0", {
            let mut i = good();
            i.clones[0].id = 0;
            i
        }),
        ("the head's id as the sequence", {
            let mut i = good();
            i.seq = HEAD;
            i
        }),
        ("no head and an incomplete newest clone", {
            let mut i = good();
            i.head = None;
            i.clones[1].complete = false;
            i
        }),
        ("a hole that ends before it starts", {
            let mut i = good();
            #[allow(clippy::reversed_empty_ranges)]
            let r = 8192..4096;
            i.clones[0].holes = vec![r];
            i
        }),
        ("a hole outside the object", {
            let mut i = good();
            i.clones[0].holes = vec![24576..28672, OBJ_BYTES..OBJ_BYTES + 4096];
            i
        }),
        ("overlapping extents in a later layer", {
            let mut i = good();
            i.head = Some(vec![(0, blocks(11, 2)), (4096, blocks(12, 1))]);
            i
        }),
        ("an extent past the object's end", {
            let mut i = good();
            i.head = Some(vec![(OBJ_BYTES - 4096, blocks(13, 2))]);
            i
        }),
        ("an unaligned extent", {
            let mut i = good();
            i.clones[1].extents = vec![(100, blocks(14, 1))];
            i
        }),
    ];
    for (what, img) in bad {
        match h.run(s.replace_snaps(o, &img)) {
            Err(StoreError::InvalidArgument(_)) => {}
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(h.store.snaps(o), snaps, "{what}: clones unchanged");
        assert_eq!(h.store.stats().used_bytes, used, "{what}: no block kept");
        check(&mut h, &m, &[o], what);
    }
    h.run(s.replace_snaps(o, &good()))
        .expect("the good image installs");
    let info = h.store.snaps(o).expect("snapshot state");
    assert_eq!((info.seq, info.clones.len()), (3, 2));
}

/// Purging removes an object with everything its snapshots held, headless
/// or not, and frees every block, also across a power failure.
#[test]
fn a_purge_removes_the_head_and_every_clone() {
    let mut h = Harness::fresh();
    let mut m = SnapModel::default();
    let (a, b) = (oid(4), oid(5));
    w(&mut h, &mut m, a, 0, 8, 1);
    w(&mut h, &mut m, b, 0, 8, 2);
    m.snapshot();
    w(&mut h, &mut m, a, 0, 4, 3);
    w(&mut h, &mut m, b, 2, 4, 4);
    let s = h.store.clone();
    h.run(s.delete_snap(b, Version::new(1, 5), m.seq)).unwrap();
    assert!(h.store.snaps(b).is_some_and(|i| !i.has_head));
    assert_eq!(h.store.list_held_where(|_| true).len(), 2);
    for o in [a, b] {
        h.run(s.purge(o, Version::new(1, 6))).unwrap();
    }
    let gone = |h: &Harness, what: &str| {
        for o in [a, b] {
            assert_eq!(h.store.snaps(o), None, "{what}: {o}");
            assert_eq!(h.store.held_version(o), None, "{what}: {o}");
        }
        assert!(h.store.list_held_where(|_| true).is_empty(), "{what}");
        assert_eq!(h.store.stats().used_bytes, 0, "{what}: every block freed");
        assert!(h.store.volume_usage().is_empty(), "{what}");
    };
    gone(&h, "purged");
    let h = h.crash(7);
    gone(&h, "purged, after a power failure");
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        obj: u64,
        start: u32,
        n: u32,
        stale: bool,
    },
    Discard {
        obj: u64,
        start: u32,
        n: u32,
    },
    Delete {
        obj: u64,
    },
    Snapshot,
    Trim {
        pick: usize,
    },
    Checkpoint,
    Reopen,
    PowerFail {
        seed: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let range = (0u32..OBJECT_BLOCKS).prop_flat_map(|s| (Just(s), 1..=(OBJECT_BLOCKS - s).min(30)));
    prop_oneof![
        10 => (0u64..4, range.clone(), any::<bool>()).prop_map(|(obj, (start, n), stale)| Op::Write { obj, start, n, stale }),
        3 => (0u64..4, range).prop_map(|(obj, (start, n))| Op::Discard { obj, start, n }),
        1 => (0u64..4).prop_map(|obj| Op::Delete { obj }),
        3 => Just(Op::Snapshot),
        2 => (0usize..4).prop_map(|pick| Op::Trim { pick }),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(|seed| Op::PowerFail { seed }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 300, ..ProptestConfig::default() })]

    /// Random writes, discards, deletes, snapshots, trims, checkpoints,
    /// reopens and power failures against the model, checked after every
    /// step: heads, every live snapshot, and exact space.
    #[test]
    fn snapshots_match_the_model(ops in proptest::collection::vec(op(), 1..50)) {
        let universe: Vec<ObjectId> = (0..4).map(oid).collect();
        let mut h = Harness::fresh();
        let mut m = SnapModel::default();
        for (step, op) in ops.into_iter().enumerate() {
            let v = Version::new(1, step as u64 + 1);
            let seed = step as u64 + 1;
            let s = h.store.clone();
            match op {
                Op::Write { obj, start, n, stale } => {
                    let o = universe[obj as usize];
                    let stale = stale && m.seen.get(&o) == Some(&m.seq);
                    let seq = if stale { m.seq.saturating_sub(1) } else { m.seq };
                    h.run(s.write_snap(universe[obj as usize], start as u64 * 4096, blocks(seed, n), v, seq)).unwrap();
                    m.write(universe[obj as usize], start, n, seed, v);
                }
                Op::Discard { obj, start, n } => {
                    h.run(s.discard_snap(universe[obj as usize], start as u64 * 4096, n as u64 * 4096, v, m.seq)).unwrap();
                    m.discard(universe[obj as usize], start, n, v);
                }
                Op::Delete { obj } => {
                    h.run(s.delete_snap(universe[obj as usize], v, m.seq)).unwrap();
                    m.delete(universe[obj as usize]);
                }
                Op::Snapshot => { m.snapshot(); }
                Op::Trim { pick } => {
                    if let Some(&id) = m.cuts.keys().nth(pick) {
                        m.cuts.remove(&id);
                        trim(&mut h, &m);
                    }
                }
                Op::Checkpoint => h.run(s.checkpoint()).unwrap(),
                Op::Reopen => { drop(s); h = h.reopen(); }
                Op::PowerFail { seed } => { drop(s); h = h.crash(seed); }
            }
            check(&mut h, &m, &universe, &format!("step {step}"));
        }
        check_diffs(&mut h, &m, &universe);
        m.cuts.clear();
        trim(&mut h, &m);
        check(&mut h, &m, &universe, "everything trimmed");
    }
}

/// Snapshot metadata (clones, holes) has no data block behind it, so the
/// checkpoint slot, sized per data block, bounds it: when it would
/// overflow, changes are refused with `NoSpace` (never a failed
/// checkpoint), and trimming makes room again.
#[test]
fn snapshot_metadata_that_would_overflow_the_checkpoint_is_refused() {
    let mut h = Harness::fresh();
    let universe: Vec<ObjectId> = (0..200).map(oid).collect();
    let s = h.store.clone();
    for (i, o) in universe.iter().enumerate() {
        h.run(s.write(*o, 0, blocks(i as u64 + 1, 1), Version::new(1, 1)))
            .unwrap();
    }
    let mut seq = 0u64;
    let refused = 'fill: loop {
        seq += 1;
        assert!(seq < 10_000, "the slot never filled");
        for o in &universe {
            // Discarding an unallocated block after a snapshot opens an
            // empty clone: metadata only.
            match h.run(s.discard_snap(*o, 8 * 4096, 4096, Version::new(1, seq + 1), seq)) {
                Ok(()) => {}
                Err(e) => break 'fill e,
            }
        }
    };
    assert!(
        matches!(&refused, pontoon_store::StoreError::NoSpace(m) if m.contains("checkpoint slot")),
        "{refused}"
    );
    assert!(seq > 10, "filled after {seq} snapshots");
    assert!(h.store.failure().is_none());
    h.run(s.checkpoint())
        .expect("the checkpoint still fits its slot");
    assert!(h.store.stats().snapshot_meta_bytes > 0);
    // Nothing is live any more: trimming frees the metadata.
    let p = h
        .run(s.trim_snaps(VolumeId(VOL), &[], seq, usize::MAX))
        .unwrap();
    assert!(p.clones > 0);
    h.run(s.discard_snap(universe[0], 8 * 4096, 4096, Version::new(2, 1), seq + 1))
        .expect("room again after trimming");
    drop(s);
    let mut h = h.crash(3);
    let s = h.store.clone();
    let got = h.run(s.read(universe[7], 0, 4096)).unwrap();
    assert_eq!(&got.data[..], &block(8 * 1000)[..]);
}
