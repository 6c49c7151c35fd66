//! Breaking the store on purpose: power failures with concurrent writers in
//! flight, flipped bits, garbage after the journal's end, a full device.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{Harness, Model, OBJECT_BLOCKS, blocks, check};
use futures::task::LocalSpawnExt;
use pontoon_buf::AlignedBuf;
use pontoon_store::{MemDevice, StoreError};
use pontoon_types::{BLOCK_SIZE, ObjectId, Version, mix64};

/// One operation a writer issued, and whether it was acknowledged.
#[derive(Clone, Debug)]
enum Op {
    Write {
        oid: ObjectId,
        start: u32,
        n: u32,
        seed: u64,
        v: Version,
    },
    Discard {
        oid: ObjectId,
        start: u32,
        n: u32,
        v: Version,
    },
    Delete {
        oid: ObjectId,
    },
}

impl Op {
    fn oid(&self) -> ObjectId {
        match self {
            Op::Write { oid, .. } | Op::Discard { oid, .. } | Op::Delete { oid } => *oid,
        }
    }

    fn apply(&self, m: &mut Model) {
        match *self {
            Op::Write {
                oid,
                start,
                n,
                seed,
                v,
            } => m.write(oid, start, n, seed, v),
            Op::Discard { oid, start, n, v } => m.discard(oid, start, n, v),
            Op::Delete { oid } => m.delete(oid),
        }
    }
}

/// Four concurrent writers (each owning two objects) and a checkpointing
/// task run until the device "loses power" after a random number of
/// operations; in-flight and cached writes land torn. After reopening,
/// every object must equal its acknowledged history, or that history plus
/// the one operation that was in flight on it, applied whole.
#[test]
fn power_failure_with_writers_in_flight_loses_nothing_acknowledged() {
    let rounds = if std::env::var_os("PONTOON_LONG").is_some() {
        1000
    } else {
        150
    };
    for round in 0..rounds {
        let seed = mix64(round as u64 + 1);
        let mut h = Harness::fresh();
        // Pre-populate so the flusher and checkpoints have work.
        let universe: Vec<ObjectId> = (0..8).map(|i| ObjectId::new(3, i)).collect();
        h.dev.set_yielding(true);
        h.dev.freeze_after(50 + seed % 4000);
        let log: Rc<RefCell<Vec<(Op, bool)>>> = Rc::default();
        let spawner = h.pool.spawner();
        for w in 0..4u64 {
            let store = h.store.clone();
            let log = log.clone();
            let objs = [universe[w as usize * 2], universe[w as usize * 2 + 1]];
            spawner
                .spawn_local(async move {
                    let mut x = mix64(seed ^ (w + 1));
                    for i in 0..10_000u64 {
                        x = mix64(x);
                        let oid = objs[(x & 1) as usize];
                        let start = ((x >> 8) % OBJECT_BLOCKS as u64) as u32;
                        let n = match (x >> 20) % 8 {
                            0 => ((x >> 24) as u32 % 40 + 1).min(OBJECT_BLOCKS - start),
                            _ => 1,
                        };
                        let v = Version::new(1, w << 32 | (i + 1));
                        let op = match (x >> 30) % 20 {
                            0 => Op::Delete { oid },
                            1 | 2 => Op::Discard { oid, start, n, v },
                            _ => Op::Write {
                                oid,
                                start,
                                n,
                                seed: w << 32 | (i + 1),
                                v,
                            },
                        };
                        let idx = {
                            let mut l = log.borrow_mut();
                            l.push((op.clone(), false));
                            l.len() - 1
                        };
                        let r = match op {
                            Op::Write {
                                start, n, seed, v, ..
                            } => {
                                store
                                    .write(oid, start as u64 * 4096, blocks(seed, n), v)
                                    .await
                            }
                            Op::Discard { start, n, v, .. } => {
                                store
                                    .discard(oid, start as u64 * 4096, n as u64 * 4096, v)
                                    .await
                            }
                            Op::Delete { .. } => store.delete(oid, v).await,
                        };
                        r.expect("operation failed before the power cut");
                        log.borrow_mut()[idx].1 = true;
                    }
                })
                .unwrap();
        }
        let store = h.store.clone();
        spawner
            .spawn_local(async move { while store.checkpoint().await.is_ok() {} })
            .unwrap();
        h.pool.run_until_stalled();

        let keep_seed = mix64(seed ^ 0xabc);
        let img = h
            .dev
            .crash_image(|i| !mix64(keep_seed ^ i as u64).is_multiple_of(3));
        let log = log.borrow().clone();
        drop(h);
        let mut h = Harness::open(MemDevice::from_image(img));

        // Per object: acknowledged ops in order, plus at most one unacknowledged.
        let mut acked = Model::default();
        let mut pending: Vec<Op> = Vec::new();
        for (op, done) in &log {
            if *done {
                op.apply(&mut acked);
            } else {
                pending.push(op.clone());
            }
        }
        assert!(
            pending.len() <= 4,
            "each writer has at most one op in flight"
        );
        for oid in &universe {
            let s = h.store.clone();
            let got = h.run(s.read(*oid, 0, OBJECT_BLOCKS as u64 * 4096)).unwrap();
            let mut candidates = vec![acked.clone()];
            for p in pending.iter().filter(|p| p.oid() == *oid) {
                let mut m = acked.clone();
                p.apply(&mut m);
                candidates.push(m);
            }
            let ok = candidates.iter().any(|m| {
                m.expected(oid)[..] == got.data[..]
                    && m.objects.get(oid).map(|o| o.0) == h.store.version(*oid)
            });
            assert!(
                ok,
                "round {round} (seed {seed:#x}): object {oid} is neither its acknowledged state nor that plus its in-flight op"
            );
        }
    }
}

/// Finds the data-area offset of a block with exactly these contents.
fn find_block(dev: &MemDevice, data_start: u64, content: &[u8]) -> u64 {
    let img = dev.image();
    let start = (data_start as usize) * BLOCK_SIZE;
    (start..img.len())
        .step_by(BLOCK_SIZE)
        .find(|&at| &img[at..at + BLOCK_SIZE] == content)
        .expect("block not found in the data area") as u64
}

#[test]
fn flipped_bit_in_a_data_block_is_reported_not_returned() {
    let mut h = Harness::fresh();
    let oid = ObjectId::new(9, 1);
    let s = h.store.clone();
    h.run(s.write(oid, 0, blocks(5, 32), Version::new(1, 1)))
        .unwrap();
    h.run(s.write(oid, 40 * 4096, blocks(6, 1), Version::new(1, 2)))
        .unwrap();
    h.run(s.checkpoint()).unwrap();
    let data_start = h.store.layout().data_start;
    for (seed, blk) in [(5u64 * 1000 + 7, 7u32), (6 * 1000, 40)] {
        let at = find_block(&h.dev, data_start, &common::block(seed));
        let mut byte = h.dev.image()[at as usize + 100];
        byte ^= 0x04;
        h.dev.corrupt(at + 100, &[byte]);
        let err = h.run(s.read(oid, blk as u64 * 4096, 4096)).unwrap_err();
        match err {
            StoreError::Checksum { oid: o, block, .. } => {
                assert_eq!(o, oid);
                assert_eq!(block, blk);
            }
            e => panic!("expected a checksum error, got {e}"),
        }
    }
    // Untouched blocks still read, and the error is counted.
    let r = h.run(s.read(oid, 0, 4096)).unwrap();
    assert_eq!(&r.data[..], &common::block(5000)[..]);
    assert_eq!(h.store.stats().checksum_errors, 2);
}

#[test]
fn a_rotten_record_inside_the_journal_stops_the_store_from_opening() {
    let mut h = Harness::fresh();
    let oid = ObjectId::new(4, 2);
    let s = h.store.clone();
    for step in 1..=3u64 {
        h.run(s.write(
            oid,
            step * 4096,
            blocks(step * 10, 1),
            Version::new(1, step),
        ))
        .unwrap();
    }
    let dev = h.dev.clone();
    drop(h);
    // The first record's data block rots on the device; records 2 and 3
    // follow it, so this is not a write torn by a crash.
    let at = find_block(&dev, 1, &common::block(10 * 1000));
    let byte = dev.image()[at as usize + 7] ^ 0x20;
    dev.corrupt(at + 7, &[byte]);
    let img = MemDevice::from_image(dev.image());
    match futures::executor::block_on(pontoon_store::Store::open(img, None, 0)) {
        Err(StoreError::Corrupt(why)) => {
            assert!(why.contains("later records follow"), "{why}")
        }
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(_) => panic!("a store that lost acknowledged writes opened as if nothing happened"),
    }
}

#[test]
fn garbage_or_forged_records_after_the_journal_end_are_not_followed() {
    for variant in 0..3 {
        let mut h = Harness::fresh();
        let universe: Vec<ObjectId> = (0..3).map(|i| ObjectId::new(2, i)).collect();
        let mut model = Model::default();
        for step in 1..=50u64 {
            let oid = universe[(step % 3) as usize];
            let start = (step * 7 % OBJECT_BLOCKS as u64) as u32;
            let s = h.store.clone();
            h.run(s.write(
                oid,
                start as u64 * 4096,
                blocks(step, 1),
                Version::new(1, step),
            ))
            .unwrap();
            model.write(oid, start, 1, step, Version::new(1, step));
        }
        let (head_blk, head_lpos) = h.store.debug_journal_head();
        let dev = h.dev.clone();
        drop(h);
        let at = head_blk * BLOCK_SIZE as u64;
        match variant {
            0 => {
                // Random garbage.
                let junk: Vec<u8> = (0..3 * BLOCK_SIZE as u64).map(|i| mix64(i) as u8).collect();
                dev.corrupt(at, &junk);
            }
            1 => {
                // A block that starts like a record at the right position but
                // does not chain (and has a bad checksum).
                let mut b = vec![0u8; BLOCK_SIZE];
                b[..4].copy_from_slice(&0x4e52_4a50u32.to_le_bytes());
                b[8..16].copy_from_slice(&head_lpos.to_le_bytes());
                b[24..28].copy_from_slice(&1u32.to_le_bytes());
                dev.corrupt(at, &b);
            }
            _ => {
                // The tail of the last record zeroed: it was acknowledged, so
                // zero the block after it instead and check nothing changes.
                dev.corrupt(at, &[0u8; BLOCK_SIZE]);
            }
        }
        let mut h = Harness::open(MemDevice::from_image(dev.image()));
        check(&mut h, &model, &universe);
        // And the store keeps working after the garbage.
        let s = h.store.clone();
        h.run(s.write(universe[0], 0, blocks(999, 2), Version::new(2, 1)))
            .unwrap();
        model.write(universe[0], 0, 2, 999, Version::new(2, 1));
        let h = h.reopen();
        let mut h = h;
        check(&mut h, &model, &universe);
    }
}

#[test]
fn full_device_refuses_new_data_but_reads_and_deletes_work() {
    let mut h = Harness::fresh();
    let cap = h.store.stats().capacity_bytes;
    let s = h.store.clone();
    let mut written = Vec::new();
    let mut i = 0u64;
    let err = loop {
        let oid = ObjectId::new(5, i);
        match h.run(s.write(oid, 0, blocks(i, OBJECT_BLOCKS), Version::new(1, i + 1))) {
            Ok(()) => written.push(oid),
            Err(e) => break e,
        }
        i += 1;
        assert!(
            i * (OBJECT_BLOCKS as u64) * 4096 <= cap + (1 << 20),
            "wrote past capacity"
        );
    };
    assert!(matches!(err, StoreError::NoSpace(_)), "got {err}");
    assert!(
        written.len() as u64 * OBJECT_BLOCKS as u64 * 4096 > cap * 9 / 10,
        "filled most of the device"
    );
    // Fill the last blocks one at a time until even a 4 KiB write is refused.
    let mut small = 0u64;
    let e = loop {
        match h.run(s.write(ObjectId::new(7, small), 0, blocks(1, 1), Version::new(1, 1))) {
            Ok(()) => small += 1,
            Err(e) => break e,
        }
        assert!(
            small < OBJECT_BLOCKS as u64 * 2,
            "space was not running out"
        );
    };
    assert!(matches!(e, StoreError::NoSpace(_)), "got {e}");
    assert_eq!(h.store.stats().free_bytes, 0);
    // Overwrites of existing blocks still work (they need no new space).
    h.run(s.write(written[0], 4096, blocks(77, 1), Version::new(2, 1)))
        .unwrap();
    let r = h.run(s.read(written[1], 0, 8192)).unwrap();
    assert_eq!(&r.data[..4096], &common::block(1000)[..]);
    // Free some space: new writes succeed again, also after a reopen.
    for oid in &written[..4] {
        h.run(s.delete(*oid, Version::new(3, 1))).unwrap();
    }
    h.run(s.write(
        ObjectId::new(6, 0),
        0,
        blocks(1, OBJECT_BLOCKS),
        Version::new(1, 1),
    ))
    .unwrap();
    drop(s);
    let mut h = h.reopen();
    let s = h.store.clone();
    let r = h.run(s.read(ObjectId::new(6, 0), 0, 4096)).unwrap();
    assert_eq!(&r.data[..], &common::block(1000)[..]);
    assert_eq!(
        h.run(s.read(written[0], 0, 4096)).unwrap().version,
        Version::ZERO
    );
}

#[test]
fn failed_device_writes_fail_cleanly_and_reads_continue() {
    let mut h = Harness::fresh();
    let oid = ObjectId::new(1, 1);
    let s = h.store.clone();
    h.run(s.write(oid, 0, blocks(1, 2), Version::new(1, 1)))
        .unwrap();
    h.dev.set_fail_writes(true);
    let e = h
        .run(s.write(oid, 0, blocks(2, 2), Version::new(1, 2)))
        .unwrap_err();
    assert!(
        matches!(e, StoreError::Io { .. } | StoreError::Failed(_)),
        "got {e}"
    );
    let e = h
        .run(s.write(oid, 0, AlignedBuf::zeroed(4096), Version::new(1, 3)))
        .unwrap_err();
    assert!(
        matches!(e, StoreError::Failed(_)),
        "store refuses writes after an I/O error: {e}"
    );
    let r = h.run(s.read(oid, 0, 4096)).unwrap();
    assert_eq!(&r.data[..], &common::block(1000)[..]);
}

#[test]
fn bad_requests_get_clear_errors() {
    let mut h = Harness::fresh();
    let s = h.store.clone();
    let oid = ObjectId::new(1, 1);
    for (off, len) in [
        (1u64, 4096usize),
        (0, 100),
        (0, 0),
        (OBJECT_BLOCKS as u64 * 4096, 4096),
    ] {
        let e = h
            .run(s.write(oid, off, AlignedBuf::zeroed(len), Version::new(1, 1)))
            .unwrap_err();
        assert!(
            matches!(e, StoreError::InvalidArgument(_)),
            "{off}+{len}: {e}"
        );
    }
    let e = h
        .run(s.read(oid, 0, (OBJECT_BLOCKS as u64 + 1) * 4096))
        .unwrap_err();
    assert!(e.to_string().contains("exceeds the object size"), "{e}");
    assert!(
        h.store.list().is_empty(),
        "nothing was created by refused requests"
    );
}
