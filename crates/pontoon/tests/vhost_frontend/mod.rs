//! A small vhost-user front-end for tests: it plays the part QEMU plays for
//! a vhost-user-blk back-end, with full control over what the "guest"
//! puts in its virtqueue, so a test can hand the back-end malformed
//! descriptor chains and watch what comes back.
//!
//! Guest memory is two memfd regions, contiguous in guest-physical
//! addresses: [`REGION_A`] (16 MiB at 0) and [`REGION_B`] (1 MiB right
//! after it), so a buffer may legally span both mappings and anything at
//! or above [`MEM_END`] is outside guest memory. One split virtqueue
//! (queue 0) lives at the start of region A; request buffers live in
//! per-slot areas further up (see [`Slot`]).
//!
//! [`Frontend`] does the vhost-user protocol (rust-vmm's `vhost` crate);
//! this module does the rest: features, memory table, vring setup, the
//! descriptor table / avail ring / used ring, kicks and call eventfd
//! waits, and virtio-blk requests on top.
#![allow(dead_code)]

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

// ---- virtio / virtio-blk constants -------------------------------------

pub const VIRTQ_DESC_F_NEXT: u16 = 1;
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;

pub const VIRTIO_BLK_F_SIZE_MAX: u64 = 1 << 1;
pub const VIRTIO_BLK_F_SEG_MAX: u64 = 1 << 2;
pub const VIRTIO_BLK_F_RO: u64 = 1 << 5;
pub const VIRTIO_BLK_F_BLK_SIZE: u64 = 1 << 6;
pub const VIRTIO_BLK_F_FLUSH: u64 = 1 << 9;
pub const VIRTIO_BLK_F_TOPOLOGY: u64 = 1 << 10;
pub const VIRTIO_BLK_F_MQ: u64 = 1 << 12;
pub const VIRTIO_BLK_F_DISCARD: u64 = 1 << 13;
pub const VIRTIO_BLK_F_WRITE_ZEROES: u64 = 1 << 14;
pub const VIRTIO_RING_F_INDIRECT_DESC: u64 = 1 << 28;
pub const VIRTIO_RING_F_EVENT_IDX: u64 = 1 << 29;
pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;

pub const VIRTIO_BLK_T_IN: u32 = 0;
pub const VIRTIO_BLK_T_OUT: u32 = 1;
pub const VIRTIO_BLK_T_FLUSH: u32 = 4;
pub const VIRTIO_BLK_T_GET_ID: u32 = 8;
pub const VIRTIO_BLK_T_DISCARD: u32 = 11;
pub const VIRTIO_BLK_T_WRITE_ZEROES: u32 = 13;

pub const VIRTIO_BLK_S_OK: u8 = 0;
pub const VIRTIO_BLK_S_IOERR: u8 = 1;
pub const VIRTIO_BLK_S_UNSUPP: u8 = 2;
/// What a status byte holds before the back-end answers.
pub const STATUS_UNTOUCHED: u8 = 0xff;

// ---- guest memory layout ----------------------------------------------

/// Region A: guest-physical [0, 16 MiB).
pub const REGION_A: (u64, u64) = (0, 16 << 20);
/// Region B: guest-physical [16 MiB, 17 MiB), a separate mapping.
pub const REGION_B: (u64, u64) = (16 << 20, 1 << 20);
/// First guest-physical address past guest memory.
pub const MEM_END: u64 = REGION_B.0 + REGION_B.1;

/// Descriptor table, avail ring and used ring of queue 0.
pub const DESC_TABLE: u64 = 0x0000;
pub const AVAIL_RING: u64 = 0x1000;
pub const USED_RING: u64 = 0x2000;
/// Largest queue the layout above has room for (16 bytes a descriptor).
pub const MAX_QUEUE_SIZE: u16 = 256;

/// Request buffers of one in-flight request: slot `k` has a header, a
/// status byte, a small scratch area (indirect tables, discard segments,
/// short buffers) and a 64 KiB data area, each followed by guard bytes.
#[derive(Clone, Copy, Debug)]
pub struct Slot(pub u64);

pub const SLOTS: u64 = 16;
pub const SLOT_DATA_LEN: u64 = 64 << 10;

impl Slot {
    pub fn hdr(self) -> u64 {
        0x1_0000 + self.0 * 0x1000
    }
    pub fn status(self) -> u64 {
        self.hdr() + 0x100
    }
    /// 2 KiB of scratch space.
    pub fn scratch(self) -> u64 {
        self.hdr() + 0x800
    }
    pub fn data(self) -> u64 {
        0x10_0000 + self.0 * (SLOT_DATA_LEN + 0x1000)
    }
}

// ---- descriptors ----------------------------------------------------------

/// Where a descriptor's `next` field points.
#[derive(Clone, Copy, Debug)]
pub enum Next {
    /// The following descriptor of the chain being built (only used when
    /// the descriptor has VIRTQ_DESC_F_NEXT).
    Follow,
    /// Descriptor `i` of the chain being built (e.g. back to 0: a loop).
    Rel(usize),
    /// This raw descriptor-table index.
    Raw(u16),
}

/// One descriptor of a chain the driver puts in the descriptor table.
#[derive(Clone, Copy, Debug)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
    pub next: Next,
}

impl Desc {
    /// Device-readable.
    pub fn ro(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            flags: 0,
            next: Next::Follow,
        }
    }
    /// Device-writable.
    pub fn wo(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            flags: VIRTQ_DESC_F_WRITE,
            next: Next::Follow,
        }
    }
    /// An indirect descriptor: a descriptor table of `len` bytes at `addr`.
    pub fn indirect(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: Next::Follow,
        }
    }
    /// With VIRTQ_DESC_F_NEXT pointing at `next`.
    pub fn then(mut self, next: Next) -> Desc {
        self.flags |= VIRTQ_DESC_F_NEXT;
        self.next = next;
        self
    }
    /// The 16-byte split-ring encoding, `next` already resolved.
    pub fn encode(&self, next: u16) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.flags.to_le_bytes());
        b[14..16].copy_from_slice(&next.to_le_bytes());
        b
    }
}

/// Links a chain: the last descriptor without an explicit `then` ends it;
/// every other one gets VIRTQ_DESC_F_NEXT to its follower.
pub fn chain(descs: &[Desc]) -> Vec<Desc> {
    let n = descs.len();
    descs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i + 1 < n && d.flags & VIRTQ_DESC_F_NEXT == 0 {
                d.then(Next::Follow)
            } else {
                *d
            }
        })
        .collect()
}

/// A used-ring element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    pub id: u32,
    pub len: u32,
}

/// What became of one request.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The head descriptor index it was made available with.
    pub head: u16,
    /// Its used-ring element, if the back-end returned it in time.
    pub used: Option<Used>,
    /// The status byte afterwards ([`STATUS_UNTOUCHED`] if not written).
    pub status: u8,
    /// Whether the call eventfd fired for it.
    pub notified: bool,
    /// How long the round trip took.
    pub took: Duration,
}

// ---- the front-end --------------------------------------------------------

/// Which features the driver asks for (of those offered).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub queue_size: u16,
    /// virtio features to acknowledge when offered.
    pub want: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            queue_size: 128,
            want: VIRTIO_F_VERSION_1
                | VHOST_USER_F_PROTOCOL_FEATURES
                | VIRTIO_RING_F_EVENT_IDX
                | VIRTIO_RING_F_INDIRECT_DESC
                | VIRTIO_BLK_F_SIZE_MAX
                | VIRTIO_BLK_F_SEG_MAX
                | VIRTIO_BLK_F_RO
                | VIRTIO_BLK_F_BLK_SIZE
                | VIRTIO_BLK_F_FLUSH
                | VIRTIO_BLK_F_TOPOLOGY
                | VIRTIO_BLK_F_MQ
                | VIRTIO_BLK_F_DISCARD
                | VIRTIO_BLK_F_WRITE_ZEROES,
        }
    }
}

/// A connected, set-up vhost-user front-end with queue 0 running.
pub struct VhostFrontend {
    fe: Frontend,
    mem: GuestMemoryMmap,
    kick: EventFd,
    call: EventFd,
    /// virtio features the back-end offered / the driver acknowledged.
    pub offered: u64,
    pub acked: u64,
    /// Protocol features offered / acknowledged.
    pub proto_offered: VhostUserProtocolFeatures,
    pub proto_acked: VhostUserProtocolFeatures,
    /// GET_QUEUE_NUM's answer (1 if MQ was not negotiated).
    pub queue_num: u64,
    /// The first 60 bytes (or 24) of the device config space.
    pub config: Vec<u8>,
    size: u16,
    next_desc: u16,
    avail_idx: u16,
    used_seen: u16,
    event_idx: bool,
    /// Call eventfd signals consumed and not yet attributed to a request.
    pending_calls: u64,
}

fn memfd(name: &str, size: u64) -> File {
    let cname = CString::new(name).expect("memfd name");
    // SAFETY: memfd_create with a valid NUL-terminated name; the fd it
    // returns is owned by the File from here on.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size).expect("size the memfd");
    file
}

fn err<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

impl VhostFrontend {
    /// Connects to the back-end listening on `socket` (waiting up to
    /// `wait` for it to appear) and sets queue 0 up.
    pub fn connect(socket: &Path, opts: Options, wait: Duration) -> Result<Self, String> {
        assert!(opts.queue_size.is_power_of_two() && opts.queue_size <= MAX_QUEUE_SIZE);
        let deadline = Instant::now() + wait;
        let fe = loop {
            match Frontend::connect(socket, 1) {
                Ok(fe) => break fe,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(format!("connect {}: {e:?}", socket.display())),
            }
        };

        let a = memfd("pontoon-guest-a", REGION_A.1);
        let b = memfd("pontoon-guest-b", REGION_B.1);
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files([
            (
                GuestAddress(REGION_A.0),
                REGION_A.1 as usize,
                Some(FileOffset::new(a, 0)),
            ),
            (
                GuestAddress(REGION_B.0),
                REGION_B.1 as usize,
                Some(FileOffset::new(b, 0)),
            ),
        ])
        .map_err(err("guest memory"))?;

        let mut me = VhostFrontend {
            fe,
            mem,
            kick: EventFd::new(EFD_NONBLOCK).map_err(err("kick eventfd"))?,
            call: EventFd::new(EFD_NONBLOCK).map_err(err("call eventfd"))?,
            offered: 0,
            acked: 0,
            proto_offered: VhostUserProtocolFeatures::empty(),
            proto_acked: VhostUserProtocolFeatures::empty(),
            queue_num: 1,
            config: Vec::new(),
            size: opts.queue_size,
            next_desc: 0,
            avail_idx: 0,
            used_seen: 0,
            event_idx: false,
            pending_calls: 0,
        };
        me.handshake(opts)?;
        Ok(me)
    }

    fn handshake(&mut self, opts: Options) -> Result<(), String> {
        let fe = &mut self.fe;
        fe.set_owner().map_err(err("SET_OWNER"))?;
        self.offered = fe.get_features().map_err(err("GET_FEATURES"))?;
        if self.offered & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            self.proto_offered = fe
                .get_protocol_features()
                .map_err(err("GET_PROTOCOL_FEATURES"))?;
            let want = VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::CONFIG
                | VhostUserProtocolFeatures::REPLY_ACK;
            self.proto_acked = self.proto_offered & want;
            fe.set_protocol_features(self.proto_acked)
                .map_err(err("SET_PROTOCOL_FEATURES"))?;
            if self
                .proto_acked
                .contains(VhostUserProtocolFeatures::REPLY_ACK)
            {
                // Every later message without a reply of its own gets an
                // ack, so a refused one is an error here, not silence.
                fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
            if self.proto_acked.contains(VhostUserProtocolFeatures::MQ) {
                self.queue_num = fe.get_queue_num().map_err(err("GET_QUEUE_NUM"))?;
            }
            if self.proto_acked.contains(VhostUserProtocolFeatures::CONFIG) {
                let flags = VhostUserConfigFlags::empty();
                self.config = match fe.get_config(0, 60, flags, &[0u8; 60]) {
                    Ok((_, payload)) => payload,
                    Err(_) => {
                        fe.get_config(0, 24, flags, &[0u8; 24])
                            .map_err(err("GET_CONFIG"))?
                            .1
                    }
                };
            }
        }
        self.acked = self.offered & opts.want;
        fe.set_features(self.acked).map_err(err("SET_FEATURES"))?;
        self.event_idx = self.acked & VIRTIO_RING_F_EVENT_IDX != 0;

        let regions = self
            .mem
            .iter()
            .map(VhostUserMemoryRegionInfo::from_guest_region)
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("memory regions"))?;
        fe.set_mem_table(&regions).map_err(err("SET_MEM_TABLE"))?;

        // The rings start zeroed: avail idx 0, used idx 0.
        self.mem
            .write_slice(&[0u8; 0x3000], GuestAddress(0))
            .map_err(err("zero rings"))?;
        let host = |gpa: u64| -> Result<u64, String> {
            self.mem
                .get_host_address(GuestAddress(gpa))
                .map(|p| p as u64)
                .map_err(err("host address"))
        };
        let vring = VringConfigData {
            queue_max_size: self.size,
            queue_size: self.size,
            flags: 0,
            desc_table_addr: host(DESC_TABLE)?,
            used_ring_addr: host(USED_RING)?,
            avail_ring_addr: host(AVAIL_RING)?,
            log_addr: None,
        };
        fe.set_vring_num(0, self.size)
            .map_err(err("SET_VRING_NUM"))?;
        fe.set_vring_addr(0, &vring)
            .map_err(err("SET_VRING_ADDR"))?;
        fe.set_vring_base(0, 0).map_err(err("SET_VRING_BASE"))?;
        fe.set_vring_call(0, &self.call)
            .map_err(err("SET_VRING_CALL"))?;
        fe.set_vring_kick(0, &self.kick)
            .map_err(err("SET_VRING_KICK"))?;
        if self.acked & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            fe.set_vring_enable(0, true)
                .map_err(err("SET_VRING_ENABLE"))?;
        }
        Ok(())
    }

    /// The vhost-user connection itself (for extra protocol messages).
    pub fn frontend(&mut self) -> &mut Frontend {
        &mut self.fe
    }

    pub fn queue_size(&self) -> u16 {
        self.size
    }

    pub fn offers(&self, feature: u64) -> bool {
        self.offered & feature != 0
    }

    /// Device capacity in 512-byte sectors, from the config space.
    pub fn capacity(&self) -> Option<u64> {
        self.config
            .get(0..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A little-endian u32 of the config space at `offset`.
    pub fn config_u32(&self, offset: usize) -> Option<u32> {
        self.config
            .get(offset..offset + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    // ---- guest memory access ----

    pub fn write(&self, gpa: u64, bytes: &[u8]) {
        self.mem
            .write_slice(bytes, GuestAddress(gpa))
            .unwrap_or_else(|e| panic!("guest write at {gpa:#x}: {e:?}"));
    }

    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem
            .read_slice(&mut v, GuestAddress(gpa))
            .unwrap_or_else(|e| panic!("guest read at {gpa:#x}: {e:?}"));
        v
    }

    pub fn fill(&self, gpa: u64, len: usize, byte: u8) {
        self.write(gpa, &vec![byte; len]);
    }

    fn load_u16(&self, gpa: u64) -> u16 {
        self.mem
            .load::<u16>(GuestAddress(gpa), Ordering::Acquire)
            .expect("ring read")
    }

    fn store_u16(&self, gpa: u64, v: u16) {
        self.mem
            .store(v, GuestAddress(gpa), Ordering::Release)
            .expect("ring write");
    }

    fn read_u32(&self, gpa: u64) -> u32 {
        let b = self.read(gpa, 4);
        u32::from_le_bytes(b.try_into().expect("4 bytes"))
    }

    // ---- the virtqueue ----

    /// Writes `descs` into the descriptor table at fresh indices and
    /// returns (head index, the indices used).
    pub fn place(&mut self, descs: &[Desc]) -> (u16, Vec<u16>) {
        assert!(!descs.is_empty() && descs.len() <= usize::from(self.size));
        let idx: Vec<u16> = (0..descs.len())
            .map(|i| (self.next_desc + i as u16) % self.size)
            .collect();
        self.next_desc = (self.next_desc + descs.len() as u16) % self.size;
        for (i, d) in descs.iter().enumerate() {
            let next = if d.flags & VIRTQ_DESC_F_NEXT == 0 {
                0
            } else {
                match d.next {
                    Next::Follow => *idx.get(i + 1).expect("NEXT on the last descriptor"),
                    Next::Rel(j) => idx[j],
                    Next::Raw(n) => n,
                }
            };
            self.write(DESC_TABLE + 16 * u64::from(idx[i]), &d.encode(next));
        }
        (idx[0], idx)
    }

    /// Writes an indirect descriptor table at `gpa` (its `next` fields
    /// resolve to positions within the table) and returns its byte length.
    pub fn place_indirect(&self, gpa: u64, descs: &[Desc]) -> u32 {
        for (i, d) in descs.iter().enumerate() {
            let next = if d.flags & VIRTQ_DESC_F_NEXT == 0 {
                0
            } else {
                match d.next {
                    Next::Follow => i as u16 + 1,
                    Next::Rel(j) => j as u16,
                    Next::Raw(n) => n,
                }
            };
            self.write(gpa + 16 * i as u64, &d.encode(next));
        }
        16 * descs.len() as u32
    }

    /// Makes descriptor-table index `head` available (without a kick).
    pub fn make_available(&mut self, head: u16) {
        let slot = AVAIL_RING + 4 + 2 * u64::from(self.avail_idx % self.size);
        self.write(slot, &head.to_le_bytes());
        self.avail_idx = self.avail_idx.wrapping_add(1);
        fence(Ordering::SeqCst);
        self.store_u16(AVAIL_RING + 2, self.avail_idx);
    }

    /// Places a chain and makes it available; returns its head.
    pub fn push(&mut self, descs: &[Desc]) -> u16 {
        let (head, _) = self.place(descs);
        self.make_available(head);
        head
    }

    /// Notifies the back-end (always: kicks it does not need are harmless).
    pub fn kick(&mut self) {
        if self.event_idx {
            // used_event: interrupt as soon as anything past what was
            // already consumed is used.
            let used_event = AVAIL_RING + 4 + 2 * u64::from(self.size);
            self.store_u16(used_event, self.used_seen);
        }
        fence(Ordering::SeqCst);
        self.kick.write(1).expect("kick");
    }

    /// The used-ring index the back-end published.
    pub fn used_idx(&self) -> u16 {
        self.load_u16(USED_RING + 2)
    }

    /// Used elements not consumed yet.
    pub fn pending_used(&self) -> u16 {
        self.used_idx().wrapping_sub(self.used_seen)
    }

    /// Waits (up to `timeout`) on the call eventfd; true if it fired.
    pub fn wait_call(&mut self, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.call.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0
            && let Ok(count) = self.call.read()
        {
            self.pending_calls += count;
            return true;
        }
        false
    }

    /// The next used element, waiting up to `timeout` for it (woken by
    /// the call eventfd, polling the ring meanwhile in case it stays
    /// quiet).
    pub fn next_used(&mut self, timeout: Duration) -> Option<Used> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.pending_used() > 0 {
                fence(Ordering::Acquire);
                let at = USED_RING + 4 + 8 * u64::from(self.used_seen % self.size);
                let used = Used {
                    id: self.read_u32(at),
                    len: self.read_u32(at + 4),
                };
                self.used_seen = self.used_seen.wrapping_add(1);
                return Some(used);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.wait_call((deadline - now).min(Duration::from_millis(20)));
        }
    }

    /// Takes the call signals seen so far; if none yet, waits up to
    /// `grace` for one.
    pub fn take_notified(&mut self, grace: Duration) -> bool {
        if self.pending_calls == 0 {
            let deadline = Instant::now() + grace;
            while self.pending_calls == 0 && Instant::now() < deadline {
                self.wait_call(deadline - Instant::now());
            }
        }
        let seen = self.pending_calls > 0;
        self.pending_calls = 0;
        seen
    }

    /// Submits one chain, kicks, waits up to `timeout` for its used
    /// element and reads the status byte at `status_at`.
    pub fn request(&mut self, descs: &[Desc], status_at: u64, timeout: Duration) -> Outcome {
        let start = Instant::now();
        self.write(status_at, &[STATUS_UNTOUCHED]);
        self.take_notified(Duration::ZERO);
        let head = self.push(descs);
        self.kick();
        let used = self.next_used(timeout);
        let notified = used.is_some() && self.take_notified(Duration::from_secs(2));
        Outcome {
            head,
            used,
            status: self.read(status_at, 1)[0],
            notified,
            took: start.elapsed(),
        }
    }
}

// ---- virtio-blk on top ----------------------------------------------------

/// A virtio-blk request header.
pub fn blk_header(kind: u32, sector: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    h
}

/// A discard / write-zeroes segment.
pub fn blk_segment(sector: u64, sectors: u32, flags: u32) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&sector.to_le_bytes());
    s[8..12].copy_from_slice(&sectors.to_le_bytes());
    s[12..16].copy_from_slice(&flags.to_le_bytes());
    s
}

/// A recognisable data pattern for `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

impl VhostFrontend {
    /// Writes `data` at `sector` through slot `s`.
    pub fn blk_write(&mut self, s: Slot, sector: u64, data: &[u8], timeout: Duration) -> Outcome {
        assert!(data.len() as u64 <= SLOT_DATA_LEN);
        self.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, sector));
        self.write(s.data(), data);
        let descs = chain(&[
            Desc::ro(s.hdr(), 16),
            Desc::ro(s.data(), data.len() as u32),
            Desc::wo(s.status(), 1),
        ]);
        self.request(&descs, s.status(), timeout)
    }

    /// Reads `len` bytes at `sector` through slot `s`.
    pub fn blk_read(
        &mut self,
        s: Slot,
        sector: u64,
        len: usize,
        timeout: Duration,
    ) -> (Outcome, Vec<u8>) {
        assert!(len as u64 <= SLOT_DATA_LEN);
        self.write(s.hdr(), &blk_header(VIRTIO_BLK_T_IN, sector));
        self.fill(s.data(), len, 0xee);
        let descs = chain(&[
            Desc::ro(s.hdr(), 16),
            Desc::wo(s.data(), len as u32),
            Desc::wo(s.status(), 1),
        ]);
        let out = self.request(&descs, s.status(), timeout);
        let data = self.read(s.data(), len);
        (out, data)
    }

    /// A request of `kind` with no data (FLUSH).
    pub fn blk_nodata(&mut self, s: Slot, kind: u32, timeout: Duration) -> Outcome {
        self.write(s.hdr(), &blk_header(kind, 0));
        let descs = chain(&[Desc::ro(s.hdr(), 16), Desc::wo(s.status(), 1)]);
        self.request(&descs, s.status(), timeout)
    }

    /// DISCARD or WRITE_ZEROES of `segments`.
    pub fn blk_segments(
        &mut self,
        s: Slot,
        kind: u32,
        segments: &[[u8; 16]],
        timeout: Duration,
    ) -> Outcome {
        self.write(s.hdr(), &blk_header(kind, 0));
        let bytes: Vec<u8> = segments.iter().flatten().copied().collect();
        self.write(s.scratch(), &bytes);
        let descs = chain(&[
            Desc::ro(s.hdr(), 16),
            Desc::ro(s.scratch(), bytes.len() as u32),
            Desc::wo(s.status(), 1),
        ]);
        self.request(&descs, s.status(), timeout)
    }
}
