//! Writes whose metadata is larger than one journal record can hold (512
//! entries): a sparse object's replace into fragmented free space must be
//! journaled instead of redirected, and one that no record can hold must
//! fail — neither may wait for room forever, as they did (found by the
//! client's kill_osd test: recovery of a sparse 4 MiB object to an OSD that
//! had just restarted never finished).

mod common;

use common::{Harness, blocks};
use pontoon_buf::AlignedBuf;
use pontoon_store::{FormatOptions, MemDevice, StoreError};
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
fn a_sparse_replace_into_fragmented_free_space_is_journaled_not_stuck() {
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

#[test]
fn a_replace_no_journal_record_can_hold_fails_and_the_store_goes_on() {
    let mut h = fresh();
    let s = h.store.clone();
    // Every other block: 512 ranges, 514 entries with Delete and Create.
    let ranges: Vec<(u32, u32)> = (0..512).map(|i| (i * 2, 1)).collect();
    let oid = ObjectId::new(1, 3);
    let e = finishes(
        &mut h,
        s.replace(oid, Version::new(1, 1), &image(&ranges, 5)),
    )
    .expect_err("too many extents for one record");
    assert!(
        matches!(e, StoreError::InvalidArgument(_)) && e.to_string().contains("journal record"),
        "{e}"
    );
    assert!(h.run(s.read_object(oid)).expect("read").is_none());
    // Nothing leaked or stuck: a normal replace and write still work.
    let fine: Vec<(u32, u32)> = (0..100).map(|i| (i * 4, 3)).collect();
    finishes(&mut h, s.replace(oid, Version::new(1, 2), &image(&fine, 9))).expect("replace");
    h.run(s.write(oid, 0, blocks(3, 64), Version::new(1, 3)))
        .expect("write");
    let _ = h.reopen();
}
