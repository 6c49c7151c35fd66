//! Property tests: random sequences of writes, overwrites, discards,
//! deletes, replaces, checkpoints, clean reopens and power failures, checked
//! after every step against an in-memory model.

mod common;

use common::{Harness, Model, OBJECT_BLOCKS, blocks, check};
use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, ObjectId, Version};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Write { obj: u64, start: u32, n: u32 },
    Discard { obj: u64, start: u32, n: u32 },
    Delete { obj: u64 },
    Replace { obj: u64, extents: Vec<(u32, u32)> },
    Checkpoint,
    Reopen,
    PowerFail { seed: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    let range = (0u32..OBJECT_BLOCKS).prop_flat_map(|s| (Just(s), 1..=(OBJECT_BLOCKS - s).min(40)));
    prop_oneof![
        10 => (0u64..5, range.clone()).prop_map(|(obj, (start, n))| Op::Write { obj, start, n }),
        3 => (0u64..5, range).prop_map(|(obj, (start, n))| Op::Discard { obj, start, n }),
        1 => (0u64..5).prop_map(|obj| Op::Delete { obj }),
        2 => (0u64..5, proptest::collection::vec((0u32..8, 1u32..8), 0..4)).prop_map(|(obj, raw)| {
            // Turn (gap, len) pairs into ordered, disjoint extents.
            let mut at = 0;
            let mut extents = vec![];
            for (gap, len) in raw {
                let s = at + gap;
                if s + len > OBJECT_BLOCKS { break; }
                extents.push((s, len));
                at = s + len;
            }
            Op::Replace { obj, extents }
        }),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(|seed| Op::PowerFail { seed }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model_through_reopens_and_power_failures(ops in proptest::collection::vec(op(), 1..40)) {
        let universe: Vec<ObjectId> = (0..5).map(|i| ObjectId::new(7 + i % 2, i)).collect();
        let mut h = Harness::fresh();
        let mut model = Model::default();
        for (step, op) in ops.into_iter().enumerate() {
            let v = Version::new(1, step as u64 + 1);
            let seed = step as u64 + 1;
            let s = h.store.clone();
            match op {
                Op::Write { obj, start, n } => {
                    let oid = universe[obj as usize];
                    h.run(s.write(oid, start as u64 * 4096, blocks(seed, n), v)).unwrap();
                    model.write(oid, start, n, seed, v);
                }
                Op::Discard { obj, start, n } => {
                    let oid = universe[obj as usize];
                    h.run(s.discard(oid, start as u64 * 4096, n as u64 * 4096, v)).unwrap();
                    model.discard(oid, start, n, v);
                }
                Op::Delete { obj } => {
                    let oid = universe[obj as usize];
                    h.run(s.delete(oid, v)).unwrap();
                    model.delete(oid);
                }
                Op::Replace { obj, extents } => {
                    let oid = universe[obj as usize];
                    let mut ex: Vec<(u64, AlignedBuf)> = vec![];
                    model.delete(oid);
                    model.objects.insert(oid, (v, Default::default()));
                    for (i, (s0, n)) in extents.iter().enumerate() {
                        let sd = seed * 100 + i as u64;
                        ex.push((*s0 as u64 * BLOCK_SIZE as u64, blocks(sd, *n)));
                        model.write(oid, *s0, *n, sd, v);
                    }
                    h.run(s.replace(oid, v, &ex)).unwrap();
                }
                Op::Checkpoint => h.run(s.checkpoint()).unwrap(),
                Op::Reopen => { drop(s); h = h.reopen(); }
                Op::PowerFail { seed } => { drop(s); h = h.crash(seed); }
            }
            check(&mut h, &model, &universe);
        }
    }
}

#[test]
fn journal_wraps_many_times_and_survives_reopen_and_power_loss() {
    // 16 MiB journal; ~6000 single-block writes plus headers wrap it several
    // times and force many flusher cycles.
    let universe: Vec<ObjectId> = (0..8).map(|i| ObjectId::new(1, i)).collect();
    let mut h = Harness::fresh();
    let mut model = Model::default();
    let mut x = 12345u64;
    for step in 1..=6000u64 {
        x = pontoon_types::mix64(x);
        let oid = universe[(x % 8) as usize];
        let start = ((x >> 8) % OBJECT_BLOCKS as u64) as u32;
        let n = if x >> 40 & 15 == 0 {
            (OBJECT_BLOCKS - start).min(24)
        } else {
            1
        };
        let v = Version::new(2, step);
        let s = h.store.clone();
        h.run(s.write(oid, start as u64 * 4096, blocks(step, n), v))
            .unwrap();
        model.write(oid, start, n, step, v);
        if step % 1500 == 0 {
            check(&mut h, &model, &universe);
            h = if step % 3000 == 0 {
                h.crash(step)
            } else {
                h.reopen()
            };
            check(&mut h, &model, &universe);
        }
    }
    let st = h.store.stats();
    assert!(st.checkpoints > 0 || st.replayed_records > 0);
    check(&mut h, &model, &universe);
}
