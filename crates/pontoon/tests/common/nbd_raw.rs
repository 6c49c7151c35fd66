//! A raw NBD handshake for tests that speak the transmission phase
//! themselves: fixed newstyle, no zeroes, `NBD_OPT_EXPORT_NAME`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const NBD_OPT_EXPORT_NAME: u32 = 1;

/// Opens `export` on the gateway at 127.0.0.1:`port` (reads time out after
/// `timeout`); returns the connection in transmission, the export's size
/// and its transmission flags.
pub fn nbd_export_name(port: u16, export: &str, timeout: Duration) -> (TcpStream, u64, u16) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the gateway");
    s.set_read_timeout(Some(timeout)).expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).expect("greeting");
    assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
    s.write_all(&3u32.to_be_bytes()).expect("client flags");
    let mut opt = b"IHAVEOPT".to_vec();
    opt.extend_from_slice(&NBD_OPT_EXPORT_NAME.to_be_bytes());
    opt.extend_from_slice(&(export.len() as u32).to_be_bytes());
    opt.extend_from_slice(export.as_bytes());
    s.write_all(&opt).expect("export name");
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply)
        .unwrap_or_else(|e| panic!("the gateway refused export {export}: {e}"));
    let size = u64::from_be_bytes(reply[..8].try_into().expect("8 bytes"));
    let flags = u16::from_be_bytes([reply[8], reply[9]]);
    (s, size, flags)
}
