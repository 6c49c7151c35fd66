//! The NVMe/TCP target against the crate's blocking test initiator, over
//! in-memory volumes: discovery, connect and identify, pipelined I/O on
//! several queues checked against a model (in-capsule, R2T and multi-PDU
//! writes), flush, deallocate, write zeroes, namespaces appearing and
//! disappearing under a connected host (asynchronous events, changed
//! namespace log), allow-lists, digests, keep-alive expiry and shutdown.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use pontoon_nvmf::command::{Status, io_op};
use pontoon_nvmf::initiator::{
    self, ConnectParams, Controller, ControllerOptions, Error, Queue, cns, dsm_deallocate, feature,
    log_page, parse_ns_list, reg, rw_sqe,
};
use pontoon_nvmf::pdu::Digests;
use pontoon_nvmf::{DISCOVERY_NQN, SubsystemConfig, TargetConfig};

const HOST2: &str = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-3333-4444-555555555555";

fn subsystem(nqn: &str, vol: &str, hosts: &[&str]) -> SubsystemConfig {
    SubsystemConfig {
        nqn: nqn.into(),
        namespaces: vec![ns(1, vol)],
        allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
        auth: Default::default(),
    }
}

/// NQNs of the NVM subsystems a discovery log lists, after checking every
/// entry's transport fields (the only other entry allowed is the
/// discovery subsystem itself).
fn listed(t: &Target, host: &str) -> BTreeSet<String> {
    let entries = initiator::discover(t.addr, host).expect("discovery");
    let mut out = BTreeSet::new();
    for e in entries {
        assert_eq!(e.trtype, 3, "TRTYPE of {e:?} (TCP)");
        assert_eq!(e.adrfam, 1, "ADRFAM of {e:?} (IPv4)");
        assert_eq!(e.traddr, "127.0.0.1", "{e:?}");
        assert_eq!(e.trsvcid, t.addr.port().to_string(), "{e:?}");
        assert!(e.asqsz >= 32, "ASQSZ of {e:?}");
        if e.subtype == 2 {
            assert_eq!(e.cntlid, 0xFFFF, "CNTLID of {e:?} (dynamic controllers)");
        }
        match e.subtype {
            2 => {
                assert!(out.insert(e.subnqn.clone()), "{} listed twice", e.subnqn);
            }
            3 => assert_eq!(e.subnqn, DISCOVERY_NQN, "{e:?}"),
            s => panic!("SUBTYPE {s} in {e:?}"),
        }
    }
    out
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

const NQN_A: &str = "nqn.2024-01.io.pontoon:a";
const NQN_B: &str = "nqn.2024-01.io.pontoon:b";
const NQN_C: &str = "nqn.2024-01.io.pontoon:c";

fn three_subsystems() -> Vec<SubsystemConfig> {
    vec![
        subsystem(NQN_A, "vol", &[HOST]),
        subsystem(NQN_B, "vol2", &[HOST2]),
        subsystem(NQN_C, "vol", &[HOST, HOST2]),
    ]
}

#[test]
fn discovery_lists_only_the_subsystems_a_host_may_connect_to() {
    let t = target_with(
        TargetConfig::default(),
        three_subsystems(),
        &[("vol", 16 * MIB), ("vol2", 16 * MIB)],
    );
    assert_eq!(listed(&t, HOST), set(&[NQN_A, NQN_C]));
    assert_eq!(listed(&t, HOST2), set(&[NQN_B, NQN_C]));
    assert_eq!(listed(&t, STRANGER), set(&[]));

    // The discovery controller says it is one, and needs no I/O queues.
    let mut o = ControllerOptions::new(DISCOVERY_NQN, HOST);
    o.io_queues = 0;
    o.kato_ms = 0;
    let mut c = Controller::connect_with(t.addr, o).expect("discovery controller");
    assert_eq!(
        c.identify().cntrltype,
        2,
        "CNTRLTYPE of a discovery controller"
    );
    assert_eq!(c.identify().subnqn, DISCOVERY_NQN);
    // The log page read in parts, as the kernel does, agrees with itself.
    let whole = c.get_log_page(log_page::DISCOVERY, 3 * 1024, 0).unwrap();
    assert_eq!(u64::from_le_bytes(whole[8..16].try_into().unwrap()), 2);
    let second = c.get_log_page(log_page::DISCOVERY, 1024, 2048).unwrap();
    assert_eq!(second, whole[2048..]);
    let tail = c
        .get_log_page(log_page::DISCOVERY, 512, 1024 + 256)
        .unwrap();
    assert_eq!(tail, whole[1024 + 256..1024 + 768]);
    // A discovery controller has no I/O queues.
    let e = Queue::connect(
        t.addr,
        ConnectParams {
            subnqn: DISCOVERY_NQN.into(),
            hostnqn: HOST.into(),
            hostid: initiator::hostid_for(HOST),
            qid: 1,
            sqsize: 31,
            kato_ms: 0,
            cntlid: c.cntlid(),
            digests: NO_DIGESTS,
        },
    )
    .unwrap_err();
    assert_eq!(
        e.status().map(|s| s.sct),
        Some(1),
        "I/O queue on discovery: {e}"
    );
    // Nor namespaces to do I/O on.
    let (cqe, _) = c
        .admin()
        .call(rw_sqe(io_op::READ, 1, 0, 1, false).unwrap(), None, 4096)
        .unwrap();
    assert!(!cqe.status.is_success(), "{cqe:?}");

    // A live change shows in the next discovery, under a new generation.
    let genctr = u64::from_le_bytes(whole[0..8].try_into().unwrap());
    t.subsystems.set(vec![
        subsystem(NQN_A, "vol", &[HOST]),
        subsystem(NQN_B, "vol2", &[HOST2, HOST]),
    ]);
    assert_eq!(listed(&t, HOST), set(&[NQN_A, NQN_B]));
    assert_eq!(listed(&t, HOST2), set(&[NQN_B]));
    let head = c.get_log_page(log_page::DISCOVERY, 1024, 0).unwrap();
    assert_ne!(
        u64::from_le_bytes(head[0..8].try_into().unwrap()),
        genctr,
        "GENCTR after a change"
    );
}

#[test]
fn discovery_with_allow_any_host_lists_everything() {
    let t = target_with(
        TargetConfig {
            allow_any_host: true,
            ..Default::default()
        },
        three_subsystems(),
        &[("vol", 16 * MIB), ("vol2", 16 * MIB)],
    );
    for h in [HOST, HOST2, STRANGER] {
        assert_eq!(listed(&t, h), set(&[NQN_A, NQN_B, NQN_C]), "host {h}");
    }
    // And the stranger can connect and read.
    let mut c = Controller::connect(t.addr, NQN_B, STRANGER, 1, 16, NO_DIGESTS).unwrap();
    assert_eq!(c.io(0).read(1, 0, 1).unwrap(), vec![0u8; BLOCK]);
}

#[test]
fn connect_and_identify() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    assert_ne!(c.cntlid(), 0xFFFF, "a dynamic controller gets a real id");

    // Properties.
    let cap = c.cap();
    assert_eq!((cap & 0xFFFF) + 1, 256, "CAP.MQES + 1 = max_queue_entries");
    assert_ne!(cap & (1 << 37), 0, "CAP.CSS: NVM command set");
    let vs = c.property_get(reg::VS, false).unwrap();
    assert!(vs >> 16 >= 1, "VS {vs:#x}");
    let cc = c.property_get(reg::CC, false).unwrap() as u32;
    assert_eq!(
        cc,
        reg::CC_EN | reg::CC_IOSQES | reg::CC_IOCQES,
        "CC reads back"
    );
    let csts = c.property_get(reg::CSTS, false).unwrap() as u32;
    assert_eq!(csts & (reg::CSTS_RDY | reg::CSTS_CFS), reg::CSTS_RDY);

    // Identify Controller.
    let id = c.identify().clone();
    assert_eq!(id, c.identify_controller().unwrap(), "identify is stable");
    assert_eq!(id.cntrltype, 1, "CNTRLTYPE: I/O controller");
    assert_eq!(id.subnqn, NQN);
    assert_eq!(id.cntlid, c.cntlid(), "CNTLID matches the Connect response");
    assert!(id.nn >= 1, "NN {}", id.nn);
    assert_ne!(id.oaes & (1 << 8), 0, "OAES: namespace attribute notices");
    for (name, s) in [("SN", &id.sn), ("MN", &id.mn), ("FR", &id.fr)] {
        assert!(
            !s.is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "{name} {s:?}"
        );
    }
    assert_eq!(id.in_capsule_bytes(), 8192, "IOCCSZ {}", id.ioccsz);
    assert_eq!(id.iorcsz, 1, "IORCSZ: 16-byte responses");
    assert_eq!(id.icdoff, 0, "ICDOFF (the kernel refuses anything else)");
    assert_ne!(
        id.sgls & 3,
        0,
        "SGLS: SGLs supported (mandatory on fabrics)"
    );
    assert!(id.maxcmd > 0, "MAXCMD (the kernel refuses 0)");
    assert_eq!(id.sqes & 0xF, 6, "SQES required size");
    assert_eq!(id.cqes & 0xF, 4, "CQES required size");
    assert_eq!(c.max_transfer(), Some(1 << 20), "MDTS {}", id.mdts);
    assert_ne!(id.oncs & (1 << 2), 0, "ONCS: Dataset Management");
    assert_ne!(id.oncs & (1 << 3), 0, "ONCS: Write Zeroes");
    assert_eq!(c.granted_io_queues(), 1);
    assert_eq!(c.io(0).in_capsule(), 8192);
    assert_eq!(c.io(0).maxh2cdata(), 128 << 10);

    // Namespaces.
    assert_eq!(c.active_namespaces().unwrap(), vec![1]);
    let n = c.identify_namespace(1).unwrap();
    assert_eq!(n.nsze, VOL_SIZE / 4096);
    assert_eq!(n.ncap, n.nsze);
    assert_eq!(n.nlbaf, 0);
    assert_eq!(n.flbas & 0xF, 0);
    assert_eq!(n.lbaf[0].0, 0, "no metadata");
    assert_eq!(n.lbaf[0].1, 12, "LBADS");
    assert_eq!(n.block_size(), Some(4096));
    let descs = c.ns_descriptors(1).unwrap();
    let find = |t: u8| descs.iter().find(|d| d.nidt == t).map(|d| d.nid.clone());
    assert_eq!(
        find(3),
        Some(uuid_of(1).to_vec()),
        "UUID descriptor: {descs:?}"
    );
    let nguid = find(2).expect("NGUID descriptor");
    assert_eq!(nguid.len(), 16);
    assert_ne!(nguid, vec![0u8; 16]);
    if n.nguid != [0; 16] {
        assert_eq!(
            n.nguid.to_vec(),
            nguid,
            "Identify Namespace NGUID = descriptor"
        );
    }
    // Another namespace's identity differs.
    assert_ne!(uuid_of(1), uuid_of(2));

    // Keep Alive and a log page every controller has.
    c.keep_alive().unwrap();
    let smart = c.get_log_page(log_page::SMART, 512, 0).unwrap();
    assert_eq!(smart.len(), 512);
}

#[test]
fn four_queues_of_pipelined_random_io_match_a_model() {
    let t = target();
    let mut c = controller(t.addr, 4, NO_DIGESTS);
    assert_eq!(c.io_queue_count(), 4);
    let queues = c.take_io_queues();
    // Disjoint regions of 15 MiB, one per queue; the last MiB is left for
    // other checks.
    const REGION_BLOCKS: u64 = 15 * 256;
    let handles: Vec<_> = queues
        .into_iter()
        .enumerate()
        .map(|(i, mut q)| {
            std::thread::spawn(move || {
                let mut model = vec![0u8; REGION_BLOCKS as usize * BLOCK];
                // Queue 0 keeps as many commands in flight as its queue
                // has entries, the others half that.
                let qd = if i == 0 { 32 } else { 16 };
                let st = random_io(
                    &mut q,
                    1,
                    i as u64 * REGION_BLOCKS,
                    &mut model,
                    300,
                    qd,
                    64,
                    0x5eed + i as u64,
                );
                assert_eq!(st.max_in_flight, qd, "queue {i} reached QD {qd}");
                (q, model, st)
            })
        })
        .collect();
    let mut results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut total = initiator::QueueStats::default();
    for (q, _, st) in &results {
        let s = q.stats();
        total.in_capsule_writes += s.in_capsule_writes;
        total.r2ts += s.r2ts;
        total.h2c_pdus += s.h2c_pdus;
        total.c2h_pdus += s.c2h_pdus;
        assert!(st.reads > 50 && st.writes > 50, "{st:?}");
    }
    assert!(total.in_capsule_writes > 0, "{total:?}");
    assert!(total.r2ts > 0, "{total:?}");
    // Writes over 128 KiB (MAXH2CDATA) need two H2CData PDUs per R2T or
    // more R2Ts; either way more H2CData than single-PDU writes.
    assert!(total.h2c_pdus > total.r2ts, "{total:?}");
    assert!(total.c2h_pdus > 0, "{total:?}");
    // Every region, read back through another queue.
    for i in 0..results.len() {
        let model = results[i].1.clone();
        let j = (i + 1) % results.len();
        verify_region(&mut results[j].0, 1, i as u64 * REGION_BLOCKS, &model);
    }
}

#[test]
fn large_writes_take_r2t_and_several_h2c_data_pdus() {
    let t = target_with(
        TargetConfig {
            max_h2c_data: 8192,
            ..Default::default()
        },
        vec![default_subsystem()],
        &[("vol", VOL_SIZE)],
    );
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let q = c.io(0);
    assert_eq!(q.maxh2cdata(), 8192);
    // (The Connect's data went in its capsule.)
    let s0 = q.stats();
    assert_eq!((s0.in_capsule_writes, s0.r2ts, s0.h2c_pdus), (1, 0, 0));
    // Exactly the in-capsule limit: in the capsule.
    let small = pattern(1, 8192);
    q.write(1, 0, &small, false).unwrap();
    let s = q.stats();
    assert_eq!((s.in_capsule_writes, s.r2ts), (2, 0));
    // One block more: R2T, two H2CData PDUs.
    let mid = pattern(2, 12288);
    q.write(1, 2, &mid, false).unwrap();
    let s2 = q.stats();
    assert_eq!(s2.in_capsule_writes, 2);
    assert!(s2.r2ts >= 1);
    assert_eq!(s2.h2c_pdus, 2);
    // MDTS: 1 MiB in 128 PDUs of 8 KiB.
    let big = pattern(3, 1 << 20);
    q.write(1, 100, &big, true).unwrap();
    let s3 = q.stats();
    assert_eq!(s3.h2c_pdus - s2.h2c_pdus, 128);
    assert_eq!(q.read(1, 0, 2).unwrap(), small);
    assert_eq!(q.read(1, 2, 3).unwrap(), mid);
    assert_eq!(q.read(1, 100, 256).unwrap(), big);
    // The same data split into PDUs smaller than MAXH2CDATA, as a host
    // may send it.
    q.set_h2c_pdu_limit(Some(1024));
    let before = q.stats().h2c_pdus;
    let split = pattern(4, 64 << 10);
    q.write(1, 500, &split, false).unwrap();
    assert_eq!(q.stats().h2c_pdus - before, 64);
    assert_eq!(q.read(1, 500, 16).unwrap(), split);
    q.set_h2c_pdu_limit(None);
    // Unaligned to the big write: its tail and what follows it.
    let mut expect = big[(200 * BLOCK)..].to_vec();
    expect.extend_from_slice(&[0u8; 8 * BLOCK]);
    assert_eq!(q.read(1, 300, 64).unwrap(), expect);
}

#[test]
fn flush_succeeds_and_checks_its_namespace() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let q = c.io(0);
    q.write(1, 7, &pattern(7, BLOCK), false).unwrap();
    q.flush(1).unwrap();
    let e = q.flush(9).unwrap_err();
    assert_eq!(e.status(), Some(Status::INVALID_NAMESPACE), "{e}");
    assert_eq!(q.read(1, 7, 1).unwrap(), pattern(7, BLOCK));
}

#[test]
fn deallocated_blocks_read_as_zeros() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let q = c.io(0);
    let base = 1000u64;
    let data = pattern(11, 32 * BLOCK);
    q.write(1, base, &data, false).unwrap();

    // Dataset Management without the deallocate attribute is a hint.
    let (mut sqe, ranges) = dsm_deallocate(1, &[(base, 32)]).unwrap();
    sqe.set_dword(11, 0);
    let (cqe, _) = q.call(sqe, Some(&ranges), 0).unwrap();
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(q.read(1, base, 32).unwrap(), data, "a hint changes nothing");

    q.deallocate(1, &[(base + 4, 4), (base + 20, 8)]).unwrap();
    let mut expect = data.clone();
    expect[4 * BLOCK..8 * BLOCK].fill(0);
    expect[20 * BLOCK..28 * BLOCK].fill(0);
    assert_eq!(q.read(1, base, 32).unwrap(), expect);
    // Deallocated blocks can be written again.
    q.write(1, base + 5, &pattern(12, BLOCK), false).unwrap();
    expect[5 * BLOCK..6 * BLOCK].copy_from_slice(&pattern(12, BLOCK));
    assert_eq!(q.read(1, base, 32).unwrap(), expect);
}

#[test]
fn write_zeroes_reads_as_zeros() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let q = c.io(0);
    let base = 2000u64;
    let data = pattern(21, 16 * BLOCK);
    q.write(1, base, &data, false).unwrap();
    q.write_zeroes(1, base + 2, 3, false).unwrap();
    q.write_zeroes(1, base + 10, 2, true).unwrap();
    let mut expect = data.clone();
    expect[2 * BLOCK..5 * BLOCK].fill(0);
    expect[10 * BLOCK..12 * BLOCK].fill(0);
    assert_eq!(q.read(1, base, 16).unwrap(), expect);
    // A whole MDTS worth of blocks.
    q.write(1, 3100, &pattern(22, BLOCK), false).unwrap();
    q.write_zeroes(1, 3000, 256, true).unwrap();
    assert_eq!(q.read(1, 3100, 1).unwrap(), vec![0u8; BLOCK]);
}

#[test]
fn namespaces_added_and_removed_while_connected_raise_events() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    c.set_features(feature::ASYNC_EVENT_CONFIG, feature::AEC_NS_ATTR)
        .unwrap();
    assert_ne!(
        c.get_features(feature::ASYNC_EVENT_CONFIG, 0).unwrap() & feature::AEC_NS_ATTR,
        0,
        "AEC reads back"
    );
    // A second host that did not enable the notice must not get it.
    let mut quiet = controller(t.addr, 0, NO_DIGESTS);
    let quiet_aer = quiet.submit_async_event().unwrap();

    let aer = c.submit_async_event().unwrap();
    assert!(
        matches!(
            c.wait_async_event(aer, Duration::from_millis(200)),
            Err(Error::Timeout)
        ),
        "no event before a change"
    );
    // Other admin commands complete while it is outstanding.
    c.keep_alive().unwrap();
    assert_eq!(c.active_namespaces().unwrap(), vec![1]);

    let mut with_two = default_subsystem();
    with_two.namespaces.push(ns(2, "vol2"));
    t.subsystems.set(vec![with_two]);
    let cqe = c.wait_async_event(aer, Duration::from_secs(5)).unwrap();
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(
        cqe.dw0, 0x0004_0002,
        "notice / namespace attribute changed / log page 4"
    );
    assert_eq!(c.active_namespaces().unwrap(), vec![1, 2]);
    let changed = c.get_log_page(log_page::CHANGED_NS, 4096, 0).unwrap();
    assert_eq!(parse_ns_list(&changed), vec![2]);
    // Reading the log clears it.
    let again = c.get_log_page(log_page::CHANGED_NS, 4096, 0).unwrap();
    assert_eq!(
        parse_ns_list(&again),
        Vec::<u32>::new(),
        "log not cleared by reading"
    );
    let n2 = c.identify_namespace(2).unwrap();
    assert_eq!(n2.nsze, 16 * MIB / 4096);
    let descs = c.ns_descriptors(2).unwrap();
    assert!(
        descs
            .iter()
            .any(|d| d.nidt == 3 && d.nid == uuid_of(2).to_vec())
    );
    c.io(0).write(2, 5, &pattern(2, BLOCK), false).unwrap();
    assert_eq!(c.io(0).read(2, 5, 1).unwrap(), pattern(2, BLOCK));
    assert!(
        matches!(
            quiet.wait_async_event(quiet_aer, Duration::from_millis(300)),
            Err(Error::Timeout)
        ),
        "an event the host did not enable was sent"
    );

    // Removal: another event, the list shrinks, I/O to it fails.
    let aer = c.submit_async_event().unwrap();
    t.subsystems.set(vec![default_subsystem()]);
    let cqe = c.wait_async_event(aer, Duration::from_secs(5)).unwrap();
    assert_eq!((cqe.status, cqe.dw0), (Status::SUCCESS, 0x0004_0002));
    assert_eq!(c.active_namespaces().unwrap(), vec![1]);
    let changed = c.get_log_page(log_page::CHANGED_NS, 4096, 0).unwrap();
    assert_eq!(parse_ns_list(&changed), vec![2]);
    let e = c.io(0).read(2, 5, 1).unwrap_err();
    assert_eq!(e.status(), Some(Status::INVALID_NAMESPACE), "{e}");
    assert_eq!(c.io(0).read(1, 0, 1).unwrap(), vec![0u8; BLOCK]);
}

#[test]
fn hosts_and_subsystems_not_configured_are_refused() {
    let t = target();
    let e = Controller::connect(t.addr, NQN, STRANGER, 1, 32, NO_DIGESTS).unwrap_err();
    assert_eq!(e.status(), Some(Status::CONNECT_INVALID_HOST), "{e}");
    let e = Controller::connect(
        t.addr,
        "nqn.2024-01.io.pontoon:nope",
        HOST,
        1,
        32,
        NO_DIGESTS,
    )
    .unwrap_err();
    assert_eq!(e.status(), Some(Status::CONNECT_INVALID_PARAMETERS), "{e}");
    // An I/O queue naming a controller that does not exist.
    let e = Queue::connect(
        t.addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            hostid: initiator::hostid_for(HOST),
            qid: 1,
            sqsize: 31,
            kato_ms: 0,
            cntlid: 0x4242,
            digests: NO_DIGESTS,
        },
    )
    .unwrap_err();
    assert_eq!(e.status(), Some(Status::CONNECT_INVALID_PARAMETERS), "{e}");
    // An I/O queue of someone else's controller.
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let mut other = default_subsystem();
    other.allowed_hosts.push(HOST2.into());
    t.subsystems.set(vec![other]);
    let e = Queue::connect(
        t.addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST2.into(),
            hostid: initiator::hostid_for(HOST2),
            qid: 2,
            sqsize: 31,
            kato_ms: 0,
            cntlid: c.cntlid(),
            digests: NO_DIGESTS,
        },
    )
    .unwrap_err();
    assert_eq!(
        e.status().map(|s| s.sct),
        Some(1),
        "connect to another host's controller: {e}"
    );
    // The live change let HOST2 in; the rightful owner still works.
    Controller::connect(t.addr, NQN, HOST2, 1, 32, NO_DIGESTS).unwrap();
    c.io(0).write(1, 0, &pattern(1, BLOCK), false).unwrap();
    // Taking HOST off the list refuses its new connections.
    let mut only2 = default_subsystem();
    only2.allowed_hosts = vec![HOST2.into()];
    t.subsystems.set(vec![only2]);
    let e = Controller::connect(t.addr, NQN, HOST, 1, 32, NO_DIGESTS).unwrap_err();
    assert_eq!(e.status(), Some(Status::CONNECT_INVALID_HOST), "{e}");
}

#[test]
fn digests_header_data_and_both() {
    let t = target();
    for (i, d) in [
        Digests {
            header: true,
            data: false,
        },
        Digests {
            header: false,
            data: true,
        },
        BOTH_DIGESTS,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = controller(t.addr, 2, d);
        assert_eq!(c.admin().digests(), d);
        let mut qs = c.take_io_queues();
        for q in &qs {
            assert_eq!(q.digests(), d);
        }
        let first = 8192 + i as u64 * 512;
        let mut model = vec![0u8; 512 * BLOCK];
        let st = random_io(&mut qs[0], 1, first, &mut model, 120, 8, 64, 77 + i as u64);
        assert!(st.reads > 10 && st.writes > 10);
        let s = qs[0].stats();
        assert!(
            s.in_capsule_writes > 0 && s.r2ts > 0 && s.c2h_pdus > 0,
            "{s:?}"
        );
        verify_region(&mut qs[1], 1, first, &model);
        // Admin data (Identify) crosses with digests too.
        assert_eq!(c.identify_namespace(1).unwrap().nsze, VOL_SIZE / 4096);
    }
}

#[test]
fn keep_alive_timeout_tears_the_controller_down() {
    let t = target();
    let mut c = controller_kato(t.addr, 1, 1000);
    assert_eq!(
        c.get_features(feature::KEEP_ALIVE_TIMER, 0).unwrap(),
        1000,
        "Get Features KATO"
    );
    // Kept alive, it lives well past its KATO.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        c.keep_alive()
            .expect("a kept-alive controller stays up past its KATO");
        std::thread::sleep(Duration::from_millis(250));
    }
    c.io(0).write(1, 0, &pattern(3, BLOCK), false).unwrap();
    c.keep_alive().unwrap();
    let silent_from = Instant::now();
    let mut io = c.take_io_queues().pop().unwrap();
    assert!(
        c.admin().wait_closed(Duration::from_secs(6)).unwrap(),
        "admin connection still open 6 s after the last keep alive (KATO 1 s)"
    );
    let after = silent_from.elapsed();
    assert!(
        after >= Duration::from_millis(900),
        "torn down {after:?} after the last keep alive, before KATO"
    );
    assert!(
        io.wait_closed(Duration::from_secs(2)).unwrap(),
        "the I/O queue of an expired controller stays open"
    );
    // Its data and the target are fine.
    let mut c2 = controller(t.addr, 1, NO_DIGESTS);
    assert_eq!(c2.io(0).read(1, 0, 1).unwrap(), pattern(3, BLOCK));
}

#[test]
fn shutdown_handshake_completes() {
    let t = target();
    let mut c = controller(t.addr, 2, NO_DIGESTS);
    c.io(0)
        .write(1, 42, &pattern(42, 4 * BLOCK), false)
        .unwrap();
    c.io(1).read(1, 0, 16).unwrap();
    c.shutdown().unwrap();
    let csts = c.property_get(reg::CSTS, false).unwrap() as u32;
    assert_eq!(csts & reg::CSTS_SHST_MASK, reg::CSTS_SHST_COMPLETE);
    let cc = c.property_get(reg::CC, false).unwrap() as u32;
    assert_eq!(cc & reg::CC_SHN_MASK, reg::CC_SHN_NORMAL);
    drop(c);
    let mut c2 = controller(t.addr, 1, NO_DIGESTS);
    assert_eq!(c2.io(0).read(1, 42, 4).unwrap(), pattern(42, 4 * BLOCK));
    t.stop();
}

#[test]
fn identify_lists_and_reads_a_namespace_of_each_subsystem() {
    // Two subsystems over two volumes; each controller sees only its own.
    let t = target_with(
        TargetConfig::default(),
        vec![
            subsystem(NQN_A, "vol", &[HOST]),
            SubsystemConfig {
                nqn: NQN_B.into(),
                namespaces: vec![ns(3, "vol2")],
                allowed_hosts: vec![HOST.into()],
                auth: Default::default(),
            },
        ],
        &[("vol", 16 * MIB), ("vol2", 8 * MIB)],
    );
    let mut a = Controller::connect(t.addr, NQN_A, HOST, 1, 16, NO_DIGESTS).unwrap();
    let mut b = Controller::connect(t.addr, NQN_B, HOST, 1, 16, NO_DIGESTS).unwrap();
    assert_ne!(a.cntlid(), b.cntlid());
    assert_eq!(a.active_namespaces().unwrap(), vec![1]);
    assert_eq!(b.active_namespaces().unwrap(), vec![3]);
    assert_eq!(b.identify_namespace(3).unwrap().nsze, 8 * MIB / 4096);
    a.io(0).write(1, 1, &pattern(1, BLOCK), false).unwrap();
    b.io(0).write(3, 1, &pattern(3, BLOCK), false).unwrap();
    assert_eq!(a.io(0).read(1, 1, 1).unwrap(), pattern(1, BLOCK));
    assert_eq!(b.io(0).read(3, 1, 1).unwrap(), pattern(3, BLOCK));
    let e = b.io(0).read(1, 1, 1).unwrap_err();
    assert_eq!(e.status(), Some(Status::INVALID_NAMESPACE), "{e}");
    // Active namespace list from a starting id lists only ids above it.
    let (_, raw) = b
        .admin()
        .call_ok(initiator::identify_sqe(cns::ACTIVE_NS_LIST, 3), None, 4096)
        .unwrap();
    assert_eq!(parse_ns_list(&raw), Vec::<u32>::new());
    // Reads through the raw pipelining interface complete in any order
    // but each with its own data.
    let q = a.io(0);
    let mut cids = Vec::new();
    for lba in 0..8u64 {
        q.write(1, 100 + lba, &pattern(100 + lba, BLOCK), false)
            .unwrap();
    }
    for lba in 0..8u64 {
        let sqe = rw_sqe(io_op::READ, 1, 100 + lba, 1, false).unwrap();
        cids.push((q.submit(sqe, None, BLOCK).unwrap(), lba));
    }
    for _ in 0..8 {
        let done = q.reap().unwrap();
        let lba = cids.iter().find(|(c, _)| *c == done.cqe.cid).unwrap().1;
        assert_eq!(done.data, pattern(100 + lba, BLOCK));
    }
}

#[test]
fn megabyte_transfers_at_queue_depth_32() {
    // 32 commands of up to 1 MiB (MDTS) in flight on one connection, both
    // directions at once: the target must keep reading while it is
    // sending, and bound what it holds without stalling.
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let q = c.io(0);
    let mut model = vec![0u8; 48 << 20];
    let st = random_io(q, 1, 0, &mut model, 160, 32, 256, 0xb16);
    assert_eq!(st.max_in_flight, 32);
    assert!(st.bytes > 40 << 20, "{st:?}");
}

#[test]
fn disable_and_enable_again() {
    // A controller reset (CC.EN 1 -> 0), as Linux's nvme_disable_ctrl()
    // does on every reset: the host then polls CSTS.RDY on the admin
    // queue until it reads 0, and may enable again. The I/O queues go; the
    // admin queue (the association) stays.
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    c.io(0).write(1, 9, &pattern(9, BLOCK), false).unwrap();
    let cc = c.property_get(reg::CC, false).unwrap();
    c.property_set(reg::CC, cc & !u64::from(reg::CC_EN), false)
        .unwrap();
    let csts = |c: &mut Controller| -> u32 {
        c.property_get(reg::CSTS, false)
            .expect("CSTS read on the admin queue after CC.EN=0") as u32
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while csts(&mut c) & reg::CSTS_RDY != 0 {
        assert!(
            Instant::now() < deadline,
            "CSTS.RDY still set after CC.EN=0"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    c.property_set(reg::CC, cc, false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while csts(&mut c) & reg::CSTS_RDY == 0 {
        assert!(Instant::now() < deadline, "CSTS.RDY not set after CC.EN=1");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(c.identify_controller().unwrap().cntlid, c.cntlid());
    // The old I/O queue no longer serves; a new one does, and the data is
    // there.
    let mut old = c.take_io_queues();
    match old[0].read(1, 9, 1) {
        Ok(d) => panic!("I/O queue survived a reset (read {} bytes)", d.len()),
        Err(Error::Closed) | Err(Error::Terminated { .. }) | Err(Error::Status { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    let q = c.add_io_queue().unwrap();
    assert_eq!(q.read(1, 9, 1).unwrap(), pattern(9, BLOCK));
}

#[test]
fn stopping_the_target_closes_connections_promptly() {
    let t = target_with(
        TargetConfig {
            shutdown_grace: Duration::from_secs(1),
            ..Default::default()
        },
        vec![default_subsystem()],
        &[("vol", VOL_SIZE)],
    );
    let addr = t.addr;
    let mut c = controller(addr, 1, NO_DIGESTS);
    let mut q = c.take_io_queues().pop().unwrap();
    let worker = std::thread::spawn(move || {
        let mut model = vec![0u8; 8 << 20];
        let mut n = 0u64;
        // Until the target goes away.
        loop {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                random_io(&mut q, 1, 0, &mut model, 32, 8, 16, n)
            }));
            if r.is_err() {
                return n;
            }
            n += 1;
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    t.stop();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(4), "stop took {took:?}");
    let rounds = worker.join().unwrap();
    assert!(rounds > 0, "no I/O completed before the stop");
    assert!(
        c.admin().wait_closed(Duration::from_secs(2)).unwrap(),
        "admin connection open after stop"
    );
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening"
    );
}

#[test]
fn several_workers_serve_one_controller_across_threads() {
    // Four workers: a controller's admin and I/O connections land on
    // different threads (SO_REUSEPORT spreads them), so controller state,
    // events and teardown cross threads.
    let t = target_workers(
        4,
        TargetConfig::default(),
        vec![default_subsystem()],
        &[("vol", VOL_SIZE), ("vol2", 16 * MIB)],
    );
    let mut c = controller(t.addr, 8, NO_DIGESTS);
    assert_eq!(c.io_queue_count(), 8);
    c.set_features(feature::ASYNC_EVENT_CONFIG, feature::AEC_NS_ATTR)
        .unwrap();
    let aer = c.submit_async_event().unwrap();
    const REGION_BLOCKS: u64 = 1024;
    let handles: Vec<_> = c
        .take_io_queues()
        .into_iter()
        .enumerate()
        .map(|(i, mut q)| {
            std::thread::spawn(move || {
                let mut model = vec![0u8; REGION_BLOCKS as usize * BLOCK];
                random_io(
                    &mut q,
                    1,
                    i as u64 * REGION_BLOCKS,
                    &mut model,
                    150,
                    16,
                    32,
                    0xa11 + i as u64,
                );
                (q, model)
            })
        })
        .collect();
    // A namespace added while the I/O runs: the event reaches the admin
    // queue whichever thread serves it.
    let mut with_two = default_subsystem();
    with_two.namespaces.push(ns(2, "vol2"));
    t.subsystems.set(vec![with_two]);
    let cqe = c.wait_async_event(aer, Duration::from_secs(5)).unwrap();
    assert_eq!((cqe.status, cqe.dw0), (Status::SUCCESS, 0x0004_0002));
    let mut results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for i in 0..results.len() {
        let model = results[i].1.clone();
        let j = (i + 3) % results.len();
        verify_region(&mut results[j].0, 1, i as u64 * REGION_BLOCKS, &model);
    }
    // Namespace 2 works from every queue.
    for (i, (q, _)) in results.iter_mut().enumerate() {
        q.write(2, i as u64, &pattern(i as u64, BLOCK), false)
            .unwrap();
    }
    for (i, (q, _)) in results.iter_mut().rev().enumerate() {
        let lba = (7 - i) as u64;
        assert_eq!(q.read(2, lba, 1).unwrap(), pattern(lba, BLOCK));
    }

    // Keep-alive expiry closes every connection of a controller, on every
    // thread.
    let mut k = controller_kato(t.addr, 6, 1000);
    let mut qs = k.take_io_queues();
    assert!(k.admin().wait_closed(Duration::from_secs(6)).unwrap());
    for q in &mut qs {
        assert!(q.wait_closed(Duration::from_secs(2)).unwrap());
    }
    // The first controller (KATO 30 s) is unaffected.
    c.keep_alive().unwrap();
    assert_eq!(results[0].0.read(1, 0, 1).unwrap().len(), BLOCK);
}
