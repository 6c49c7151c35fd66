//! A volume opened by name: byte ranges split into per-object requests,
//! sent concurrently, and reassembled.

use std::rc::Rc;

use futures::future::try_join_all;
use pontoon_buf::AlignedBuf;
use pontoon_proto::{DiffView, DiscardReq, Message, ReadReq, WriteReq};
use pontoon_types::{BLOCK_SIZE_U64, ObjectId, VolumeId};
use pontoon_volume::{BlockVolume, Extent, VolumeError, check_io};

use crate::ClientError;
use crate::clone::WrittenObjects;
use crate::object_io::Transport;
use crate::snapshot::SnapView;

/// An open volume, or a snapshot of one (read-only), for use on the
/// thread that opened it.
#[derive(Clone)]
pub struct Volume {
    pub(crate) transport: Rc<Transport>,
    pub(crate) id: VolumeId,
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) object_size: u64,
    /// The snapshot opened, if this is one.
    pub(crate) snap: Option<SnapView>,
    /// Objects of a clone known to be written in full (see [`crate::clone`]).
    pub(crate) written: WrittenObjects,
}

/// The part of an I/O that falls in one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) oid: ObjectId,
    /// Offset within the object.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    /// Offset within the caller's buffer.
    pub(crate) at: u64,
}

impl Volume {
    /// Opens volume `name` in the transport's current map.
    pub fn open(transport: Rc<Transport>, name: &str) -> Result<Self, ClientError> {
        let map = transport.map.get();
        let v = map
            .volume_by_name(name)
            .ok_or_else(|| ClientError::NotFound(name.to_string()))?;
        Ok(Self {
            id: v.id,
            name: v.name.clone(),
            size: v.size_bytes,
            object_size: v.object_size,
            transport,
            snap: None,
            written: WrittenObjects::default(),
        })
    }

    /// The volume's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The size in bytes, as of the newest map (a resize shows up here; a
    /// snapshot keeps the size the volume had when it was taken).
    pub fn current_size(&self) -> u64 {
        if self.snap.is_some() {
            return self.size;
        }
        self.transport
            .map
            .get()
            .volumes
            .get(&self.id)
            .map_or(self.size, |v| v.size_bytes)
    }

    pub(crate) fn pieces(&self, offset: u64, len: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < len {
            let pos = offset + at;
            let index = pos / self.object_size;
            let within = pos % self.object_size;
            let n = (self.object_size - within).min(len - at);
            out.push(Piece {
                oid: ObjectId::new(self.id.0, index),
                offset: within,
                len: n,
                at,
            });
            at += n;
        }
        out
    }

    pub(crate) fn check(&self, offset: u64, len: u64) -> Result<(), ClientError> {
        check_io(self.current_size(), offset, len)
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))
    }

    /// Reads `len` bytes at `offset` (4 KiB aligned).
    pub async fn read_at(&self, offset: u64, len: u64) -> Result<AlignedBuf, ClientError> {
        self.check(offset, len)?;
        let snap = self.snap_id()?;
        let layer = self.parent_layer()?;
        let pieces = self.pieces(offset, len);
        let parts = try_join_all(pieces.iter().map(|p| {
            let layer = layer.as_ref();
            async move {
                match layer {
                    Some(l) if self.falls_through(l, p) => self.read_clone_piece(p, l).await,
                    _ => self.read_piece(p, snap).await,
                }
            }
        }))
        .await?;
        if parts.len() == 1 {
            return Ok(parts
                .into_iter()
                .next()
                .unwrap_or_else(|| AlignedBuf::for_read(0)));
        }
        let mut out = AlignedBuf::with_capacity(len as usize);
        for p in &parts {
            out.extend_from_slice(p);
        }
        Ok(out)
    }

    /// Reads one object's part of a read, of the head or of snapshot `snap`.
    pub(crate) async fn read_piece(
        &self,
        p: &Piece,
        snap: Option<u64>,
    ) -> Result<AlignedBuf, ClientError> {
        let (_, data) = self
            .transport
            .call(
                p.oid,
                |target, _| {
                    Message::Read(ReadReq {
                        target,
                        offset: p.offset,
                        len: p.len as u32,
                        snap,
                    })
                },
                None,
            )
            .await?;
        match data {
            Some(d) if d.len() as u64 == p.len => Ok(d),
            other => Err(ClientError::Protocol(format!(
                "read of {} bytes of {} returned {} bytes",
                p.len,
                p.oid,
                other.map_or(0, |d| d.len())
            ))),
        }
    }

    /// Writes `data` at `offset` (4 KiB aligned); returns once every
    /// replica of every object touched has it durable. Each object's part
    /// is copied once into the buffer its request is sent from.
    pub async fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), ClientError> {
        self.writable()?;
        self.check(offset, data.len() as u64)?;
        let pieces = self.pieces(offset, data.len() as u64);
        try_join_all(pieces.iter().map(|p| {
            let slice = &data[p.at as usize..(p.at + p.len) as usize];
            self.write_piece(p, Rc::new(AlignedBuf::copy_from(slice)))
        }))
        .await?;
        Ok(())
    }

    /// [`ClusterVolume::write_at`] of an owned buffer: a write inside one
    /// object is sent from `data` itself, without a copy.
    pub async fn write_buf(&self, offset: u64, data: AlignedBuf) -> Result<(), ClientError> {
        self.writable()?;
        self.check(offset, data.len() as u64)?;
        let pieces = self.pieces(offset, data.len() as u64);
        if let [p] = pieces.as_slice() {
            return self.write_piece(p, Rc::new(data)).await;
        }
        self.write_at(offset, &data).await
    }

    /// Writes one object's part of a write.
    async fn write_piece(&self, p: &Piece, data: Rc<AlignedBuf>) -> Result<(), ClientError> {
        self.send_write(p, data, false).await?;
        self.note_write(p);
        Ok(())
    }

    /// Sends one object's part of a write; with `fill`, the primary writes
    /// only the blocks the object does not hold yet ([`WriteReq::fill`]).
    pub(crate) async fn send_write(
        &self,
        p: &Piece,
        data: Rc<AlignedBuf>,
        fill: bool,
    ) -> Result<(), ClientError> {
        let crc = crc32c::crc32c(&data);
        self.transport
            .call(
                p.oid,
                |target, snap_seq| {
                    Message::Write(WriteReq {
                        target,
                        offset: p.offset,
                        data_crc: crc,
                        fua: false,
                        fill,
                        snap_seq,
                    })
                },
                Some(&data),
            )
            .await?;
        Ok(())
    }

    /// Deallocates a range (4 KiB aligned): it reads back as zeros.
    pub async fn discard_at(&self, offset: u64, len: u64) -> Result<(), ClientError> {
        self.writable()?;
        self.check(offset, len)?;
        let Some((offset, len)) = self.zero_overlap(offset, len).await? else {
            return Ok(());
        };
        let pieces = self.pieces(offset, len);
        try_join_all(pieces.iter().map(|p| {
            self.transport.call(
                p.oid,
                |target, snap_seq| {
                    Message::Discard(DiscardReq {
                        target,
                        offset: p.offset,
                        len: p.len,
                        snap_seq,
                    })
                },
                None,
            )
        }))
        .await?;
        Ok(())
    }

    /// Allocated and unallocated extents covering `offset..offset+len`: of
    /// the head, or of the snapshot this handle reads; a clone adds what
    /// its parent snapshot holds inside the overlap (those blocks read the
    /// parent's data).
    pub async fn allocation_at(&self, offset: u64, len: u64) -> Result<Vec<Extent>, ClientError> {
        self.check(offset, len)?;
        let layer = self.parent_layer()?;
        let pieces = self.pieces(offset, len);
        let maps = try_join_all(pieces.iter().map(|p| async move {
            Ok::<_, ClientError>((p, self.allocated_ranges(p.oid.index).await?))
        }))
        .await?;
        let mut out: Vec<Extent> = Vec::new();
        let mut push =
            |len: u64, allocated: bool| crate::clone::push_extent(&mut out, len, allocated);
        for (p, ranges) in maps {
            let (start, end) = (p.offset, p.offset + p.len);
            let mut pos = start;
            for (o, l) in ranges {
                let (s, e) = (o.max(start), (o + l).min(end));
                if s >= e {
                    continue;
                }
                push(s - pos, false);
                push(e - s, true);
                pos = e;
            }
            push(end - pos, false);
        }
        if let Some(l) = layer {
            let end = (offset + len).min(l.overlap);
            if offset < end {
                // Boxed: the parent is a snapshot, never itself a clone,
                // but the future's type would otherwise contain itself.
                let parent = Box::pin(l.parent.allocation_at(offset, end - offset)).await?;
                return Ok(crate::clone::union_extents(&out, &parent));
            }
        }
        Ok(out)
    }

    /// Allocated ranges of object `index` in this handle's view, as
    /// `(offset within the object, len)`, ascending: the head's from an
    /// allocation query, a snapshot's from a diff against nothing (both
    /// answered from metadata, no data read).
    pub(crate) async fn allocated_ranges(
        &self,
        index: u64,
    ) -> Result<Vec<(u64, u64)>, ClientError> {
        if self.snap_id()?.is_none() {
            let oid = ObjectId::new(self.id.0, index);
            let (r, _) = self
                .transport
                .call(oid, |t, _| Message::Allocation(t), None)
                .await?;
            return Ok(r.ranges);
        }
        let base = index * self.object_size;
        Ok(self
            .diff_object(index, DiffView::Nothing)
            .await?
            .into_iter()
            .filter(|e| e.data)
            .map(|e| (e.offset - base, e.len))
            .collect())
    }
}

impl BlockVolume for Volume {
    fn size(&self) -> u64 {
        self.current_size()
    }

    fn read_only(&self) -> bool {
        self.is_snapshot()
    }

    async fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, VolumeError> {
        Ok(self.read_at(offset, len).await?)
    }

    async fn write(&self, offset: u64, data: AlignedBuf, _fua: bool) -> Result<(), VolumeError> {
        // Every acknowledged write is already durable on every replica.
        Ok(self.write_buf(offset, data).await?)
    }

    async fn flush(&self) -> Result<(), VolumeError> {
        // Nothing is acknowledged before it is durable: a flush has nothing
        // left to wait for, on this connection or any other.
        Ok(())
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        Ok(self.discard_at(offset, len).await?)
    }

    async fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        may_unmap: bool,
    ) -> Result<(), VolumeError> {
        self.writable()?;
        if may_unmap {
            return Ok(self.discard_at(offset, len).await?);
        }
        // Allocate real zeros, a bounded chunk at a time.
        const CHUNK: u64 = 1 << 20;
        let zeros = AlignedBuf::zeroed(CHUNK.min(len) as usize);
        let mut at = 0;
        while at < len {
            let n = CHUNK.min(len - at);
            self.write_at(offset + at, &zeros[..n as usize]).await?;
            at += n;
        }
        Ok(())
    }

    async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<Extent>, VolumeError> {
        Ok(self.allocation_at(offset, len).await?)
    }
}

const _: () = assert!(BLOCK_SIZE_U64 == 4096);
