//! Helpers shared by the store's integration tests: a single-threaded
//! executor around a store on an in-memory device, deterministic block
//! contents, and a model of what every object must contain.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;

use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use pontoon_buf::AlignedBuf;
use pontoon_store::{FormatOptions, MemDevice, Store, VolumeUsage};
use pontoon_types::{BLOCK_SIZE, ObjectId, Version, VolumeId};

/// Object size used by the tests: 64 blocks.
pub const OBJECT_BLOCKS: u32 = 64;
/// Device size: enough for the minimum journal and a small data area.
pub const DEVICE_BYTES: u64 = 48 << 20;

/// A store on a [`MemDevice`] driven by a local executor.
pub struct Harness {
    pub pool: LocalPool,
    pub store: Store<MemDevice>,
    pub dev: MemDevice,
}

impl Harness {
    /// Formats a fresh device and opens it.
    pub fn fresh() -> Self {
        let dev = MemDevice::new(DEVICE_BYTES);
        let opts = FormatOptions {
            object_size: OBJECT_BLOCKS as u64 * BLOCK_SIZE as u64,
            ..Default::default()
        };
        futures::executor::block_on(Store::format(&dev, None, &opts)).expect("format");
        Self::open(dev)
    }

    /// Opens an existing device.
    pub fn open(dev: MemDevice) -> Self {
        Self::try_open(dev).expect("open")
    }

    pub fn try_open(dev: MemDevice) -> pontoon_store::Result<Self> {
        let mut pool = LocalPool::new();
        let (store, bg) = pool.run_until(Store::open(dev.clone(), None, 0))?;
        pool.spawner().spawn_local(bg).expect("spawn background");
        Ok(Self { pool, store, dev })
    }

    pub fn run<F: Future>(&mut self, f: F) -> F::Output {
        self.pool.run_until(f)
    }

    /// Clean close and reopen.
    pub fn reopen(mut self) -> Self {
        let s = self.store.clone();
        self.run(s.close()).expect("close");
        let dev = self.dev.clone();
        drop(self);
        Self::open(dev)
    }

    /// Power failure: keep each cached sector with probability 1/2 (by
    /// `seed`), then reopen from the surviving image.
    pub fn crash(self, seed: u64) -> Self {
        let img = self
            .dev
            .crash_image(|i| pontoon_types::mix64(seed ^ i as u64) & 1 == 0);
        drop(self);
        Self::open(MemDevice::from_image(img))
    }
}

/// Deterministic contents of one block, from a seed.
pub fn block(seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; BLOCK_SIZE];
    let mut x = seed.wrapping_add(1);
    for c in out.chunks_mut(8) {
        x = pontoon_types::mix64(x);
        c.copy_from_slice(&x.to_le_bytes());
    }
    out
}

/// Contents of `n` blocks whose seeds are `seed*1000 + i`.
pub fn blocks(seed: u64, n: u32) -> AlignedBuf {
    let mut b = AlignedBuf::with_capacity(n as usize * BLOCK_SIZE);
    for i in 0..n {
        b.extend_from_slice(&block(seed * 1000 + i as u64));
    }
    b
}

/// What every object should hold: version and per-block seed.
#[derive(Clone, Default, Debug, PartialEq)]
pub struct Model {
    pub objects: BTreeMap<ObjectId, (Version, BTreeMap<u32, u64>)>,
}

impl Model {
    pub fn write(&mut self, oid: ObjectId, start: u32, n: u32, seed: u64, v: Version) {
        let o = self.objects.entry(oid).or_default();
        o.0 = v;
        for i in 0..n {
            o.1.insert(start + i, seed * 1000 + i as u64);
        }
    }

    pub fn discard(&mut self, oid: ObjectId, start: u32, n: u32, v: Version) {
        if let Some(o) = self.objects.get_mut(&oid) {
            o.0 = v;
            o.1.retain(|b, _| *b < start || *b >= start + n);
        }
    }

    pub fn delete(&mut self, oid: ObjectId) {
        self.objects.remove(&oid);
    }

    /// Expected bytes of a whole object.
    pub fn expected(&self, oid: &ObjectId) -> Vec<u8> {
        let mut out = vec![0u8; OBJECT_BLOCKS as usize * BLOCK_SIZE];
        if let Some((_, m)) = self.objects.get(oid) {
            for (b, s) in m {
                let at = *b as usize * BLOCK_SIZE;
                out[at..at + BLOCK_SIZE].copy_from_slice(&block(*s));
            }
        }
        out
    }
}

/// Asserts that the store holds exactly what the model says.
pub fn check(h: &mut Harness, model: &Model, universe: &[ObjectId]) {
    let listed: Vec<(ObjectId, Version)> = h.store.list();
    let want: Vec<(ObjectId, Version)> = model.objects.iter().map(|(k, v)| (*k, v.0)).collect();
    assert_eq!(listed, want, "object list and versions");
    for oid in universe {
        let s = h.store.clone();
        let r = h
            .run(s.read(*oid, 0, OBJECT_BLOCKS as u64 * BLOCK_SIZE as u64))
            .expect("read");
        let exp = model.expected(oid);
        if r.data[..] != exp[..] {
            let bad: Vec<usize> = (0..OBJECT_BLOCKS as usize)
                .filter(|b| {
                    r.data[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE]
                        != exp[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE]
                })
                .collect();
            panic!("object {oid}: blocks {bad:?} differ from the model");
        }
        let alloc: u64 = h
            .store
            .allocated(*oid)
            .iter()
            .map(|r| r.end - r.start)
            .sum();
        let want_alloc = model
            .objects
            .get(oid)
            .map_or(0, |o| o.1.len() as u64 * BLOCK_SIZE as u64);
        assert_eq!(alloc, want_alloc, "object {oid}: allocated bytes");
    }
    let mut want_usage: BTreeMap<VolumeId, VolumeUsage> = BTreeMap::new();
    for (oid, (_, blocks)) in &model.objects {
        let u = want_usage.entry(oid.volume).or_default();
        u.objects += 1;
        u.blocks += blocks.len() as u64;
    }
    let usage: BTreeMap<VolumeId, VolumeUsage> = h.store.volume_usage().into_iter().collect();
    assert_eq!(usage, want_usage, "per-volume usage counters");
}
