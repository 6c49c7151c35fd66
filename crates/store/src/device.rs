//! The device under a store: a trait, the real io_uring/O_DIRECT
//! implementation, and the contract both keep.
//!
//! Contract (the one NVMe drives with a volatile write cache give):
//! - a completed plain write may still be lost or torn (at 4 KiB granularity)
//!   by a power failure until a later [`BlockDevice::flush`] completes;
//! - a completed *durable* write (FUA) is itself durable, but says nothing
//!   about earlier plain writes;
//! - a completed flush makes every write completed before it durable.
//!
//! The store relies on nothing stronger, so it is safe on raw block devices
//! where O_DSYNC becomes FUA, not a full flush.

use std::future::Future;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::rc::Rc;

use compio::driver::{OpCode, OpEntry};
use io_uring::{opcode, types};
use pontoon_buf::AlignedBuf;

/// Result of a device I/O: the outcome and the buffer handed back.
pub type IoResult = (io::Result<()>, AlignedBuf);

/// A block device driven asynchronously with owned, aligned buffers.
///
/// Offsets and lengths are multiples of 4 KiB. Implementations are used from
/// one thread (one shard); none is required to be `Send`.
pub trait BlockDevice: 'static {
    /// Usable size in bytes.
    fn size(&self) -> u64;

    /// Reads `buf[range]` from device offset `pos`; all of it or an error.
    fn read_at(
        &self,
        buf: AlignedBuf,
        range: Range<usize>,
        pos: u64,
    ) -> impl Future<Output = IoResult>;

    /// Writes `buf[range]` at device offset `pos`; all of it or an error.
    /// With `durable`, the write is on stable media when it completes (FUA).
    fn write_at(
        &self,
        buf: AlignedBuf,
        range: Range<usize>,
        pos: u64,
        durable: bool,
    ) -> impl Future<Output = IoResult>;

    /// Makes every previously completed write durable.
    fn flush(&self) -> impl Future<Output = io::Result<()>>;

    /// Reads several disjoint ranges of one buffer, each from its own device
    /// offset. Implementations may issue them concurrently.
    fn read_scattered(
        &self,
        buf: AlignedBuf,
        reads: &[(Range<usize>, u64)],
    ) -> impl Future<Output = IoResult> {
        async move {
            let mut buf = buf;
            for (range, pos) in reads {
                let (r, b) = self.read_at(buf, range.clone(), *pos).await;
                buf = b;
                if r.is_err() {
                    return (r, buf);
                }
            }
            (Ok(()), buf)
        }
    }

    /// Writes whole buffers back to back starting at `pos`, as one request
    /// where the device allows. With `durable`, all of it is durable on completion.
    fn write_vectored_at(
        &self,
        bufs: Vec<AlignedBuf>,
        pos: u64,
        durable: bool,
    ) -> impl Future<Output = (io::Result<()>, Vec<AlignedBuf>)> {
        async move {
            let mut out = Vec::with_capacity(bufs.len());
            let mut at = pos;
            let mut res = Ok(());
            for b in bufs {
                if res.is_err() {
                    out.push(b);
                    continue;
                }
                let len = b.len();
                let (r, b) = self.write_at(b, 0..len, at, durable).await;
                at += len as u64;
                res = r;
                out.push(b);
            }
            (res, out)
        }
    }
}

/// A file or block device opened with O_DIRECT and driven through io_uring
/// (via compio's runtime: submissions are batched per event-loop turn).
///
/// Durable writes use `RWF_DSYNC` on the write itself: one submission, no
/// separate fsync round trip. [`BlockDevice::flush`] is `fdatasync`.
pub struct FileDevice {
    fd: Rc<OwnedFd>,
    size: u64,
}

impl FileDevice {
    /// Opens `path` for direct I/O. A regular file must already have its size
    /// (see [`FileDevice::create_file`]); a block device reports its own.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
            .open(path)?;
        let meta = file.metadata()?;
        let size = if meta.file_type().is_block_device() {
            block_device_size(&file)?
        } else {
            meta.len()
        };
        let size = size & !(pontoon_types::BLOCK_SIZE_U64 - 1);
        Ok(Self {
            fd: Rc::new(OwnedFd::from(file)),
            size,
        })
    }

    /// Creates (or extends) a regular file of `size` bytes whose blocks are
    /// all written, so later O_DIRECT writes never pay for extent allocation
    /// or unwritten-extent conversion in the filesystem. Existing contents
    /// below the old size are kept.
    pub fn create_file(path: &Path, size: u64) -> io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        let old = f.metadata()?.len();
        if old >= size {
            return Ok(());
        }
        f.seek(SeekFrom::Start(old))?;
        let chunk = vec![0u8; 8 << 20];
        let mut left = size - old;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.sync_all()
    }
}

/// Size in bytes of a device or file: the kernel's for a block device
/// (BLKGETSIZE64), the file's length otherwise.
pub fn device_size(path: &Path) -> io::Result<u64> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.file_type().is_block_device() {
        block_device_size(&file)
    } else {
        Ok(meta.len())
    }
}

fn block_device_size(file: &std::fs::File) -> io::Result<u64> {
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

fn check_range(buf: &AlignedBuf, range: &Range<usize>) -> io::Result<()> {
    if range.start > range.end || range.end > buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("I/O range {range:?} outside buffer of {} bytes", buf.len()),
        ));
    }
    Ok(())
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }

    async fn read_at(&self, buf: AlignedBuf, range: Range<usize>, pos: u64) -> IoResult {
        if let Err(e) = check_range(&buf, &range) {
            return (Err(e), buf);
        }
        let op = RwOp::new(self.fd.clone(), buf, range, pos, Dir::Read);
        op.run().await
    }

    async fn write_at(
        &self,
        buf: AlignedBuf,
        range: Range<usize>,
        pos: u64,
        durable: bool,
    ) -> IoResult {
        if let Err(e) = check_range(&buf, &range) {
            return (Err(e), buf);
        }
        let dir = if durable {
            Dir::WriteDurable
        } else {
            Dir::Write
        };
        let op = RwOp::new(self.fd.clone(), buf, range, pos, dir);
        op.run().await
    }

    async fn flush(&self) -> io::Result<()> {
        let op = FsyncOp {
            fd: self.fd.clone(),
        };
        crate::submit::submit(op).await.0.map(|_| ())
    }

    async fn read_scattered(&self, buf: AlignedBuf, reads: &[(Range<usize>, u64)]) -> IoResult {
        if reads.len() == 1 {
            return self.read_at(buf, reads[0].0.clone(), reads[0].1).await;
        }
        if let Some((r, _)) = reads.iter().find(|(r, _)| check_range(&buf, r).is_err()) {
            let e = io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("I/O range {r:?} outside buffer"),
            );
            return (Err(e), buf);
        }
        let shared = Rc::new(SharedBuf(std::cell::UnsafeCell::new(buf)));
        let ops = reads.iter().map(|(range, pos)| {
            let op = SharedReadOp {
                fd: self.fd.clone(),
                buf: shared.clone(),
                range: range.clone(),
                pos: *pos,
            };
            op.run()
        });
        let results = futures_util::future::join_all(ops).await;
        let buf = match Rc::try_unwrap(shared) {
            Ok(s) => s.0.into_inner(),
            Err(_) => unreachable!("every read op has completed and released the buffer"),
        };
        let res = results.into_iter().find(Result::is_err).unwrap_or(Ok(()));
        (res, buf)
    }

    async fn write_vectored_at(
        &self,
        bufs: Vec<AlignedBuf>,
        pos: u64,
        durable: bool,
    ) -> (io::Result<()>, Vec<AlignedBuf>) {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let iov = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let op = WritevOp {
            fd: self.fd.clone(),
            bufs,
            iov,
            pos,
            durable,
        };
        let compio::BufResult(res, op) = crate::submit::submit(op).await;
        let mut bufs = op.bufs;
        let done = match res {
            Ok(n) => n,
            Err(e) => return (Err(e), bufs),
        };
        if done == total {
            return (Ok(()), bufs);
        }
        // Short write: finish the remainder buffer by buffer.
        let mut skip = done;
        let mut at = pos + done as u64;
        for i in 0..bufs.len() {
            let len = bufs[i].len();
            if skip >= len {
                skip -= len;
                continue;
            }
            let b = std::mem::replace(&mut bufs[i], AlignedBuf::with_capacity(0));
            let dir = if durable {
                Dir::WriteDurable
            } else {
                Dir::Write
            };
            let (r, b) = RwOp::new(self.fd.clone(), b, skip..len, at, dir)
                .run()
                .await;
            bufs[i] = b;
            if let Err(e) = r {
                return (Err(e), bufs);
            }
            at += (len - skip) as u64;
            skip = 0;
        }
        (Ok(()), bufs)
    }
}

/// A buffer several concurrent reads fill, each its own disjoint range.
struct SharedBuf(std::cell::UnsafeCell<AlignedBuf>);

/// A read into one range of a [`SharedBuf`].
struct SharedReadOp {
    fd: Rc<OwnedFd>,
    buf: Rc<SharedBuf>,
    range: Range<usize>,
    pos: u64,
}

impl SharedReadOp {
    async fn run(mut self) -> io::Result<()> {
        loop {
            if self.range.is_empty() {
                return Ok(());
            }
            let compio::BufResult(res, op) = crate::submit::submit(self).await;
            self = op;
            match res {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "device read returned 0 bytes",
                    ));
                }
                Ok(n) => {
                    self.range.start += n;
                    self.pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

// SAFETY: the op keeps the shared buffer alive until completion; ranges of
// concurrent ops on one buffer are disjoint (checked by the store's plan),
// and nothing else touches the buffer until every op has finished.
unsafe impl OpCode for SharedReadOp {
    type Control = ();

    fn create_entry(&mut self, _: &mut ()) -> OpEntry {
        // SAFETY: range was checked against the buffer's length.
        let ptr = unsafe { (*self.buf.0.get()).as_mut_ptr().add(self.range.start) };
        let len = self.range.len() as u32;
        opcode::Read::new(types::Fd(self.fd.as_raw_fd()), ptr, len)
            .offset(self.pos)
            .build()
            .into()
    }
}

/// A vectored write of whole buffers.
struct WritevOp {
    fd: Rc<OwnedFd>,
    bufs: Vec<AlignedBuf>,
    iov: Vec<libc::iovec>,
    pos: u64,
    durable: bool,
}

// SAFETY: the iovecs point into buffers the op owns; neither vector is
// touched until completion (their heap storage does not move with the op).
unsafe impl OpCode for WritevOp {
    type Control = ();

    fn create_entry(&mut self, _: &mut ()) -> OpEntry {
        let e = opcode::Writev::new(
            types::Fd(self.fd.as_raw_fd()),
            self.iov.as_ptr().cast(),
            self.iov.len() as u32,
        )
        .offset(self.pos);
        let e = if self.durable {
            e.rw_flags(libc::RWF_DSYNC)
        } else {
            e
        };
        e.build().into()
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Dir {
    Read,
    Write,
    WriteDurable,
}

/// One read or write of a sub-range of an owned buffer.
struct RwOp {
    fd: Rc<OwnedFd>,
    buf: AlignedBuf,
    range: Range<usize>,
    pos: u64,
    dir: Dir,
}

impl RwOp {
    fn new(fd: Rc<OwnedFd>, buf: AlignedBuf, range: Range<usize>, pos: u64, dir: Dir) -> Self {
        Self {
            fd,
            buf,
            range,
            pos,
            dir,
        }
    }

    /// Submits until the whole range is transferred (short transfers resume).
    async fn run(mut self) -> IoResult {
        let end = self.range.end;
        loop {
            if self.range.start == self.range.end {
                return (Ok(()), self.buf);
            }
            let compio::BufResult(res, op) = crate::submit::submit(self).await;
            self = op;
            match res {
                Ok(0) => {
                    let e = io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "device I/O transferred 0 bytes",
                    );
                    return (Err(e), self.buf);
                }
                Ok(n) => {
                    self.range.start += n;
                    self.pos += n as u64;
                    debug_assert!(self.range.start <= end);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Err(e), self.buf),
            }
        }
    }
}

// SAFETY: the buffer is owned by the op, which compio keeps alive and unmoved
// until the kernel completes it; the range was checked against its length.
unsafe impl OpCode for RwOp {
    type Control = ();

    fn create_entry(&mut self, _: &mut ()) -> OpEntry {
        let fd = types::Fd(self.fd.as_raw_fd());
        let len = (self.range.end - self.range.start) as u32;
        // SAFETY: range.start <= buf.len() was checked.
        let ptr = unsafe { self.buf.as_ptr().add(self.range.start) };
        match self.dir {
            Dir::Read => opcode::Read::new(fd, ptr.cast_mut(), len)
                .offset(self.pos)
                .build()
                .into(),
            Dir::Write => opcode::Write::new(fd, ptr, len)
                .offset(self.pos)
                .build()
                .into(),
            Dir::WriteDurable => opcode::Write::new(fd, ptr, len)
                .offset(self.pos)
                .rw_flags(libc::RWF_DSYNC)
                .build()
                .into(),
        }
    }
}

struct FsyncOp {
    fd: Rc<OwnedFd>,
}

// SAFETY: fsync borrows no memory.
unsafe impl OpCode for FsyncOp {
    type Control = ();

    fn create_entry(&mut self, _: &mut ()) -> OpEntry {
        opcode::Fsync::new(types::Fd(self.fd.as_raw_fd()))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .into()
    }
}

/// Opens a file device, creating the file with `size` bytes when `size` is given.
pub fn open_file_device(path: &Path, create_size: Option<u64>) -> io::Result<FileDevice> {
    if let Some(size) = create_size {
        FileDevice::create_file(path, size)?;
    }
    FileDevice::open(path)
}
