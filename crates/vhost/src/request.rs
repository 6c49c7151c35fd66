//! One virtio-blk request, read from its descriptor chain (virtio 1.2,
//! 5.2.6): a 16-byte header the device reads, the data, and a status byte
//! the device writes last. Every address is checked against the guest's
//! memory before it is used; a chain that breaks a rule is answered with
//! an error status, never followed outside that memory.

use std::ops::Deref;

use virtio_bindings::virtio_blk::*;
use virtio_queue::DescriptorChain;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, Permissions};

use crate::config::SEG_MAX;

/// Most descriptors in one chain: the data segments, the header and the
/// status. A longer chain (a loop, too) is refused.
pub const MAX_DESCRIPTORS: usize = SEG_MAX as usize + 2;
/// Header bytes: type, reserved, sector.
pub const HEADER: u64 = 16;

/// What the guest asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// VIRTIO_BLK_T_IN.
    Read,
    /// VIRTIO_BLK_T_OUT.
    Write,
    /// VIRTIO_BLK_T_FLUSH.
    Flush,
    /// VIRTIO_BLK_T_GET_ID.
    GetId,
    /// VIRTIO_BLK_T_DISCARD.
    Discard,
    /// VIRTIO_BLK_T_WRITE_ZEROES.
    WriteZeroes,
    /// Any other type: answered with VIRTIO_BLK_S_UNSUPP.
    Unsupported(u32),
}

impl Op {
    fn from_type(t: u32) -> Self {
        match t {
            VIRTIO_BLK_T_IN => Op::Read,
            VIRTIO_BLK_T_OUT => Op::Write,
            VIRTIO_BLK_T_FLUSH => Op::Flush,
            VIRTIO_BLK_T_GET_ID => Op::GetId,
            VIRTIO_BLK_T_DISCARD => Op::Discard,
            VIRTIO_BLK_T_WRITE_ZEROES => Op::WriteZeroes,
            t => Op::Unsupported(t),
        }
    }

    /// Whether the request's data flows from the device to the guest.
    pub fn device_writes(self) -> bool {
        matches!(self, Op::Read | Op::GetId)
    }
}

/// A run of guest memory, already checked to lie inside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Segment {
    /// Guest-physical address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

/// The segments of one direction of a chain, in order; no allocation.
#[derive(Debug, Clone, Copy)]
pub struct Segments {
    n: usize,
    s: [Segment; MAX_DESCRIPTORS],
}

impl Default for Segments {
    fn default() -> Self {
        Self {
            n: 0,
            s: [Segment::default(); MAX_DESCRIPTORS],
        }
    }
}

impl Segments {
    fn push(&mut self, seg: Segment) -> Result<(), &'static str> {
        let slot = self.s.get_mut(self.n).ok_or("too many descriptors")?;
        *slot = seg;
        self.n += 1;
        Ok(())
    }

    /// The segments.
    pub fn as_slice(&self) -> &[Segment] {
        &self.s[..self.n]
    }

    /// Total bytes.
    pub fn len(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.len)).sum()
    }

    /// True if there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f(address, range of the stream)` for the bytes
    /// `skip..skip+len` of the segments' concatenation.
    fn walk(
        &self,
        mut skip: u64,
        len: u64,
        mut f: impl FnMut(GuestAddress, std::ops::Range<usize>) -> Result<(), ()>,
    ) -> Result<(), ()> {
        let mut done = 0u64;
        for seg in self.as_slice() {
            if done == len {
                break;
            }
            let seg_len = u64::from(seg.len);
            if skip >= seg_len {
                skip -= seg_len;
                continue;
            }
            let n = (seg_len - skip).min(len - done);
            f(
                GuestAddress(seg.addr + skip),
                done as usize..(done + n) as usize,
            )?;
            done += n;
            skip = 0;
        }
        if done == len { Ok(()) } else { Err(()) }
    }

    /// Copies bytes `skip..skip+dst.len()` of the stream out of guest memory.
    pub fn read_into<M: GuestMemory + ?Sized>(&self, mem: &M, skip: u64, dst: &mut [u8]) -> bool {
        let len = dst.len() as u64;
        self.walk(skip, len, |addr, r| {
            mem.read_slice(&mut dst[r], addr).map_err(|_| ())
        })
        .is_ok()
    }

    /// Copies `src` into bytes `skip..skip+src.len()` of the stream.
    pub fn write_from<M: GuestMemory + ?Sized>(&self, mem: &M, skip: u64, src: &[u8]) -> bool {
        self.walk(skip, src.len() as u64, |addr, r| {
            mem.write_slice(&src[r], addr).map_err(|_| ())
        })
        .is_ok()
    }
}

/// A request read from a well-formed chain.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// What is asked.
    pub op: Op,
    /// Start, in 512-byte sectors.
    pub sector: u64,
    /// What the device reads: the header, then the data of writes,
    /// discards and write-zeroes.
    pub readable: Segments,
    /// What the device writes: the data of reads and GET_ID, then the
    /// status byte (the last byte).
    pub writable: Segments,
    /// Where the status byte goes.
    pub status: GuestAddress,
}

impl Request {
    /// Bytes of data: after the header for writes, before the status byte
    /// for reads.
    pub fn data_len(&self) -> u64 {
        if self.op.device_writes() {
            self.writable.len() - 1
        } else {
            self.readable.len() - HEADER
        }
    }
}

/// A chain that breaks the rules, and where its status byte goes if one
/// could be found.
#[derive(Debug, Clone, Copy)]
pub struct Malformed {
    /// The status byte's address, if the chain has a usable one.
    pub status: Option<GuestAddress>,
    /// What is wrong.
    pub why: &'static str,
}

/// Reads the request in `chain`.
pub fn parse<M>(chain: DescriptorChain<M>) -> Result<Request, Malformed>
where
    M: Deref + Clone,
    M::Target: GuestMemory,
{
    let mem = chain.memory();
    let mut readable = Segments::default();
    let mut writable = Segments::default();
    let mut count = 0usize;
    let mut broken = None;
    // The status byte is the last byte of the chain's last device-writable
    // descriptor, so the walk goes on to the end of the chain after a
    // fault (virtio-queue bounds it by the table size), collecting nothing
    // more but that descriptor.
    let mut last_writable = None;
    for desc in chain.clone() {
        count += 1;
        if desc.is_write_only() && desc.len() > 0 {
            last_writable = GuestAddress(desc.addr().0).checked_add(u64::from(desc.len()) - 1);
        }
        if broken.is_some() || desc.len() == 0 {
            continue;
        }
        if count > MAX_DESCRIPTORS {
            broken = Some("too many descriptors (or a loop)");
            continue;
        }
        let access = if desc.is_write_only() {
            Permissions::Write
        } else {
            Permissions::Read
        };
        if !mem.check_range(GuestAddress(desc.addr().0), desc.len() as usize, access) {
            broken = Some("descriptor outside guest memory");
            continue;
        }
        let seg = Segment {
            addr: desc.addr().0,
            len: desc.len(),
        };
        let pushed = if desc.is_write_only() {
            writable.push(seg)
        } else if !writable.is_empty() {
            Err("device-readable descriptor after a device-writable one")
        } else {
            readable.push(seg)
        };
        if let Err(why) = pushed {
            broken = Some(why);
        }
    }
    let status = last_writable.filter(|a| mem.check_range(*a, 1, Permissions::Write));
    let bad = |why| Err(Malformed { status, why });
    if let Some(why) = broken {
        return bad(why);
    }
    let Some(status) = status else {
        return bad("no device-writable status byte");
    };
    if readable.len() < HEADER {
        return bad("header shorter than 16 bytes");
    }
    let mut header = [0u8; HEADER as usize];
    if !readable.read_into(mem, 0, &mut header) {
        return bad("header unreadable");
    }
    let op = Op::from_type(u32::from_le_bytes([
        header[0], header[1], header[2], header[3],
    ]));
    let sector = u64::from_le_bytes(header[8..16].try_into().unwrap_or([0; 8]));
    let req = Request {
        op,
        sector,
        readable,
        writable,
        status,
    };
    // The data goes one way only.
    let misplaced = if op.device_writes() {
        readable.len() != HEADER
    } else {
        writable.len() != 1
    };
    if misplaced && !matches!(op, Op::Unsupported(_)) {
        return bad("data descriptors in the wrong direction");
    }
    Ok(req)
}

/// Writes the status byte.
pub fn set_status<M: GuestMemory + ?Sized>(mem: &M, at: GuestAddress, status: u32) -> bool {
    mem.write_obj(status as u8, at).is_ok()
}
