//! Hostile bytes at a real OSD's port (`pontoon up`, three OSD processes,
//! addresses from the map): garbage, a wrong magic, oversized lengths,
//! frames cut short, and well-formed hellos followed by malformed
//! messages. Each connection gets a `Malformed` reply carrying the request
//! id of its header wherever the header could be read, and is closed; the
//! OSD keeps serving — after every case, writes and reads through the
//! client library work, and at the end every acknowledged write reads back
//! and the cluster is still active+clean.

mod common;

use std::cell::RefCell;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::{Cluster, Model, Opts, block, verify, write_load};
use pontoon_client::{Client, Volume};
use pontoon_proto::{
    FrameHeader, HEADER_LEN, Hello, MAGIC, MAX_DATA, MAX_META, Message, MsgType, PROTOCOL_VERSION,
    ReadReq, Reply, Role, Status, Target,
};
use pontoon_types::{Epoch, ObjectId, PgId};

/// How long to wait for the OSD's answer or its close.
const WAIT: Duration = Duration::from_secs(5);

fn header(msg_type: u16, req_id: u64, meta_len: u32, data_len: u32) -> [u8; HEADER_LEN] {
    FrameHeader {
        msg_type,
        flags: 0,
        req_id,
        meta_len,
        data_len,
    }
    .encode()
}

fn frame(req_id: u64, msg: &Message) -> Vec<u8> {
    let meta = msg.encode();
    let mut f = header(msg.msg_type() as u16, req_id, meta.len() as u32, 0).to_vec();
    f.extend_from_slice(&meta);
    f
}

fn hello(req_id: u64) -> Vec<u8> {
    frame(
        req_id,
        &Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            role: Role::Client,
            session: None,
        }),
    )
}

/// A read request about some object (which PG or epoch does not matter:
/// these frames are broken before anyone looks).
fn read_req() -> Message {
    Message::Read(ReadReq {
        target: Target {
            pg: PgId::new(0, 0),
            epoch: Epoch(1),
            oid: ObjectId::new(0, 0),
        },
        offset: 0,
        len: 4096,
        snap: None,
    })
}

/// What the OSD did with a connection after the test's bytes.
#[derive(Debug, Default)]
struct Outcome {
    /// Replies read, with their request ids.
    replies: Vec<(u64, Reply)>,
    /// Whether the OSD closed the connection (end of stream or reset).
    closed: bool,
}

fn read_exact_or_eof(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool, std::io::Error> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Connects to `addr`, sends `parts` (then half-closes if `finish`), and
/// reads replies until the OSD closes the connection or `WAIT` passes.
fn exchange(addr: SocketAddr, parts: &[Vec<u8>], finish: bool) -> Outcome {
    let mut s = TcpStream::connect_timeout(&addr, WAIT).expect("connect to the OSD");
    s.set_read_timeout(Some(WAIT)).unwrap();
    for p in parts {
        // The OSD may close before taking everything: that is an outcome too.
        if s.write_all(p).is_err() {
            break;
        }
    }
    if finish {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut out = Outcome::default();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let mut h = [0u8; HEADER_LEN];
        match read_exact_or_eof(&mut s, &mut h) {
            Ok(true) => {}
            Ok(false) => {
                out.closed = true;
                break;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(_) => {
                out.closed = true;
                break;
            }
        }
        let h = FrameHeader::decode(&h).expect("the OSD sends valid headers");
        assert_eq!(h.msg_type, MsgType::Reply as u16, "the OSD only replies");
        let mut meta = vec![0u8; h.meta_len as usize];
        let mut data = vec![0u8; h.data_len as usize];
        assert!(read_exact_or_eof(&mut s, &mut meta).unwrap_or(false) || meta.is_empty());
        assert!(read_exact_or_eof(&mut s, &mut data).unwrap_or(false) || data.is_empty());
        let Message::Reply(r) = Message::decode(h.msg_type, &meta).expect("a reply") else {
            unreachable!("decoded as a reply")
        };
        out.replies.push((h.req_id, r));
    }
    out
}

/// The connection got exactly `expect` replies — the hello's (`Ok`) if
/// `hello_ok`, then one `Malformed` for `bad_req` if given — and was closed.
fn check(name: &str, addr: SocketAddr, out: &Outcome, hello_ok: Option<u64>, bad_req: Option<u64>) {
    let mut want = Vec::new();
    if let Some(id) = hello_ok {
        want.push((id, Status::Ok));
    }
    if let Some(id) = bad_req {
        want.push((id, Status::Malformed));
    }
    let got: Vec<(u64, Status)> = out.replies.iter().map(|(id, r)| (*id, r.status)).collect();
    assert_eq!(got, want, "{name} at {addr}: replies {:?}", out.replies);
    assert!(
        out.closed,
        "{name} at {addr}: the OSD left the connection open"
    );
}

/// Client-library I/O through every OSD still works: a write of `seed`
/// to each of the volume's first objects, read back.
async fn io_works(vol: &Volume, seed: u64, what: &str) {
    for obj in 0..4u64 {
        let off = obj * (4 << 20) + (seed % 64) * 4096;
        let data = block(seed * 16 + obj);
        vol.write_at(off, &data)
            .await
            .unwrap_or_else(|e| panic!("write after {what}: {e}"));
        let got = vol
            .read_at(off, 4096)
            .await
            .unwrap_or_else(|e| panic!("read after {what}: {e}"));
        assert!(got[..] == data[..], "read after {what} returned other data");
    }
}

#[test]
fn osds_answer_malformed_frames_close_the_connection_and_keep_serving() {
    let c = Cluster::up(Opts {
        osd_size: "256M",
        // The hostile bytes aim at the plain protocol's decoders, behind a
        // plain hello; in a protected mode they never get past the
        // handshake (crates/pontoon/tests/osd_auth.rs tests that).
        ms_mode: "none",
        ..Opts::default()
    });
    // The writers use the first 64 MiB; io_works the 4 objects after it.
    c.three_replica_volume(8, "128M");
    let feed = c.feed();
    let rt = compio::runtime::Runtime::new().unwrap();
    let client = Client::new(feed.clone());
    let vol = client.open("v").expect("open volume");
    let model = Rc::new(RefCell::new(Model::default()));
    rt.block_on(write_load(&vol, Duration::from_secs(1), model.clone(), 1));
    let io_vol = {
        // Objects 16..20 (64 MiB on), away from the writers' region.
        c.cli(&["volume", "create", "io", "--size", "16M"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(v) = client.open("io") {
                break v;
            }
            assert!(Instant::now() < deadline, "volume io never showed up");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let map = c.map();
    let addrs: Vec<SocketAddr> = map.osds.values().flat_map(|o| o.addrs.clone()).collect();
    assert_eq!(addrs.len(), 3, "one shard per OSD: {addrs:?}");

    let garbage: Vec<u8> = (0..64u64)
        .map(|i| pontoon_types::mix64(i) as u8 | 1)
        .collect();
    let garbage_req = u64::from_le_bytes(garbage[8..16].try_into().unwrap());
    let mut wrong_magic = hello(7);
    wrong_magic[..4].copy_from_slice(&(MAGIC ^ 0xffff_ffff).to_le_bytes());
    let huge_meta = header(MsgType::Hello as u16, 11, MAX_META + 1, 0).to_vec();
    let huge_data = header(MsgType::Write as u16, 12, 40, MAX_DATA + 1).to_vec();
    let read = read_req().encode();
    let mut cut_read = header(MsgType::Read as u16, 13, read.len() as u32, 0).to_vec();
    cut_read.extend_from_slice(&read[..5]);
    let mut short_fields = header(MsgType::Read as u16, 14, 3, 0).to_vec();
    short_fields.extend_from_slice(&[1, 2, 3]);
    let unknown_type = header(999, 15, 0, 0).to_vec();
    let mut long_fields = frame(16, &read_req());
    // A read whose field section claims more bytes than a read has.
    long_fields[16..20].copy_from_slice(&((read.len() + 8) as u32).to_le_bytes());
    long_fields.extend_from_slice(&[0xee; 8]);

    let mut seed = 1000;
    for (i, addr) in addrs.iter().enumerate() {
        let addr = *addr;
        type Case = (&'static str, Vec<Vec<u8>>, bool, Option<u64>, Option<u64>);
        let cases: Vec<Case> = vec![
            // name, bytes sent, half-close after, hello answered Ok, Malformed for
            (
                "garbage",
                vec![garbage.clone()],
                false,
                None,
                Some(garbage_req),
            ),
            (
                "wrong magic",
                vec![wrong_magic.clone()],
                false,
                None,
                Some(7),
            ),
            (
                "oversized fields",
                vec![huge_meta.clone()],
                false,
                None,
                Some(11),
            ),
            (
                "half a header, then end of stream",
                vec![hello(1)[..10].to_vec()],
                true,
                None,
                None,
            ),
            (
                "a read as the first frame",
                vec![frame(20, &read_req())],
                false,
                None,
                Some(20),
            ),
            (
                "hello, then oversized data",
                vec![hello(1), huge_data.clone()],
                false,
                Some(1),
                Some(12),
            ),
            (
                "hello, then a frame cut short",
                vec![hello(1), cut_read.clone()],
                true,
                Some(1),
                Some(13),
            ),
            (
                "hello, then a read with 3 bytes of fields",
                vec![hello(1), short_fields.clone()],
                false,
                Some(1),
                Some(14),
            ),
            (
                "hello, then an unknown message type",
                vec![hello(1), unknown_type.clone()],
                false,
                Some(1),
                Some(15),
            ),
            (
                "hello, then a read with trailing bytes in its fields",
                vec![hello(1), long_fields.clone()],
                false,
                Some(1),
                Some(16),
            ),
            (
                "hello, then garbage",
                vec![hello(1), garbage.clone()],
                false,
                Some(1),
                Some(garbage_req),
            ),
        ];
        for (name, parts, finish, hello_ok, bad) in cases {
            let out = exchange(addr, &parts, finish);
            check(name, addr, &out, hello_ok, bad);
            seed += 1;
            rt.block_on(io_works(&io_vol, seed, &format!("{name} at osd #{i}")));
        }
    }

    // Nothing else was disturbed: the load goes on, every acknowledged
    // write reads back, and every PG is still clean in its first interval.
    rt.block_on(write_load(&vol, Duration::from_secs(1), model.clone(), 2));
    rt.block_on(verify(
        &vol,
        &model.borrow(),
        "after the hostile connections",
    ));
    let after = c.wait_clean("after the hostile connections");
    assert_eq!(
        after.epoch, map.epoch,
        "no OSD went down: the map did not change"
    );
    let m = model.borrow();
    assert!(
        m.acks > 100 && m.failures == 0,
        "{} acks, {} failures",
        m.acks,
        m.failures
    );
    drop(m);
    feed.shutdown();
}
