//! Snapshot space for operators and scrub: exclusive blocks per live
//! snapshot, and an object's clones as they will be once trimmed, which a
//! copy trimmed early and one trimmed late agree on.

mod common;

use common::{Harness, blocks};
use pontoon_store::SnapSpace;
use pontoon_types::{ObjectId, Version, VolumeId};

const VOL: u64 = 7;

fn oid(i: u64) -> ObjectId {
    ObjectId::new(VOL, i)
}

fn write(h: &mut Harness, o: ObjectId, start: u32, n: u32, seed: u64, seq: u64) {
    let s = h.store.clone();
    h.run(s.write_snap(
        o,
        u64::from(start) * 4096,
        blocks(seed, n),
        Version::new(1, seed),
        seq,
    ))
    .expect("write");
}

fn trim(h: &mut Harness, live: &[u64], seq: u64) {
    let s = h.store.clone();
    let p = h
        .run(s.trim_snaps(VolumeId(VOL), live, seq, usize::MAX))
        .expect("trim");
    assert!(!p.more);
}

/// The same history on a store: snapshots 1, 2, 3 with overwrites between
/// and after, on two objects.
fn history(h: &mut Harness, upto: usize) {
    let steps: [&dyn Fn(&mut Harness); 4] = [
        &|h| {
            write(h, oid(0), 0, 16, 1, 0);
            write(h, oid(1), 0, 8, 2, 0);
        },
        &|h| write(h, oid(0), 0, 8, 3, 1),
        &|h| {
            write(h, oid(0), 4, 8, 4, 2);
            write(h, oid(1), 2, 4, 5, 2);
        },
        &|h| write(h, oid(0), 0, 16, 6, 3),
    ];
    for s in &steps[..upto] {
        s(h);
    }
}

#[test]
fn a_copy_trimmed_early_and_one_trimmed_late_show_scrub_the_same_clones() {
    // Early: snapshot 2 is removed after the third step and trimmed at
    // once, then the last writes land. Late: the same writes, the trim
    // only at the end.
    let mut early = Harness::fresh();
    history(&mut early, 3);
    trim(&mut early, &[1, 3], 3);
    let mut late = Harness::fresh();
    history(&mut late, 4);
    // `early` gets the fourth step after its trim.
    write(&mut early, oid(0), 0, 16, 6, 3);
    for o in [oid(0), oid(1)] {
        let (e, l) = (early.store.snaps(o), late.store.snaps(o));
        if o == oid(0) {
            // Object 1 has no clone of snapshot 2 alone.
            assert_ne!(
                e, l,
                "{o}: the raw clones differ (what scrub compared before)"
            );
        }
        assert_eq!(
            early.store.snaps_trimmed(o, &[1, 3], 3),
            late.store.snaps_trimmed(o, &[1, 3], 3),
            "{o}: as trimmed, they are the same"
        );
        assert_eq!(
            early.store.snaps_trimmed(o, &[1, 3], 3),
            e,
            "{o}: nothing left to trim"
        );
    }
    trim(&mut late, &[1, 3], 3);
    for o in [oid(0), oid(1)] {
        assert_eq!(
            early.store.snaps(o),
            late.store.snaps(o),
            "{o} after both trimmed"
        );
    }
}

#[test]
fn exclusive_space_belongs_to_the_one_live_snapshot_that_reads_a_clone() {
    let mut h = Harness::fresh();
    write(&mut h, oid(0), 0, 16, 1, 0);
    // Snapshots 1 and 2 taken with no write between: they share a clone.
    write(&mut h, oid(0), 0, 4, 2, 2);
    // Snapshot 3, then 8 blocks overwritten: 4 of them (4..8) were last
    // written before snapshot 1, so snapshots 1 and 2 also read them
    // through clone 3 (not exclusive); 0..4 are snapshot 3's alone.
    write(&mut h, oid(0), 0, 8, 3, 3);
    // Snapshot 4 reads the head everywhere: nothing exclusive.
    let space = h.store.snap_space(VolumeId(VOL), &[1, 2, 3, 4]);
    assert_eq!(
        space,
        vec![SnapSpace {
            id: 3,
            exclusive_blocks: 4
        }],
        "1 and 2 share clone 2; 4 holds nothing"
    );
    // Snapshot 2 removed: snapshot 1 alone reads clone 2's 4 blocks.
    let space = h.store.snap_space(VolumeId(VOL), &[1, 3, 4]);
    assert_eq!(
        space,
        vec![
            SnapSpace {
                id: 1,
                exclusive_blocks: 4
            },
            SnapSpace {
                id: 3,
                exclusive_blocks: 4
            }
        ]
    );
    // What trimming frees is what it said: remove 3, then 1.
    let before = h.store.volume_usage()[0].1.snap_blocks;
    trim(&mut h, &[1, 4], 4);
    let after = h.store.volume_usage()[0].1.snap_blocks;
    assert_eq!(
        before - after,
        4,
        "snapshot 3's exclusive blocks were freed"
    );
    assert_eq!(
        h.store
            .snap_space(VolumeId(VOL), &[1, 4])
            .iter()
            .map(|s| s.exclusive_blocks)
            .sum::<u64>(),
        after
    );
}
