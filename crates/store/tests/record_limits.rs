//! Writes whose metadata is larger than one journal record can hold (512
//! entries): a sparse object's replace, into fragmented free space or not,
//! goes as a chain of records that replay applies whole or not at all; none
//! may wait for room forever, as they did (found by the client's kill_osd
//! test: recovery of a sparse 4 MiB object to an OSD that had just
//! restarted never finished), and a chain cut short by a power failure
//! leaves the old object (found by the snapshot failure test: recovery of
//! an object fragmented under snapshots was refused).

mod common;

use common::{Harness, blocks};
use pontoon_buf::AlignedBuf;
use pontoon_store::{FormatOptions, MemDevice};
use pontoon_types::{BLOCK_SIZE, ObjectId, Version};

/// 4 MiB objects, as the cluster uses.
const OBJECT_BLOCKS: u32 = 1024;

fn fresh() -> Harness {
    let dev = MemDevice::new(64 << 20);
    let opts = FormatOptions {
        object_size: OBJECT_BLOCKS as u64 * BLOCK_SIZE as u64,
        ..Default::default()
    };
    futures::executor::block_on(pontoon_store::Store::format(&dev, None, &opts)).expect("format");
    Harness::open(dev)
}

/// Runs `f` on the harness, failing the test if it has not finished after
/// the executor ran out of work (a write waiting for room forever).
fn finishes<T>(h: &mut Harness, f: impl Future<Output = T>) -> T {
    let mut f = Box::pin(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..10_000 {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        h.pool.run_until_stalled();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    panic!("the operation never finished: it waits for room in the journal forever");
}

/// An object image of `ranges` (block, count) with pattern data.
fn image(ranges: &[(u32, u32)], seed: u64) -> Vec<(u64, AlignedBuf)> {
    ranges
        .iter()
        .map(|&(b, n)| (b as u64 * BLOCK_SIZE as u64, blocks(seed + b as u64, n)))
        .collect()
}

#[test]
fn a_sparse_replace_into_fragmented_free_space_is_installed_not_stuck() {
    let mut h = fresh();
    let s = h.store.clone();
    // One large redirected write at the start of the data area, then every
    // other block of it discarded: 512 free single blocks where the
    // allocator starts after a reopen.
    let frag = ObjectId::new(1, 1);
    h.run(s.write(frag, 0, blocks(7, OBJECT_BLOCKS), Version::new(1, 1)))
        .expect("write");
    for b in (0..OBJECT_BLOCKS).step_by(2) {
        h.run(s.discard(frag, b as u64 * 4096, 4096, Version::new(1, 2 + b as u64)))
            .expect("discard");
    }
    let mut h = h.reopen();
    let s = h.store.clone();
    // 2 blocks on, 1 off: 341 ranges, which the single-block holes would cut
    // into more than 512 pieces.
    let ranges: Vec<(u32, u32)> = (0..341).map(|i| (i * 3, 2)).collect();
    let oid = ObjectId::new(1, 2);
    let v = Version::new(2, 1);
    finishes(&mut h, s.replace(oid, v, &image(&ranges, 100))).expect("replace");
    let check = |h: &mut Harness| {
        let s = h.store.clone();
        let img = h.run(s.read_object(oid)).expect("read").expect("exists");
        assert_eq!(img.version, v);
        let want = image(&ranges, 100);
        assert_eq!(img.extents.len(), want.len(), "extents stay apart");
        for ((o1, d1), (o2, d2)) in img.extents.iter().zip(&want) {
            assert_eq!(o1, o2);
            assert!(d1[..] == d2[..], "data at {o1}");
        }
    };
    check(&mut h);
    let mut h = h.reopen();
    check(&mut h);
    // The fragmented object is intact too.
    let s = h.store.clone();
    let got = h.run(s.read(frag, 4096, 4096)).expect("read");
    assert!(got.data[..] == blocks(7, OBJECT_BLOCKS)[4096..8192]);
}

/// Every other block: 512 ranges, 514 entries with Delete and Create, more
/// than one record holds.
fn sparse_ranges() -> Vec<(u32, u32)> {
    (0..512).map(|i| (i * 2, 1)).collect()
}

/// Whether `oid` reads exactly `ranges` of `seed`'s pattern at `v`.
fn holds(h: &mut Harness, oid: ObjectId, v: Version, ranges: &[(u32, u32)], seed: u64) -> bool {
    let s = h.store.clone();
    let Some(img) = h.run(s.read_object(oid)).expect("read") else {
        return false;
    };
    let want = image(ranges, seed);
    img.version == v
        && img.extents.len() == want.len()
        && img
            .extents
            .iter()
            .zip(&want)
            .all(|((o1, d1), (o2, d2))| o1 == o2 && d1[..] == d2[..])
}

#[test]
fn a_replace_larger_than_one_record_goes_as_a_chain_and_survives_restarts() {
    let mut h = fresh();
    let s = h.store.clone();
    let ranges = sparse_ranges();
    let oid = ObjectId::new(1, 3);
    let v = Version::new(1, 1);
    let records = h.store.stats().records;
    finishes(&mut h, s.replace(oid, v, &image(&ranges, 5))).expect("replace");
    assert!(
        h.store.stats().records >= records + 2,
        "written as a chain of records"
    );
    assert!(holds(&mut h, oid, v, &ranges, 5));
    let mut h = h.reopen();
    assert!(holds(&mut h, oid, v, &ranges, 5), "after a reopen");
    let mut h = h.crash(3);
    assert!(holds(&mut h, oid, v, &ranges, 5), "after a power failure");
    // The store goes on: a normal replace and write still work.
    let s = h.store.clone();
    let fine: Vec<(u32, u32)> = (0..100).map(|i| (i * 4, 3)).collect();
    finishes(&mut h, s.replace(oid, Version::new(1, 2), &image(&fine, 9))).expect("replace");
    h.run(s.write(oid, 0, blocks(3, 64), Version::new(1, 3)))
        .expect("write");
    let _ = h.reopen();
}

/// A power failure at every point of a chain's writing, with what was in
/// flight lost or kept: the object reads whole as before or whole as after,
/// never a mix; both outcomes occur.
#[test]
fn a_chain_cut_short_by_a_power_failure_leaves_the_old_object() {
    let ranges = sparse_ranges();
    let oid = ObjectId::new(1, 4);
    let (old, new) = (Version::new(1, 1), Version::new(2, 1));
    let old_ranges = [(0u32, OBJECT_BLOCKS)];
    let (mut olds, mut news) = (0, 0);
    for ops in 0..8u64 {
        for keep in [false, true] {
            let mut h = fresh();
            let s = h.store.clone();
            h.run(s.write(oid, 0, blocks(11, OBJECT_BLOCKS), old))
                .expect("write");
            h.run(s.checkpoint()).expect("checkpoint");
            h.dev.set_yielding(true);
            h.dev.freeze_after(ops);
            let img = image(&ranges, 40);
            let done = std::rc::Rc::new(std::cell::Cell::new(false));
            let flag = done.clone();
            use futures::task::LocalSpawnExt;
            h.pool
                .spawner()
                .spawn_local(async move {
                    if s.replace(oid, new, &img).await.is_ok() {
                        flag.set(true);
                    }
                })
                .expect("spawn");
            h.pool.run_until_stalled();
            let acked = done.get();
            let survived = h.dev.crash_image(|_| keep);
            drop(h);
            let mut h = Harness::open(MemDevice::from_image(survived));
            let at = format!("freeze after {ops} ops, in-flight writes kept: {keep}");
            if holds(&mut h, oid, new, &ranges, 40) {
                news += 1;
            } else {
                assert!(!acked, "{at}: an acknowledged replace was lost");
                assert!(
                    holds(&mut h, oid, old, &old_ranges, 11),
                    "{at}: the object is neither the old one nor the new one"
                );
                olds += 1;
            }
        }
    }
    assert!(olds > 0 && news > 0, "old {olds} times, new {news} times");
}
