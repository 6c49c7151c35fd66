//! Shared helpers for the NVMe/TCP target's integration tests: a target
//! on 127.0.0.1:0 over in-memory volumes, NQNs, data patterns and a
//! pipelined random I/O runner checked against a model.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pontoon_nvmf::command::{Status, io_op};
use pontoon_nvmf::initiator::{Controller, ControllerOptions, Queue, check_moved, rw_sqe};
use pontoon_nvmf::pdu::Digests;
use pontoon_nvmf::{NamespaceConfig, SubsystemConfig, Subsystems, TargetConfig, TargetHandle};
use pontoon_volume::{MemCatalog, MemVolume};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

pub const MIB: u64 = 1 << 20;
pub const BLOCK: usize = 4096;
/// The I/O subsystem most tests use.
pub const NQN: &str = "nqn.2024-01.io.pontoon:test";
/// A host on `NQN`'s allow-list.
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
/// A host on no allow-list.
pub const STRANGER: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-0000-0000-0000-000000000000";
/// Size of the volume behind namespace 1.
pub const VOL_SIZE: u64 = 64 * MIB;

pub const NO_DIGESTS: Digests = Digests {
    header: false,
    data: false,
};
pub const BOTH_DIGESTS: Digests = Digests {
    header: true,
    data: true,
};

/// The UUID namespace `nsid` is configured with.
pub fn uuid_of(nsid: u32) -> [u8; 16] {
    let mut u = [0u8; 16];
    for (i, b) in u.iter_mut().enumerate() {
        *b = (nsid as u8).wrapping_mul(17).wrapping_add(i as u8 * 13 + 1);
    }
    // Version 4, variant 1, like a real random UUID.
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

/// Namespace `nsid` backed by volume `vol`.
pub fn ns(nsid: u32, vol: &str) -> NamespaceConfig {
    NamespaceConfig {
        nsid,
        volume: vol.into(),
        uuid: uuid_of(nsid),
    }
}

/// The default subsystem: `NQN` with namespace 1 on "vol", `HOST` allowed.
pub fn default_subsystem() -> SubsystemConfig {
    SubsystemConfig {
        nqn: NQN.into(),
        namespaces: vec![ns(1, "vol")],
        allowed_hosts: vec![HOST.into()],
        auth: Default::default(),
    }
}

/// A running target and its live configuration.
pub struct Target {
    pub handle: Option<TargetHandle>,
    pub subsystems: Subsystems,
    pub addr: SocketAddr,
}

impl Target {
    /// Stops the target (as dropping does), checking that it stops cleanly.
    pub fn stop(mut self) {
        if let Some(h) = self.handle.take() {
            h.stop().expect("target stops");
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            if std::thread::panicking() {
                // Stopping wakes the target's compio tasks from this thread,
                // and compio aborts the process when a task is scheduled from
                // a panicking thread: a failed assertion would kill every
                // other test. Stop it from a thread that is not unwinding.
                let _ = std::thread::spawn(move || {
                    let _ = h.stop();
                })
                .join();
            } else {
                let _ = h.stop();
            }
        }
    }
}

/// A target with the default configuration and subsystem, and volumes
/// "vol" (`VOL_SIZE`) and "vol2" (16 MiB).
pub fn target() -> Target {
    target_with(
        TargetConfig::default(),
        vec![default_subsystem()],
        &[("vol", VOL_SIZE), ("vol2", 16 * MIB)],
    )
}

/// A target with `config` (its `listen` replaced by 127.0.0.1:0),
/// `subsystems`, and fresh in-memory `volumes` (one worker, so one
/// catalog: every connection sees the same contents).
pub fn target_with(
    config: TargetConfig,
    subsystems: Vec<SubsystemConfig>,
    volumes: &[(&str, u64)],
) -> Target {
    let vols: Vec<(String, u64)> = volumes.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    let config = TargetConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        ..config
    };
    let subs = Subsystems::new(subsystems);
    let handle = pontoon_nvmf::start(
        config,
        subs.clone(),
        Arc::new(move || {
            let c = MemCatalog::default();
            for (n, s) in &vols {
                c.insert(n, MemVolume::new(*s));
            }
            c
        }),
    )
    .expect("start the NVMe/TCP target");
    Target {
        addr: handle.local_addr(),
        handle: Some(handle),
        subsystems: subs,
    }
}

/// A controller on `NQN` as `HOST` with `io_queues` queues of 32 entries.
pub fn controller(addr: SocketAddr, io_queues: usize, digests: Digests) -> Controller {
    Controller::connect(addr, NQN, HOST, io_queues, 32, digests).expect("controller connects")
}

/// Like [`controller`] with a custom keep-alive timeout.
pub fn controller_kato(addr: SocketAddr, io_queues: usize, kato_ms: u32) -> Controller {
    let mut o = ControllerOptions::new(NQN, HOST);
    o.io_queues = io_queues;
    o.kato_ms = kato_ms;
    Controller::connect_with(addr, o).expect("controller connects")
}

/// Deterministic data: `len` bytes from `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Asserts that a fresh host can still connect, write, read back and
/// flush through the target at `addr` (namespace 1, blocks near the end
/// of the volume no test uses otherwise).
pub fn assert_target_healthy(addr: SocketAddr) {
    let mut c = controller(addr, 1, NO_DIGESTS);
    let lba = VOL_SIZE / BLOCK as u64 - 64;
    let data = pattern(0xfeed ^ lba, 3 * BLOCK);
    let q = c.io(0);
    q.write(1, lba, &data, false).expect("health write");
    assert_eq!(q.read(1, lba, 3).expect("health read"), data);
    c.keep_alive().expect("health keep alive");
}

/// Counts of one random I/O run.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunStats {
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub max_in_flight: usize,
}

#[derive(Debug)]
struct Op {
    write: bool,
    lba: u64,
    nlb: u32,
}

/// Random reads and writes of 1..=`max_blocks` blocks inside
/// [`first_lba`, `first_lba` + `model.len()` / 4096) on `q`, keeping up to
/// `qd` commands in flight (never two overlapping ones), each read checked
/// against `model` (the region's expected contents, updated by writes).
#[allow(clippy::too_many_arguments)]
pub fn random_io(
    q: &mut Queue,
    nsid: u32,
    first_lba: u64,
    model: &mut [u8],
    ops: usize,
    qd: usize,
    max_blocks: u32,
    seed: u64,
) -> RunStats {
    let mut rng = StdRng::seed_from_u64(seed);
    let region_blocks = (model.len() / BLOCK) as u64;
    let mut in_flight: HashMap<u16, Op> = HashMap::new();
    let mut st = RunStats::default();
    let mut submitted = 0;
    let mut completed = 0;
    while completed < ops {
        while in_flight.len() < qd && submitted < ops {
            let nlb = rng.random_range(1..=max_blocks);
            let mut chosen = None;
            for _ in 0..16 {
                let lba = rng.random_range(0..=region_blocks - u64::from(nlb));
                let clear = in_flight
                    .values()
                    .all(|o| lba + u64::from(nlb) <= o.lba || o.lba + u64::from(o.nlb) <= lba);
                if clear {
                    chosen = Some(lba);
                    break;
                }
            }
            let Some(lba) = chosen else { break };
            let write = rng.random_bool(0.5);
            let len = nlb as usize * BLOCK;
            let cid = if write {
                let data = pattern(rng.random(), len);
                let at = lba as usize * BLOCK;
                model[at..at + len].copy_from_slice(&data);
                let sqe = rw_sqe(
                    io_op::WRITE,
                    nsid,
                    first_lba + lba,
                    nlb,
                    rng.random_bool(0.1),
                )
                .unwrap();
                q.submit(sqe, Some(&data), 0).expect("submit write")
            } else {
                let sqe = rw_sqe(io_op::READ, nsid, first_lba + lba, nlb, false).unwrap();
                q.submit(sqe, None, len).expect("submit read")
            };
            assert!(in_flight.insert(cid, Op { write, lba, nlb }).is_none());
            submitted += 1;
            st.max_in_flight = st.max_in_flight.max(in_flight.len());
        }
        let c = q.reap().expect("reap");
        let op = in_flight
            .remove(&c.cqe.cid)
            .unwrap_or_else(|| panic!("completion for unknown cid {}", c.cqe.cid));
        assert_eq!(c.cqe.status, Status::SUCCESS, "{op:?}");
        check_moved(&c, op.nlb as usize * BLOCK).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        let (at, len) = (op.lba as usize * BLOCK, op.nlb as usize * BLOCK);
        if op.write {
            st.writes += 1;
            assert!(c.data.is_empty());
        } else {
            st.reads += 1;
            assert_eq!(c.data.len(), len);
            if c.data != model[at..at + len] {
                let first_bad = c
                    .data
                    .iter()
                    .zip(&model[at..at + len])
                    .position(|(a, b)| a != b)
                    .unwrap();
                panic!(
                    "read of {op:?} differs from the model at byte {first_bad} (block {})",
                    op.lba + (first_bad / BLOCK) as u64
                );
            }
        }
        st.bytes += len as u64;
        completed += 1;
    }
    st
}

/// Reads the whole region back in 256 KiB commands and compares with
/// `model`.
pub fn verify_region(q: &mut Queue, nsid: u32, first_lba: u64, model: &[u8]) {
    for (i, chunk) in model.chunks(64 * BLOCK).enumerate() {
        let lba = first_lba + (i * 64) as u64;
        let got = q
            .read(nsid, lba, (chunk.len() / BLOCK) as u32)
            .expect("verify read");
        assert!(got == chunk, "region differs from the model near LBA {lba}");
    }
}

/// A short pause for things that happen asynchronously.
pub fn settle() {
    std::thread::sleep(Duration::from_millis(50));
}

/// Like [`target_with`], with `workers` worker threads sharing
/// `MemVolume`s (their clones share contents across threads).
pub fn target_workers(
    workers: usize,
    config: TargetConfig,
    subsystems: Vec<SubsystemConfig>,
    volumes: &[(&str, u64)],
) -> Target {
    let catalog = MemCatalog::default();
    for (n, s) in volumes {
        catalog.insert(n, MemVolume::new(*s));
    }
    let config = TargetConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers,
        ..config
    };
    let subs = Subsystems::new(subsystems);
    let handle = pontoon_nvmf::start(config, subs.clone(), Arc::new(move || catalog.clone()))
        .expect("start the NVMe/TCP target");
    Target {
        addr: handle.local_addr(),
        handle: Some(handle),
        subsystems: subs,
    }
}
