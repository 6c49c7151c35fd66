//! Hostile and broken hosts. Each malformed PDU must get a C2HTermReq with
//! the right fatal error status and a closed connection, while other hosts
//! keep being served; each bad command must get its exact NVMe status on a
//! connection that stays usable; random bytes must never hang or kill the
//! target.

mod common;

use std::io::{Cursor, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use pontoon_nvmf::command::{FABRICS_OPCODE, SGL_IN_CAPSULE, Sgl, Sqe, Status, admin_op, io_op};
use pontoon_nvmf::initiator::{
    ConnectParams, Controller, DEFAULT_TIMEOUT, Error, Queue, RawPdu, check_moved, hostid_for,
    read_pdu, rw_sqe, write_zeroes_sqe,
};
use pontoon_nvmf::pdu::{
    self, CH_LEN, CommonHeader, DataHeader, Digests, Fes, IcReq, PduType, TERM_MAX_PLEN,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// An admin queue connected (not enabled) with `digests`.
fn admin_queue(addr: SocketAddr, digests: Digests) -> Queue {
    Queue::connect(
        addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            hostid: hostid_for(HOST),
            digests,
            ..Default::default()
        },
    )
    .expect("admin queue connects")
}

/// A Keep Alive command capsule with command id `cid`.
fn keep_alive_capsule(cid: u16, digests: Digests) -> Vec<u8> {
    pdu::header(
        PduType::CapsuleCmd,
        0,
        &Sqe::new(admin_op::KEEP_ALIVE, cid).0,
        0,
        digests,
    )
}

/// Rewrites the common header of `pdu` with `f` (no digest update).
fn patch(mut pdu: Vec<u8>, f: impl FnOnce(&mut CommonHeader)) -> Vec<u8> {
    let mut ch = [0u8; CH_LEN];
    ch.copy_from_slice(&pdu[..CH_LEN]);
    let mut c = CommonHeader::decode(&ch);
    f(&mut c);
    c.encode(&mut pdu);
    pdu
}

/// Expects the next PDU to be a C2HTermReq, then the connection closed;
/// returns (FES, FEI). A quoted header must be a prefix of `sent`.
fn expect_term(q: &mut Queue, sent: &[u8]) -> (u16, u32) {
    let p = q.recv_pdu().expect("a C2HTermReq");
    check_term(&p, sent);
    assert!(
        q.wait_closed(Duration::from_secs(3)).unwrap(),
        "connection left open after a C2HTermReq"
    );
    p.term().unwrap()
}

fn check_term(p: &RawPdu, sent: &[u8]) {
    assert_eq!(p.pdu_type, PduType::C2HTermReq, "{p:?}");
    assert!(p.header.len() + p.data.len() <= TERM_MAX_PLEN);
    let n = p.data.len().min(sent.len());
    assert_eq!(
        p.data[..n],
        sent[..n],
        "the quoted header is not the offending PDU's"
    );
}

const INVALID_HEADER_FIELD: u16 = Fes::InvalidHeaderField as u16;
const SEQUENCE_ERROR: u16 = Fes::SequenceError as u16;

#[test]
fn bad_hlen_is_terminated() {
    let t = target();
    let mut q = admin_queue(t.addr, NO_DIGESTS);
    let bad = patch(keep_alive_capsule(7, NO_DIGESTS), |c| c.hlen = 64);
    q.send_raw(&bad).unwrap();
    assert_eq!(expect_term(&mut q, &bad), (INVALID_HEADER_FIELD, 2));
    assert_target_healthy(t.addr);
}

#[test]
fn bad_pdo_is_terminated() {
    let t = target();
    let mut q = admin_queue(t.addr, NO_DIGESTS);
    // A capsule with 4 KiB of data whose PDO points into the header.
    let mut bad = patch(
        pdu::header(
            PduType::CapsuleCmd,
            0,
            &Sqe::new(admin_op::KEEP_ALIVE, 7).0,
            4096,
            NO_DIGESTS,
        ),
        |c| c.pdo = 8,
    );
    bad.extend_from_slice(&[0xAB; 4096]);
    q.send_raw(&bad).unwrap();
    assert_eq!(expect_term(&mut q, &bad), (INVALID_HEADER_FIELD, 3));
    assert_target_healthy(t.addr);
}

#[test]
fn bad_plen_is_terminated() {
    let t = target();
    let mut q = admin_queue(t.addr, NO_DIGESTS);
    let bad = patch(keep_alive_capsule(7, NO_DIGESTS), |c| c.plen = 10);
    q.send_raw(&bad).unwrap();
    assert_eq!(expect_term(&mut q, &bad), (INVALID_HEADER_FIELD, 4));
    assert_target_healthy(t.addr);
}

#[test]
fn huge_plen_is_refused_without_waiting_for_the_data() {
    let t = target();
    let mut q = admin_queue(t.addr, NO_DIGESTS);
    // A capsule claiming 4 GiB of in-capsule data (PDO right after the
    // header, as for real data).
    let bad = patch(
        pdu::header(
            PduType::CapsuleCmd,
            0,
            &Sqe::new(admin_op::KEEP_ALIVE, 7).0,
            4096,
            NO_DIGESTS,
        ),
        |c| c.plen = u32::MAX,
    );
    q.send_raw(&bad).unwrap();
    let (fes, fei) = expect_term(&mut q, &bad);
    assert!(
        fes == Fes::DataLimitExceeded as u16 || (fes, fei) == (INVALID_HEADER_FIELD, 4),
        "FES {fes} FEI {fei}"
    );
    assert_target_healthy(t.addr);
}

#[test]
fn digest_flag_disagreeing_with_the_negotiation_is_terminated() {
    let t = target();
    // Header digest flag on a connection without digests.
    let mut q = admin_queue(t.addr, NO_DIGESTS);
    let bad = patch(keep_alive_capsule(7, NO_DIGESTS), |c| {
        c.flags |= pdu::FLAG_HDGST
    });
    q.send_raw(&bad).unwrap();
    assert_eq!(expect_term(&mut q, &bad), (INVALID_HEADER_FIELD, 1));
    // No header digest flag (and no digest) on a connection with them.
    let hd = Digests {
        header: true,
        data: false,
    };
    let mut q = admin_queue(t.addr, hd);
    let good = keep_alive_capsule(8, hd);
    let bad = patch(good[..pdu::CMD_HLEN].to_vec(), |c| {
        c.flags &= !pdu::FLAG_HDGST;
        c.plen = pdu::CMD_HLEN as u32;
    });
    q.send_raw(&bad).unwrap();
    assert_eq!(expect_term(&mut q, &bad), (INVALID_HEADER_FIELD, 1));
    assert_target_healthy(t.addr);
}

#[test]
fn unknown_and_wrong_direction_pdu_types_are_terminated() {
    let t = target();
    for pdu_type in [
        0x0F,
        0x08,
        0xFF,
        PduType::CapsuleResp as u8,
        PduType::R2T as u8,
    ] {
        let mut q = admin_queue(t.addr, NO_DIGESTS);
        let mut bad = vec![0u8; 24];
        CommonHeader {
            pdu_type,
            flags: 0,
            hlen: 24,
            pdo: 0,
            plen: 24,
        }
        .encode(&mut bad);
        q.send_raw(&bad).unwrap();
        assert_eq!(
            expect_term(&mut q, &bad),
            (INVALID_HEADER_FIELD, 0),
            "PDU type {pdu_type:#x}"
        );
    }
    assert_target_healthy(t.addr);
}

#[test]
fn header_digest_mismatch_is_terminated() {
    let t = target();
    let mut q = admin_queue(t.addr, BOTH_DIGESTS);
    let mut bad = keep_alive_capsule(7, BOTH_DIGESTS);
    let n = bad.len();
    bad[n - 1] ^= 0x40;
    q.send_raw(&bad).unwrap();
    let (fes, _) = expect_term(&mut q, &bad);
    assert_eq!(fes, Fes::HeaderDigest as u16);
    // Same with a corrupted header byte instead of the digest.
    let mut q = admin_queue(t.addr, BOTH_DIGESTS);
    let mut bad = keep_alive_capsule(7, BOTH_DIGESTS);
    bad[CH_LEN + 2] ^= 1;
    q.send_raw(&bad).unwrap();
    let (fes, _) = expect_term(&mut q, &bad);
    assert_eq!(fes, Fes::HeaderDigest as u16);
    assert_target_healthy(t.addr);
}

#[test]
fn second_icreq_is_a_sequence_error() {
    let t = target();
    let mut q = admin_queue(t.addr, NO_DIGESTS);
    let again = IcReq {
        pfv: 0,
        hpda: 0,
        digests: NO_DIGESTS,
        maxr2t: 0,
    }
    .encode();
    q.send_raw(&again).unwrap();
    assert_eq!(expect_term(&mut q, &again).0, SEQUENCE_ERROR);
    // Also before the Connect.
    let mut q = Queue::handshake(t.addr, NO_DIGESTS, DEFAULT_TIMEOUT).unwrap();
    q.send_raw(&again).unwrap();
    assert_eq!(expect_term(&mut q, &again).0, SEQUENCE_ERROR);
    assert_target_healthy(t.addr);
}

/// Sends `bytes` as the first thing on a new connection; returns the one
/// PDU the target answers and whether it then closed.
fn first_pdu(addr: SocketAddr, bytes: &[u8]) -> (RawPdu, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let p =
        read_pdu(&mut s, NO_DIGESTS, &[PduType::IcResp, PduType::C2HTermReq]).expect("an answer");
    let mut rest = Vec::new();
    let closed = match s.read_to_end(&mut rest) {
        Ok(_) => rest.is_empty(),
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
        ),
    };
    (p, closed)
}

#[test]
fn a_pdu_before_icreq_is_a_sequence_error() {
    let t = target();
    let bad = keep_alive_capsule(1, NO_DIGESTS);
    let (p, closed) = first_pdu(t.addr, &bad);
    check_term(&p, &bad);
    assert_eq!(p.term().unwrap().0, SEQUENCE_ERROR);
    assert!(closed);
    // H2CData before anything too.
    let h2c = DataHeader {
        cccid: 0,
        ttag: 0,
        offset: 0,
        len: 4,
    }
    .encode(PduType::H2CData, pdu::FLAG_LAST_PDU, NO_DIGESTS);
    let mut bad = h2c.clone();
    bad.extend_from_slice(&[1, 2, 3, 4]);
    let (p, closed) = first_pdu(t.addr, &bad);
    check_term(&p, &bad);
    assert_eq!(p.term().unwrap().0, SEQUENCE_ERROR);
    assert!(closed);
    assert_target_healthy(t.addr);
}

#[test]
fn icreq_with_an_unsupported_pfv_is_refused() {
    let t = target();
    let bad = IcReq {
        pfv: 1,
        hpda: 0,
        digests: NO_DIGESTS,
        maxr2t: 0,
    }
    .encode();
    let (p, closed) = first_pdu(t.addr, &bad);
    check_term(&p, &bad);
    assert_eq!(p.term().unwrap(), (Fes::UnsupportedParameter as u16, 8));
    assert!(closed);
    assert_target_healthy(t.addr);
}

#[test]
fn host_termination_request_closes_the_connection() {
    let t = target();
    let mut q = admin_queue(t.addr, NO_DIGESTS);
    let term = pdu::term_req(PduType::H2CTermReq, Fes::HeaderDigest, 0, &[0u8; 24]);
    q.send_raw(&term).unwrap();
    assert!(q.wait_closed(Duration::from_secs(3)).unwrap());
    assert_target_healthy(t.addr);
}

/// An I/O queue with a write of `len` bytes at LBA 10 waiting for its
/// data: returns the controller (kept alive), the queue, the write's cid
/// and the R2T asking for its data.
fn write_awaiting_data(
    addr: SocketAddr,
    len: usize,
    digests: Digests,
) -> (Controller, Queue, u16, DataHeader) {
    let mut c = controller(addr, 1, digests);
    let mut q = c.take_io_queues().pop().unwrap();
    let data = pattern(5, len);
    let sqe = rw_sqe(io_op::WRITE, 1, 10, (len / BLOCK) as u32, false).unwrap();
    let cid = q.submit(sqe, Some(&data), 0).unwrap();
    let r2t = q.recv_pdu().expect("an R2T");
    assert_eq!(r2t.pdu_type, PduType::R2T, "{r2t:?}");
    let dh = r2t.data_header().unwrap();
    assert_eq!(dh.cccid, cid);
    assert_eq!(dh.offset, 0);
    assert!(dh.len > 0 && dh.len as usize <= len, "{dh:?}");
    (c, q, cid, dh)
}

fn h2c(dh: DataHeader, digests: Digests, corrupt_digest: bool) -> Vec<u8> {
    let mut b = dh.encode(PduType::H2CData, pdu::FLAG_LAST_PDU, digests);
    let data = pattern(dh.offset as u64, dh.len as usize);
    b.extend_from_slice(&data);
    if digests.data {
        let d = pdu::digest(&data) ^ u32::from(corrupt_digest);
        b.extend_from_slice(&d.to_le_bytes());
    }
    b
}

#[test]
fn h2c_data_with_an_unknown_ttag_is_terminated() {
    let t = target();
    let (_c, mut q, cid, dh) = write_awaiting_data(t.addr, 64 << 10, NO_DIGESTS);
    let bad = h2c(
        DataHeader {
            cccid: cid,
            ttag: dh.ttag ^ 0x5A5A,
            offset: 0,
            len: 4096,
        },
        NO_DIGESTS,
        false,
    );
    q.send_raw(&bad).unwrap();
    let (fes, fei) = expect_term(&mut q, &bad);
    assert!(
        (fes, fei) == (INVALID_HEADER_FIELD, 10) || fes == SEQUENCE_ERROR,
        "FES {fes} FEI {fei}"
    );
    assert_target_healthy(t.addr);
}

#[test]
fn h2c_data_outside_the_transfer_is_terminated() {
    let t = target();
    // Past the command's data.
    let (_c, mut q, cid, dh) = write_awaiting_data(t.addr, 64 << 10, NO_DIGESTS);
    let bad = h2c(
        DataHeader {
            cccid: cid,
            ttag: dh.ttag,
            offset: 64 << 10,
            len: 4096,
        },
        NO_DIGESTS,
        false,
    );
    q.send_raw(&bad).unwrap();
    assert_eq!(expect_term(&mut q, &bad).0, Fes::DataOutOfRange as u16);
    // Longer than the R2T asked for.
    let (_c, mut q, cid, dh) = write_awaiting_data(t.addr, 64 << 10, NO_DIGESTS);
    let bad = h2c(
        DataHeader {
            cccid: cid,
            ttag: dh.ttag,
            offset: 0,
            len: dh.len + 4096,
        },
        NO_DIGESTS,
        false,
    );
    q.send_raw(&bad).unwrap();
    assert_eq!(expect_term(&mut q, &bad).0, Fes::DataOutOfRange as u16);
    assert_target_healthy(t.addr);
}

#[test]
fn data_digest_mismatch_fails_only_the_command() {
    let t = target();
    let dd = Digests {
        header: false,
        data: true,
    };
    // In-capsule write data.
    let mut c = controller(t.addr, 1, dd);
    let q = c.io(0);
    let data = pattern(300, BLOCK);
    let mut sqe = rw_sqe(io_op::WRITE, 1, 300, 1, false).unwrap();
    sqe.0[2..4].copy_from_slice(&0x777u16.to_le_bytes());
    sqe.set_sgl(Sgl {
        addr: 0,
        len: BLOCK as u32,
        id: SGL_IN_CAPSULE,
    });
    let mut bad = pdu::header(PduType::CapsuleCmd, 0, &sqe.0, BLOCK, dd);
    bad.extend_from_slice(&data);
    bad.extend_from_slice(&(pdu::digest(&data) ^ 0x100).to_le_bytes());
    q.send_raw(&bad).unwrap();
    let p = q.recv_pdu().unwrap();
    let cqe = p.cqe().unwrap_or_else(|| panic!("a response, not {p:?}"));
    assert_eq!(cqe.cid, 0x777);
    assert_eq!(cqe.status, Status::TRANSIENT_TRANSPORT);
    assert_eq!(
        q.read(1, 300, 1).unwrap(),
        vec![0u8; BLOCK],
        "bad data written"
    );
    q.write(1, 300, &data, false).unwrap();
    assert_eq!(q.read(1, 300, 1).unwrap(), data);

    // H2CData.
    let (_c, mut q, cid, dh) = write_awaiting_data(t.addr, 16 << 10, dd);
    assert_eq!(dh.len, 16 << 10);
    q.send_raw(&h2c(dh, dd, true)).unwrap();
    let p = q.recv_pdu().unwrap();
    let cqe = p.cqe().unwrap_or_else(|| panic!("a response, not {p:?}"));
    assert_eq!(cqe.cid, cid);
    assert_eq!(cqe.status, Status::TRANSIENT_TRANSPORT);
    assert_eq!(
        q.read(1, 10, 4).unwrap(),
        vec![0u8; 16 << 10],
        "bad data written"
    );
    q.write(1, 10, &pattern(9, 16 << 10), false).unwrap();
    assert_eq!(q.read(1, 10, 4).unwrap(), pattern(9, 16 << 10));
    assert_target_healthy(t.addr);
}

fn status_of(q: &mut Queue, sqe: Sqe, out: Option<&[u8]>, in_len: usize) -> Status {
    q.call(sqe, out, in_len).expect("a completion").0.status
}

#[test]
fn bad_io_commands_get_their_status() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let nsze = VOL_SIZE / BLOCK as u64;
    let q = c.io(0);
    let read = |lba: u64, nlb: u32| rw_sqe(io_op::READ, 1, lba, nlb, false).unwrap();
    let write = |lba: u64, nlb: u32| rw_sqe(io_op::WRITE, 1, lba, nlb, false).unwrap();

    // Out of range.
    assert_eq!(
        status_of(q, read(nsze, 1), None, BLOCK),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(
        status_of(q, read(nsze - 1, 2), None, 2 * BLOCK),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(
        status_of(q, read(u64::MAX - 1, 2), None, 2 * BLOCK),
        Status::LBA_OUT_OF_RANGE
    );
    let two = pattern(1, 2 * BLOCK);
    assert_eq!(
        status_of(q, write(nsze - 1, 2), Some(&two), 0),
        Status::LBA_OUT_OF_RANGE
    );
    let big = pattern(2, 64 << 10);
    assert_eq!(
        status_of(q, write(nsze - 8, 16), Some(&big), 0),
        Status::LBA_OUT_OF_RANGE,
        "R2T-sized write past the end"
    );
    assert_eq!(
        status_of(q, write_zeroes_sqe(1, nsze - 1, 2, false).unwrap(), None, 0),
        Status::LBA_OUT_OF_RANGE
    );
    let (dsm, ranges) = pontoon_nvmf::initiator::dsm_deallocate(1, &[(nsze - 1, 2)]).unwrap();
    assert_eq!(
        status_of(q, dsm, Some(&ranges), 0),
        Status::LBA_OUT_OF_RANGE
    );
    // The last block itself is fine.
    assert_eq!(
        status_of(q, read(nsze - 1, 1), None, BLOCK),
        Status::SUCCESS
    );

    // Unknown opcodes, on the I/O and the admin queue.
    assert_eq!(
        status_of(q, Sqe::new(0x55, 0), None, 0),
        Status::INVALID_OPCODE
    );
    assert_eq!(
        status_of(c.admin(), Sqe::new(0x55, 0), None, 0),
        Status::INVALID_OPCODE
    );
    let q = c.io(0);

    // Namespaces that do not exist.
    for nsid in [0, 2, 99, 0xFFFF_FFFF] {
        let sqe = rw_sqe(io_op::READ, nsid, 0, 1, false).unwrap();
        assert_eq!(
            status_of(q, sqe, None, BLOCK),
            Status::INVALID_NAMESPACE,
            "nsid {nsid:#x}"
        );
    }

    // SGL length disagreeing with NLB.
    let sgl_bad = |s: Status| s == Status::SGL_LENGTH_INVALID || s == Status::INVALID_FIELD;
    let s = status_of(q, read(0, 2), None, BLOCK);
    assert!(sgl_bad(s), "read of 2 blocks into 4 KiB: {s:?}");
    let s = status_of(q, write(0, 1), Some(&two), 0);
    assert!(sgl_bad(s), "in-capsule write of 8 KiB for 1 block: {s:?}");
    let s = status_of(q, write(0, 32), Some(&big), 0);
    assert!(sgl_bad(s), "64 KiB for 32 blocks: {s:?}");
    assert_eq!(
        q.read(1, 0, 2).unwrap(),
        vec![0u8; 2 * BLOCK],
        "nothing written"
    );

    // Over MDTS (1 MiB).
    let s = status_of(q, read(0, 512), None, 2 << 20);
    assert_eq!(s, Status::INVALID_FIELD, "2 MiB read");
    let huge = pattern(3, 2 << 20);
    let s = status_of(q, write(0, 512), Some(&huge), 0);
    assert_eq!(s, Status::INVALID_FIELD, "2 MiB write");

    // An SGL type the target does not take (keyed data block).
    let mut sqe = read(0, 1);
    sqe.0[2..4].copy_from_slice(&0x0999u16.to_le_bytes());
    sqe.set_sgl(Sgl {
        addr: 0x1000,
        len: BLOCK as u32,
        id: 0x40,
    });
    let capsule = pdu::header(PduType::CapsuleCmd, 0, &sqe.0, 0, NO_DIGESTS);
    q.send_raw(&capsule).unwrap();
    let cqe = q.recv_pdu().unwrap().cqe().expect("a response");
    assert_eq!(cqe.cid, 0x0999);
    assert!(!cqe.status.is_success(), "{cqe:?}");

    // The queue still works.
    q.write(1, 0, &two, false).unwrap();
    assert_eq!(q.read(1, 0, 2).unwrap(), two);
}

#[test]
fn bad_admin_and_fabrics_commands_get_their_status() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    // More queues than the target has: clamped, not failed.
    let (nsq, ncq) = c.set_number_of_queues(64).unwrap();
    assert_eq!((nsq, ncq), (16, 16));
    let dw0 = c
        .get_features(pontoon_nvmf::initiator::feature::NUM_QUEUES, 0)
        .unwrap();
    assert_eq!(dw0, 15 | (15 << 16));
    // A queue id past what was granted is refused.
    let e = Queue::connect(
        t.addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            hostid: hostid_for(HOST),
            qid: 17,
            sqsize: 31,
            kato_ms: 0,
            cntlid: c.cntlid(),
            digests: NO_DIGESTS,
        },
    )
    .unwrap_err();
    assert_eq!(e.status().map(|s| s.sct), Some(1), "qid 17: {e}");
    // An I/O queue bigger than CAP.MQES + 1.
    let e = Queue::connect(
        t.addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            hostid: hostid_for(HOST),
            qid: 2,
            sqsize: 1024,
            kato_ms: 0,
            cntlid: c.cntlid(),
            digests: NO_DIGESTS,
        },
    )
    .unwrap_err();
    assert_eq!(e.status().map(|s| s.sct), Some(1), "SQSIZE 1024: {e}");
    // Identify Namespace: NSID 0 and the broadcast NSID are invalid; an
    // inactive NSID in 1..=NN gets a zeroed structure.
    for nsid in [0, 0xFFFF_FFFF] {
        let e = c.identify_namespace(nsid).unwrap_err();
        assert_eq!(
            e.status(),
            Some(Status::INVALID_NAMESPACE),
            "{nsid:#x}: {e}"
        );
    }
    assert!(c.identify().nn >= 7);
    let inactive = c.identify_namespace(7).unwrap();
    assert_eq!(
        (inactive.nsze, inactive.ncap, inactive.lbaf[0].1),
        (0, 0, 0)
    );
    // An unknown CNS.
    let mut sqe = Sqe::new(admin_op::IDENTIFY, 0);
    sqe.set_dword(10, 0x7E);
    let (cqe, _) = c.admin().call(sqe, None, 4096).unwrap();
    assert_eq!(cqe.status, Status::INVALID_FIELD);
    // A log page that does not exist.
    let e = c.get_log_page(0xBE, 512, 0).unwrap_err();
    assert_eq!(e.status(), Some(Status::INVALID_LOG_PAGE), "{e}");
    // A second Connect on a live queue.
    let mut connect = Sqe::new(FABRICS_OPCODE, 0);
    connect.0[4] = pontoon_nvmf::command::fctype::CONNECT;
    let (cqe, _) = c.admin().call(connect, Some(&[0u8; 1024]), 0).unwrap();
    assert!(!cqe.status.is_success(), "{cqe:?}");
    // Asynchronous Event Requests beyond AERL + 1 are refused at once;
    // the others stay outstanding.
    let limit = usize::from(c.identify().aerl) + 1;
    let aers: Vec<u16> = (0..limit)
        .map(|_| c.submit_async_event().unwrap())
        .collect();
    let extra = c.submit_async_event().unwrap();
    let cqe = c.wait_async_event(extra, Duration::from_secs(2)).unwrap();
    assert_eq!(cqe.status, Status::AER_LIMIT);
    assert!(matches!(
        c.wait_async_event(aers[0], Duration::from_millis(100)),
        Err(Error::Timeout)
    ));
    // Abort: a command that is not there is "not aborted" (DW0 bit 0).
    let mut abort = Sqe::new(admin_op::ABORT, 0);
    abort.set_dword(10, 0x7777 << 16);
    let (cqe, _) = c.admin().call(abort, None, 0).unwrap();
    assert_eq!((cqe.status, cqe.dw0 & 1), (Status::SUCCESS, 1));
    // A property that does not exist.
    let e = c.property_get(0x4000, false).unwrap_err();
    assert!(e.status().is_some(), "{e}");
    // Everything still works.
    c.keep_alive().unwrap();
    assert_eq!(c.io(0).read(1, 0, 1).unwrap(), vec![0u8; BLOCK]);
}

#[test]
fn io_before_enable_is_refused() {
    let t = target();
    // Connected but never enabled: an I/O queue cannot join.
    let mut admin = admin_queue(t.addr, NO_DIGESTS);
    let e = Queue::connect(
        t.addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            hostid: hostid_for(HOST),
            qid: 1,
            sqsize: 31,
            kato_ms: 0,
            cntlid: admin.cntlid(),
            digests: NO_DIGESTS,
        },
    );
    assert!(
        matches!(e, Err(Error::Status { .. })),
        "I/O queue of a disabled controller: {e:?}"
    );
    // The admin queue itself is still up (Fabrics commands work before
    // enable).
    admin.property_get(0x1C, false).unwrap();
}

/// What a fuzz case sends, and after which part of the set-up.
#[derive(Debug, Clone)]
struct Case {
    /// 0: before ICReq, 1: after ICResp, 2: after Connect.
    stage: u8,
    bytes: Vec<u8>,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let garbage = proptest::collection::vec(any::<u8>(), 1..600);
    let header = (
        prop_oneof![0u8..=10, any::<u8>()],
        any::<u8>(),
        prop_oneof![Just(None), any::<u8>().prop_map(Some)],
        any::<u8>(),
        prop_oneof![0u32..400, any::<u32>()],
        proptest::collection::vec(any::<u8>(), 0..400),
    )
        .prop_map(|(t, flags, hlen, pdo, plen, body)| {
            let hlen = hlen.unwrap_or_else(|| PduType::from_u8(t).map_or(24, |t| t.hlen() as u8));
            let mut b = vec![0u8; CH_LEN];
            CommonHeader {
                pdu_type: t,
                flags,
                hlen,
                pdo,
                plen,
            }
            .encode(&mut b);
            b.extend_from_slice(&body);
            b
        });
    (0u8..3, prop_oneof![garbage, header]).prop_map(|(stage, bytes)| Case { stage, bytes })
}

/// One fuzz case: send, half-close, and require the target to answer
/// with well-formed PDUs and close within 5 s.
fn run_case(addr: SocketAddr, case: &Case) -> Result<(), TestCaseError> {
    let mut holder;
    let stream: TcpStream = match case.stage {
        0 => TcpStream::connect(addr).map_err(|e| TestCaseError::fail(e.to_string()))?,
        _ => {
            holder = Queue::handshake(addr, NO_DIGESTS, DEFAULT_TIMEOUT)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            if case.stage == 2 {
                holder
                    .fabrics_connect(&ConnectParams {
                        subnqn: NQN.into(),
                        hostnqn: HOST.into(),
                        hostid: hostid_for(HOST),
                        ..Default::default()
                    })
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            holder.socket().try_clone().unwrap()
        }
    };
    let mut s = stream;
    // The target may close before taking everything: that is fine.
    let _ = s.write_all(&case.bytes);
    let _ = s.shutdown(Shutdown::Write);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        prop_assert!(
            !left.is_zero(),
            "target neither answered nor closed within 5 s"
        );
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                break;
            }
            Err(e) => {
                return Err(TestCaseError::fail(format!(
                    "target neither answered nor closed: {e}"
                )));
            }
        }
    }
    // Whatever it sent is whole, well-formed PDUs.
    let mut r = Cursor::new(&got);
    while (r.position() as usize) < got.len() {
        let p = read_pdu(
            &mut r,
            NO_DIGESTS,
            &[
                PduType::IcResp,
                PduType::C2HTermReq,
                PduType::CapsuleResp,
                PduType::R2T,
                PduType::C2HData,
            ],
        );
        prop_assert!(p.is_ok(), "target sent {got:02x?}: {p:?}");
    }
    Ok(())
}

#[test]
fn random_bytes_and_headers_never_hang_or_kill_the_target() {
    let t = target();
    // NVMF_FUZZ_CASES=n runs a longer hunt.
    let cases = std::env::var("NVMF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    });
    let stages: [std::cell::Cell<usize>; 3] = Default::default();
    runner
        .run(&case_strategy(), |case| {
            let n = &stages[usize::from(case.stage)];
            n.set(n.get() + 1);
            run_case(t.addr, &case)
        })
        .unwrap();
    let stages = stages.map(|n| n.get());
    assert!(
        stages.iter().all(|&n| n >= 20),
        "cases per stage {stages:?}"
    );
    assert_target_healthy(t.addr);
}

#[test]
fn many_broken_connections_at_once_leave_others_served() {
    let t = target();
    // Connections that never finish a PDU, open while a host does I/O.
    let mut stuck = Vec::new();
    for i in 0..32u8 {
        let mut s = TcpStream::connect(t.addr).unwrap();
        s.write_all(&[0, 0, 128, 0, 128, 0, 0, i]).unwrap();
        stuck.push(s);
    }
    assert_target_healthy(t.addr);
    drop(stuck);
    assert_target_healthy(t.addr);
}

/// A queue after ICResp, before Connect, that takes 8 KiB in the capsule.
fn unconnected(addr: SocketAddr) -> Queue {
    let mut q = Queue::handshake(addr, NO_DIGESTS, DEFAULT_TIMEOUT).unwrap();
    q.set_in_capsule(8192);
    q
}

/// A Connect command and its data, to be spoiled by the caller.
fn connect_capsule(qid: u16, sqsize: u16, cntlid: u16) -> (Sqe, Vec<u8>) {
    let mut sqe = Sqe::new(FABRICS_OPCODE, 0);
    sqe.0[4] = pontoon_nvmf::command::fctype::CONNECT;
    sqe.0[42..44].copy_from_slice(&qid.to_le_bytes());
    sqe.0[44..46].copy_from_slice(&sqsize.to_le_bytes());
    let mut data = vec![0u8; 1024];
    data[0..16].copy_from_slice(&hostid_for(HOST));
    data[16..18].copy_from_slice(&cntlid.to_le_bytes());
    data[256..256 + NQN.len()].copy_from_slice(NQN.as_bytes());
    data[512..512 + HOST.len()].copy_from_slice(HOST.as_bytes());
    (sqe, data)
}

/// Sends a spoiled Connect; it must be refused with a status (or the
/// connection terminated), never accepted, never left hanging.
fn refused(addr: SocketAddr, sqe: Sqe, data: &[u8]) -> Option<Status> {
    let mut q = unconnected(addr);
    match q.call(sqe, Some(data), 0) {
        Ok((cqe, _)) => {
            assert!(!cqe.status.is_success(), "accepted: {cqe:?}");
            Some(cqe.status)
        }
        Err(Error::Terminated { .. }) | Err(Error::Closed) => None,
        Err(e) => panic!("spoiled Connect: {e}"),
    }
}

#[test]
fn spoiled_connects_are_refused() {
    let t = target();
    // The good one works (the helpers are right).
    let (sqe, data) = connect_capsule(0, 31, 0xFFFF);
    let mut q = unconnected(t.addr);
    let (cqe, _) = q.call(sqe, Some(&data), 0).unwrap();
    assert_eq!(cqe.status, Status::SUCCESS);
    let cntlid = cqe.dw0 as u16;

    let (mut sqe, data) = connect_capsule(0, 31, 0xFFFF);
    sqe.0[40] = 1; // RECFMT
    assert_eq!(
        refused(t.addr, sqe, &data),
        Some(Status::CONNECT_INCOMPATIBLE_FORMAT)
    );
    // Subsystem NQN without its terminating NUL.
    let (sqe, mut data) = connect_capsule(0, 31, 0xFFFF);
    data[256..512].fill(b'a');
    assert_eq!(
        refused(t.addr, sqe, &data),
        Some(Status::CONNECT_INVALID_PARAMETERS)
    );
    // Host NQN without its terminating NUL.
    let (sqe, mut data) = connect_capsule(0, 31, 0xFFFF);
    data[512..768].fill(b'b');
    let s = refused(t.addr, sqe, &data);
    assert!(
        s == Some(Status::CONNECT_INVALID_PARAMETERS) || s == Some(Status::CONNECT_INVALID_HOST),
        "{s:?}"
    );
    // Short Connect data.
    let (sqe, data) = connect_capsule(0, 31, 0xFFFF);
    refused(t.addr, sqe, &data[..512]);
    // An admin queue that names a controller; an I/O queue that does not.
    let (sqe, data) = connect_capsule(0, 31, cntlid);
    assert_eq!(refused(t.addr, sqe, &data).map(|s| s.sct), Some(1));
    let (sqe, data) = connect_capsule(1, 31, 0xFFFF);
    assert_eq!(refused(t.addr, sqe, &data).map(|s| s.sct), Some(1));
    // SQSIZE 0 (a queue of one entry) on an admin and on an I/O queue.
    let (sqe, data) = connect_capsule(0, 0, 0xFFFF);
    assert_eq!(refused(t.addr, sqe, &data).map(|s| s.sct), Some(1));
    let c = controller(t.addr, 0, NO_DIGESTS);
    let (sqe, data) = connect_capsule(1, 0, c.cntlid());
    assert_eq!(refused(t.addr, sqe, &data).map(|s| s.sct), Some(1));
    // A command other than Connect first.
    let mut q = unconnected(t.addr);
    match q.call(Sqe::new(admin_op::KEEP_ALIVE, 0), None, 0) {
        Ok((cqe, _)) => assert!(!cqe.status.is_success(), "{cqe:?}"),
        Err(Error::Terminated { .. }) | Err(Error::Closed) => {}
        Err(e) => panic!("{e}"),
    }
    assert_target_healthy(t.addr);
}

/// Random commands, framed correctly, on both queues of a live
/// controller: each must complete (any status) or end the connection with
/// a termination request, within the timeout, with data of the length
/// asked for; the target must stay healthy.
#[test]
fn random_commands_always_complete() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const ADMIN_OPS: [u8; 11] = [
        0x02, 0x06, 0x08, 0x09, 0x0A, 0x18, 0x7F, 0x10, 0x80, 0x81, 0xC0,
    ];
    const IO_OPS: [u8; 10] = [0x00, 0x01, 0x02, 0x08, 0x09, 0x04, 0x05, 0x7F, 0x0D, 0x99];
    let t = target();
    let seed = 0x00c0_ffee_u64;
    let mut rng = StdRng::seed_from_u64(seed);
    let nsze = VOL_SIZE / BLOCK as u64;
    let mut c: Controller = controller(t.addr, 1, NO_DIGESTS);
    let (mut completed, mut ended, mut rw_ok) = (0, 0, 0);
    let mut statuses = std::collections::BTreeMap::new();
    // NVMF_FUZZ_COMMANDS=n runs a longer hunt.
    let n: u64 = std::env::var("NVMF_FUZZ_COMMANDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    for i in 0..n {
        let admin = rng.random_bool(0.4);
        let opcode = if admin {
            ADMIN_OPS[rng.random_range(0..ADMIN_OPS.len())]
        } else {
            IO_OPS[rng.random_range(0..IO_OPS.len())]
        };
        let mut sqe = Sqe::new(opcode, 0);
        let nsid = match rng.random_range(0..6) {
            0 => 0,
            1 => 0xFFFF_FFFF,
            2 => rng.random(),
            _ => 1,
        };
        sqe.set_nsid(nsid);
        for dw in 10..16 {
            let v: u32 = match rng.random_range(0..4) {
                0 => rng.random(),
                1 => rng.random_range(0..16),
                2 => 0,
                _ => rng.random_range(0..(1 << 16)),
            };
            sqe.set_dword(dw, v);
        }
        if opcode == FABRICS_OPCODE {
            // A random type (never Connect, tested apart) and attributes;
            // Property Set never on CC (disable and shutdown are tested
            // elsewhere).
            sqe.0[4] = [0x00, 0x04, 0x08, 0x05, 0xFF][rng.random_range(0..5)];
            sqe.0[40] = rng.random_range(0..3);
            let ofst: u32 = rng.random_range(0..0x40);
            let ofst = if ofst == 0x14 { 0x18 } else { ofst };
            sqe.0[44..48].copy_from_slice(&ofst.to_le_bytes());
        }
        let mut len = {
            let max_len = if rng.random_bool(0.9) {
                64 << 10
            } else {
                2 << 20
            };
            match rng.random_range(0..4) {
                0 => 0,
                1 => rng.random_range(1..=max_len),
                _ => rng.random_range(0..=max_len / 4096) * 4096,
            }
        };
        if !admin && matches!(opcode, 0x01 | 0x02 | 0x08) && rng.random_bool(0.7) {
            // Often a valid command, so the success paths are covered too.
            let nlb = rng.random_range(1..=64u32);
            let slba = rng.random_range(0..=nsze - u64::from(nlb));
            sqe.set_nsid(if rng.random_bool(0.9) { 1 } else { nsid });
            sqe.set_dword(10, slba as u32)
                .set_dword(11, (slba >> 32) as u32);
            let flags = sqe.dword(12) & (1 << 30);
            sqe.set_dword(12, (nlb - 1) | flags);
            if rng.random_bool(0.8) {
                len = if opcode == 0x08 {
                    0
                } else {
                    nlb as usize * BLOCK
                };
            }
        }
        // The data direction is the command's: opcode bits 1:0 (FCTYPE's
        // for Fabrics commands). 01b host to controller, 10b controller to
        // host, 00b none (an SGL is still described: nothing may move),
        // 11b bidirectional (not sent with data).
        let direction = if opcode == FABRICS_OPCODE {
            sqe.0[4] & 3
        } else {
            opcode & 3
        };
        let len = if direction == 3 { 0 } else { len };
        let write = direction == 1;
        let data = (write && len > 0).then(|| pattern(i, len));
        let q = if admin { c.admin() } else { c.io(0) };
        let in_len = if data.is_some() { 0 } else { len };
        let cid = q
            .submit(sqe, data.as_deref(), in_len)
            .unwrap_or_else(|e| panic!("command {i} {sqe:?}: submit: {e}"));
        match q.wait_for_timeout(cid, Duration::from_secs(5)) {
            Ok(done) => {
                completed += 1;
                if !admin && matches!(opcode, 0x01 | 0x02) && done.cqe.status.is_success() {
                    let nlb = (sqe.dword(12) & 0xFFFF) as usize + 1;
                    assert_eq!(len, nlb * BLOCK, "command {i} {sqe:?} succeeded");
                    check_moved(&done, len).unwrap_or_else(|e| panic!("command {i} {sqe:?}: {e}"));
                    rw_ok += 1;
                }
                let st = done.cqe.status;
                *statuses.entry((st.sct, st.sc)).or_insert(0) += 1;
            }
            Err(Error::Terminated { .. }) | Err(Error::Closed) => {
                ended += 1;
                c = controller(t.addr, 1, NO_DIGESTS);
            }
            Err(e) => panic!(
                "command {i} {sqe:?} cdw10..15 {:08x?} (seed {seed:#x}), {len} bytes {}: {e}",
                (10..16).map(|d| sqe.dword(d)).collect::<Vec<_>>(),
                if write { "out" } else { "in" }
            ),
        }
    }
    eprintln!(
        "{completed} completed, {rw_ok} reads/writes succeeded, {ended} connections ended; \
         (SCT, SC): count {statuses:?}"
    );
    assert!(
        completed as u64 > n * 2 / 3 && rw_ok >= 50 && statuses.len() >= 6,
        "{completed} completed, {rw_ok} reads/writes succeeded, {ended} connections ended"
    );
    assert_target_healthy(t.addr);
}
