//! Hostile and broken clients: each case asserts the exact reply bytes or
//! the disconnect, then that the server still serves another client.

mod common;

use std::net::{Shutdown, SocketAddr};

use common::*;
use pontoon_nbd::proto::*;

const VOL: u64 = 16 * MIB;

/// A fresh client can still negotiate, write, read back and disconnect.
fn assert_server_healthy(addr: SocketAddr) {
    let mut c = Raw::connect(addr);
    let (size, _) = c.go("vol", false);
    assert_eq!(size, VOL);
    let data = pattern(7, 4096);
    assert_eq!(c.write(1, 8192, &data), 0);
    assert_eq!(c.read(2, 8192, 4096), data);
    c.disconnect();
}

fn simple_reply_bytes(handle: u64, errno: Errno) -> Vec<u8> {
    let mut b = Vec::new();
    encode_simple_reply(&mut b, handle, errno);
    b
}

#[test]
fn unknown_client_flags_are_a_disconnect() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect_bare(server.local_addr());
    assert_eq!(c.handshake_flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    c.send(&0x8000_0001u32.to_be_bytes());
    assert!(c.closed_by_server());
    assert_server_healthy(server.local_addr());
}

#[test]
fn bad_option_magic_is_a_disconnect() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    let mut h = OptionHeader {
        option: OPT_GO,
        length: 0,
    }
    .encode();
    h[0] ^= 0xff;
    c.send(&h);
    assert!(c.closed_by_server());
    assert_server_healthy(server.local_addr());
}

#[test]
fn unknown_option_gets_err_unsup_and_negotiation_continues() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.send_option(0x4242, b"some data");
    let mut expected = Vec::new();
    encode_option_reply(&mut expected, 0x4242, REP_ERR_UNSUP, b"unsupported option");
    assert_eq!(c.read_n(expected.len()), expected);
    // STARTTLS is refused by policy (this server has no TLS configured).
    let r = c.option(OPT_STARTTLS, &[]);
    assert_eq!(
        r,
        vec![(
            REP_ERR_POLICY,
            b"TLS is not enabled on this server".to_vec()
        )]
    );
    // The session is still usable.
    let (size, _) = c.go("vol", true);
    assert_eq!(size, VOL);
    assert_server_healthy(server.local_addr());
}

#[test]
fn malformed_known_options_get_err_invalid() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    // NBD_OPT_LIST takes no data.
    let r = c.option(OPT_LIST, b"x");
    assert_eq!(
        r,
        vec![(REP_ERR_INVALID, b"NBD_OPT_LIST takes no data".to_vec())]
    );
    // NBD_OPT_GO whose name length points past the option.
    let mut data = InfoRequest {
        name: "vol".into(),
        requests: vec![],
    }
    .encode();
    data[3] = 100;
    let r = c.option(OPT_GO, &data);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, REP_ERR_INVALID);
    // Metadata contexts need structured replies first.
    let req = MetaContextRequest {
        export: "vol".into(),
        queries: vec![BASE_ALLOCATION.into()],
    };
    let r = c.option(OPT_SET_META_CONTEXT, &req.encode());
    assert_eq!(
        r,
        vec![(
            REP_ERR_INVALID,
            b"negotiate structured replies first".to_vec()
        )]
    );
    // Oversized option data is skipped and refused.
    let r = c.option(0x77, &vec![0u8; 100 * 1024]);
    assert_eq!(
        r,
        vec![(REP_ERR_TOO_BIG, b"option data too large".to_vec())]
    );
    let (size, _) = c.go("vol", false);
    assert_eq!(size, VOL);
    c.disconnect();
}

#[test]
fn unknown_export_with_go_gets_err_unknown_and_can_retry() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    let req = InfoRequest {
        name: "nosuch".into(),
        requests: vec![INFO_BLOCK_SIZE],
    };
    c.send_option(OPT_GO, &req.encode());
    let mut expected = Vec::new();
    encode_option_reply(
        &mut expected,
        OPT_GO,
        REP_ERR_UNKNOWN,
        b"no volume named 'nosuch'",
    );
    assert_eq!(c.read_n(expected.len()), expected);
    // Same for NBD_OPT_INFO, and the default export when none is configured.
    let r = c.option(
        OPT_INFO,
        &InfoRequest {
            name: String::new(),
            requests: vec![],
        }
        .encode(),
    );
    assert_eq!(
        r,
        vec![(REP_ERR_UNKNOWN, b"no default export is configured".to_vec())]
    );
    let (size, _) = c.go("vol", false);
    assert_eq!(size, VOL);
    c.disconnect();
}

#[test]
fn unknown_export_with_export_name_is_a_disconnect() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.send_option(OPT_EXPORT_NAME, b"nosuch");
    assert!(c.closed_by_server());
    // The known export works through NBD_OPT_EXPORT_NAME, with NO_ZEROES honoured.
    let mut c = Raw::connect(server.local_addr());
    c.send_option(OPT_EXPORT_NAME, b"vol");
    let reply = c.read_n(10);
    assert_eq!(reply[..8], VOL.to_be_bytes());
    let flags = u16::from_be_bytes([reply[8], reply[9]]);
    assert_eq!(flags & TX_HAS_FLAGS, TX_HAS_FLAGS);
    assert_eq!(flags & TX_SEND_DF, 0, "no DF without structured replies");
    assert_eq!(c.write(1, 100, b"hello"), 0);
    assert_eq!(c.read(2, 100, 5), b"hello");
    c.disconnect();
    // Without NO_ZEROES the 124 reserved zero bytes follow.
    let mut c = Raw::connect_bare(server.local_addr());
    c.send(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes());
    c.send_option(OPT_EXPORT_NAME, b"vol");
    let reply = c.read_n(10 + EXPORT_NAME_ZEROES);
    assert!(reply[10..].iter().all(|&b| b == 0));
    assert_eq!(c.read(3, 100, 5), b"hello");
    c.disconnect();
}

#[test]
fn request_with_bad_magic_is_a_disconnect() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    let mut r = Request {
        flags: 0,
        command: Command::Read,
        handle: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    r[3] ^= 1;
    c.send(&r);
    assert!(c.closed_by_server());
    assert_server_healthy(server.local_addr());
}

#[test]
fn read_past_the_end_gets_einval_and_the_connection_continues() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    c.request(Command::Read, 0, 0xabcd, VOL - 4096, 8192);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(0xabcd, Errno::EINVAL)
    );
    // Offset + length overflowing u64 too.
    c.request(Command::Read, 0, 0xabce, u64::MAX - 10, 4096);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(0xabce, Errno::EINVAL)
    );
    // A write past the end: its payload is consumed, the reply is ENOSPC.
    c.request(Command::Write, 0, 0xabcf, VOL - 100, 200);
    c.send(&[9u8; 200]);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(0xabcf, Errno::ENOSPC)
    );
    assert_eq!(c.read(2, VOL - 4096, 4096), vec![0u8; 4096]);
    // Structured replies: a structured error chunk for the read.
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", true);
    c.request(Command::Read, 0, 77, VOL, 1);
    let mut expected = Vec::new();
    encode_error_chunk(
        &mut expected,
        77,
        Errno::EINVAL,
        &format!("range {VOL}+1 is past the end of the export ({VOL} bytes)"),
        true,
    );
    assert_eq!(c.read_n(expected.len()), expected);
    c.disconnect();
}

#[test]
fn oversized_read_gets_an_error_and_the_connection_continues() {
    let server = serve(&[("vol", 64 * MIB)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    c.request(Command::Read, 0, 5, 0, (32 << 20) + 1);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(5, Errno::EINVAL)
    );
    // Exactly the maximum is fine.
    c.request(Command::Read, 0, 6, 0, 32 << 20);
    let r = c.simple_reply();
    assert_eq!((r.handle, r.error), (6, 0));
    assert!(c.read_n(32 << 20).iter().all(|&b| b == 0));
    c.disconnect();
    // With structured replies and DF the error is EOVERFLOW.
    let mut c = Raw::connect(server.local_addr());
    let (_, flags) = c.go("vol", true);
    assert_ne!(flags & TX_SEND_DF, 0);
    c.request(Command::Read, CMD_FLAG_DF, 8, 0, 40 << 20);
    let chunks = c.chunks(8);
    assert!(
        matches!(
            &chunks[..],
            [ChunkPayload::Error {
                error: Errno::EOVERFLOW,
                ..
            }]
        ),
        "{chunks:?}"
    );
    c.disconnect();
}

#[test]
fn oversized_write_gets_einval_then_a_disconnect() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    c.request(Command::Write, 0, 9, 0, 64 << 20);
    c.send(&[1u8; 4096]); // the start of a payload the server will not read
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(9, Errno::EINVAL)
    );
    assert!(c.closed_by_server());
    assert_server_healthy(server.local_addr());
}

#[test]
fn garbage_after_the_handshake_is_a_disconnect() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", true);
    c.send(&pattern(99, 1000));
    assert!(c.closed_by_server());
    // Garbage instead of client flags / options, too.
    let mut c = Raw::connect_bare(server.local_addr());
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(c.closed_by_server());
    assert_server_healthy(server.local_addr());
}

#[test]
fn truncated_requests_end_the_connection_without_a_reply() {
    let server = serve(&[("vol", VOL)]);
    // Half a request header, then end of stream.
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    let r = Request {
        flags: 0,
        command: Command::Read,
        handle: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    c.send(&r[..10]);
    c.s.shutdown(Shutdown::Write).unwrap();
    assert!(c.closed_by_server());
    // A write whose payload stops short.
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    c.request(Command::Write, 0, 2, 0, 8192);
    c.send(&[3u8; 100]);
    c.s.shutdown(Shutdown::Write).unwrap();
    assert!(c.closed_by_server());
    // Nothing of the truncated write landed.
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    assert_eq!(c.read(3, 0, 100), vec![0u8; 100]);
    c.disconnect();
    assert_server_healthy(server.local_addr());
}

#[test]
fn unknown_commands_and_flags_get_einval() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    // NBD_CMD_CACHE (not advertised) and an unknown type.
    c.request(Command::Cache, 0, 1, 0, 4096);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(1, Errno::EINVAL)
    );
    c.request(Command::Unknown(99), 0, 2, 0, 0);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(2, Errno::EINVAL)
    );
    // DF without structured replies; FAST_ZERO (not advertised); unknown bit.
    c.request(Command::Read, CMD_FLAG_DF, 3, 0, 4096);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(3, Errno::EINVAL)
    );
    c.request(Command::WriteZeroes, CMD_FLAG_FAST_ZERO, 4, 0, 4096);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(4, Errno::EINVAL)
    );
    // A write with a bad flag: payload consumed, EINVAL, stream in sync.
    c.request(Command::Write, 1 << 9, 5, 0, 10);
    c.send(&[7u8; 10]);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(5, Errno::EINVAL)
    );
    // Block status without a negotiated context.
    c.request(Command::BlockStatus, 0, 6, 0, 4096);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(6, Errno::EINVAL)
    );
    assert_eq!(c.read(7, 0, 10), vec![0u8; 10]);
    c.disconnect();
}

#[test]
fn trim_zeroes_and_block_status_past_the_end_are_refused_whole() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    let data = pattern(3, 4096);
    assert_eq!(c.write(1, VOL - 4096, &data), 0);
    // Trim: EINVAL. Write zeroes: ENOSPC, like a write. Neither touches
    // the part that is inside the export.
    c.request(Command::Trim, 0, 2, VOL - 4096, 8192);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(2, Errno::EINVAL)
    );
    c.request(Command::WriteZeroes, 0, 3, VOL - 4096, 4097);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(3, Errno::ENOSPC)
    );
    c.request(Command::Trim, 0, 4, u64::MAX - 100, 4096);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(4, Errno::EINVAL)
    );
    assert_eq!(c.read(5, VOL - 4096, 4096), data);
    c.disconnect();
    // Block status past the end: EINVAL, as the protocol asks, in a
    // structured error chunk; one ending exactly at the end is fine.
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", true);
    for (handle, offset, len) in [(6, VOL - 4096, 4097), (7, VOL, 1)] {
        c.request(Command::BlockStatus, 0, handle, offset, len);
        let chunks = c.chunks(handle);
        assert!(
            matches!(
                &chunks[..],
                [ChunkPayload::Error {
                    error: Errno::EINVAL,
                    ..
                }]
            ),
            "{chunks:?}"
        );
    }
    c.request(Command::BlockStatus, 0, 8, VOL - 8192, 8192);
    assert_eq!(
        c.chunks(8),
        vec![ChunkPayload::BlockStatus {
            context_id: 1,
            descriptors: vec![
                BlockDescriptor {
                    length: 4096,
                    flags: STATE_HOLE | STATE_ZERO
                },
                BlockDescriptor {
                    length: 4096,
                    flags: 0
                }
            ]
        }]
    );
    c.disconnect();
    assert_server_healthy(server.local_addr());
}
