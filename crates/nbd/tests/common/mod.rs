//! Shared helpers for the NBD integration tests: an in-process server over
//! in-memory volumes, a raw protocol client, and runners for the real
//! client tools.
#![allow(dead_code)]

pub mod scenarios;
pub mod tools;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use pontoon_buf::AlignedBuf;
use pontoon_nbd::proto::*;
use pontoon_nbd::{ServerConfig, ServerHandle, start};
use pontoon_volume::{
    BlockVolume, Extent, MemCatalog, MemVolume, VolumeCatalog, VolumeError, VolumeInfo,
};

pub const MIB: u64 = 1 << 20;

/// A server on 127.0.0.1:0 with one worker serving fresh `MemVolume`s.
pub fn serve(volumes: &[(&str, u64)]) -> ServerHandle {
    serve_with(ServerConfig::default(), volumes)
}

/// Like [`serve`] with a custom configuration (its `listen` is replaced).
pub fn serve_with(config: ServerConfig, volumes: &[(&str, u64)]) -> ServerHandle {
    let vols: Vec<(String, u64)> = volumes.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..config
    };
    start(
        config,
        Arc::new(move || {
            let c = MemCatalog::default();
            for (n, s) in &vols {
                c.insert(n, MemVolume::new(*s));
            }
            c
        }),
    )
    .expect("start NBD server")
}

/// Counts the bytes a volume is asked to read and records write-zeroes calls.
#[derive(Clone)]
pub struct CountingVolume {
    pub inner: MemVolume,
    pub read_bytes: Arc<AtomicU64>,
    /// (offset, len, may_unmap) of every write_zeroes.
    pub zeroes: Arc<Mutex<Vec<(u64, u64, bool)>>>,
}

impl CountingVolume {
    pub fn new(inner: MemVolume) -> Self {
        Self {
            inner,
            read_bytes: Arc::default(),
            zeroes: Arc::default(),
        }
    }
}

impl BlockVolume for CountingVolume {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    async fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, VolumeError> {
        self.read_bytes.fetch_add(len, Ordering::Relaxed);
        self.inner.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: AlignedBuf, fua: bool) -> Result<(), VolumeError> {
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), VolumeError> {
        self.inner.flush().await
    }
    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.inner.discard(offset, len).await
    }
    async fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        may_unmap: bool,
    ) -> Result<(), VolumeError> {
        self.zeroes.lock().unwrap().push((offset, len, may_unmap));
        self.inner.write_zeroes(offset, len, may_unmap).await
    }
    async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<Extent>, VolumeError> {
        self.inner.allocation(offset, len).await
    }
}

/// A catalog of one [`CountingVolume`].
pub struct CountingCatalog {
    pub name: String,
    pub volume: CountingVolume,
}

impl VolumeCatalog for CountingCatalog {
    type Volume = CountingVolume;
    async fn list(&self) -> Result<Vec<VolumeInfo>, VolumeError> {
        Ok(vec![VolumeInfo {
            name: self.name.clone(),
            size: self.volume.size(),
        }])
    }
    async fn open(&self, name: &str) -> Result<Option<CountingVolume>, VolumeError> {
        Ok((name == self.name).then(|| self.volume.clone()))
    }
}

/// Fills `len` bytes at `offset` of a fresh MemVolume (for factories).
pub fn prefill(v: &MemVolume, offset: u64, data: &[u8]) {
    v.write(offset, AlignedBuf::copy_from(data), false)
        .now_or_never()
        .expect("MemVolume completes at once")
        .expect("prefill");
}

/// A hand-driven NBD client for byte-exact protocol tests.
pub struct Raw {
    pub s: TcpStream,
    pub handshake_flags: u16,
}

impl Raw {
    /// Connects and reads the greeting; sends nothing.
    pub fn connect_bare(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        let mut r = Self {
            s,
            handshake_flags: 0,
        };
        let g = r.read_n(GREETING_LEN);
        r.handshake_flags = decode_greeting(&g).expect("greeting");
        r
    }

    /// Connects and answers the greeting with fixed newstyle + no zeroes.
    pub fn connect(addr: SocketAddr) -> Self {
        let mut r = Self::connect_bare(addr);
        r.send(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes());
        r
    }

    pub fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("send");
    }

    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b).expect("read reply bytes");
        b
    }

    /// True if the server closes the connection (EOF or reset) before
    /// sending anything more.
    pub fn closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
            Err(e) => panic!("expected the server to close, got {e}"),
        }
    }

    pub fn send_option(&mut self, option: u32, data: &[u8]) {
        self.send(
            &OptionHeader {
                option,
                length: data.len() as u32,
            }
            .encode(),
        );
        self.send(data);
    }

    /// Reads one option reply: header and data.
    pub fn read_option_reply(&mut self) -> (OptionReplyHeader, Vec<u8>) {
        let h =
            OptionReplyHeader::decode(&self.read_n(OPTION_REPLY_HEADER_LEN)).expect("option reply");
        let data = self.read_n(h.length as usize);
        (h, data)
    }

    /// Sends an option and collects replies up to the final one.
    pub fn option(&mut self, option: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
        self.send_option(option, data);
        let mut out = Vec::new();
        loop {
            let (h, d) = self.read_option_reply();
            assert_eq!(h.option, option);
            let last = h.reply_type == REP_ACK || h.reply_type & REP_FLAG_ERROR != 0;
            out.push((h.reply_type, d));
            if last {
                return out;
            }
        }
    }

    /// Negotiates (optionally) structured replies and base:allocation, then
    /// NBD_OPT_GO; returns (size, transmission flags).
    pub fn go(&mut self, export: &str, structured: bool) -> (u64, u16) {
        if structured {
            assert_eq!(
                self.option(OPT_STRUCTURED_REPLY, &[]),
                vec![(REP_ACK, vec![])]
            );
            let req = MetaContextRequest {
                export: export.into(),
                queries: vec![BASE_ALLOCATION.into()],
            };
            let r = self.option(OPT_SET_META_CONTEXT, &req.encode());
            assert_eq!(r.len(), 2, "{r:?}");
        }
        let req = InfoRequest {
            name: export.into(),
            requests: vec![INFO_BLOCK_SIZE],
        };
        let replies = self.option(OPT_GO, &req.encode());
        let (last, _) = replies.last().unwrap();
        assert_eq!(*last, REP_ACK, "GO failed: {replies:?}");
        let export = replies
            .iter()
            .find(|(t, d)| *t == REP_INFO && d[..2] == INFO_EXPORT.to_be_bytes())
            .expect("NBD_INFO_EXPORT");
        let size = u64::from_be_bytes(export.1[2..10].try_into().unwrap());
        let flags = u16::from_be_bytes(export.1[10..12].try_into().unwrap());
        (size, flags)
    }

    pub fn request(&mut self, command: Command, flags: u16, handle: u64, offset: u64, length: u32) {
        self.send(
            &Request {
                flags,
                command,
                handle,
                offset,
                length,
            }
            .encode(),
        );
    }

    pub fn simple_reply(&mut self) -> SimpleReply {
        SimpleReply::decode(&self.read_n(SIMPLE_REPLY_LEN)).expect("simple reply")
    }

    /// Reads one structured chunk.
    pub fn chunk(&mut self) -> (ChunkHeader, ChunkPayload) {
        let h = ChunkHeader::decode(&self.read_n(CHUNK_HEADER_LEN)).expect("chunk header");
        let p = self.read_n(h.length as usize);
        (
            h,
            decode_chunk_payload(h.chunk_type, &p).expect("chunk payload"),
        )
    }

    /// Reads chunks up to the final one (all must carry `handle`).
    pub fn chunks(&mut self, handle: u64) -> Vec<ChunkPayload> {
        let mut out = Vec::new();
        loop {
            let (h, p) = self.chunk();
            assert_eq!(h.handle, handle);
            out.push(p);
            if h.is_done() {
                return out;
            }
        }
    }

    /// Simple-reply write of `data` at `offset`; returns the error field.
    pub fn write(&mut self, handle: u64, offset: u64, data: &[u8]) -> u32 {
        self.request(Command::Write, 0, handle, offset, data.len() as u32);
        self.send(data);
        let r = self.simple_reply();
        assert_eq!(r.handle, handle);
        r.error
    }

    /// Simple-reply read; panics on error.
    pub fn read(&mut self, handle: u64, offset: u64, len: u32) -> Vec<u8> {
        self.request(Command::Read, 0, handle, offset, len);
        let r = self.simple_reply();
        assert_eq!((r.handle, r.error), (handle, 0));
        self.read_n(len as usize)
    }

    pub fn disconnect(mut self) {
        self.request(Command::Disc, 0, 0, 0, 0);
        assert!(self.closed_by_server());
    }
}

/// Deterministic pseudo-random bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
