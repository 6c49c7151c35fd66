//! What changed in a volume between two views of it (a snapshot, the head,
//! or nothing), listed per object by its primary from metadata alone, and
//! rolling the head back to a snapshot by rewriting only what changed.
//!
//! Export-diff reads the listed data extents of the newer view and nothing
//! else; a full export reads only what the view holds; a rollback copies
//! the snapshot's blocks where the head differs and discards where the
//! snapshot reads zeros.

use pontoon_buf::AlignedBuf;
use pontoon_proto::diff::decode_extents;
use pontoon_proto::{ChangedExtent, DiffReq, DiffView, Message};
use pontoon_types::ObjectId;

use crate::ClientError;
use crate::volume::Volume;

/// Most bytes one read of changed data asks for.
pub const READ_CHUNK: u64 = 4 << 20;

/// One changed extent with, where the view reads data, that data (in
/// pieces of at most [`READ_CHUNK`]: (volume offset, bytes)).
#[derive(Debug)]
pub struct Change {
    /// What changed.
    pub extent: ChangedExtent,
    /// Its data, empty where it reads zeros.
    pub data: Vec<(u64, AlignedBuf)>,
}

impl Volume {
    /// The id of this volume's snapshot `name`, from the newest map.
    pub fn snapshot_id(&self, name: &str) -> Result<u64, ClientError> {
        let map = self.transport.map.get();
        map.volumes
            .get(&self.id)
            .and_then(|v| v.snapshot_by_name(name))
            .map(|s| s.id)
            .ok_or_else(|| ClientError::NotFound(format!("{}@{name}", self.base_name())))
    }

    /// The volume's name without `@SNAPSHOT`.
    fn base_name(&self) -> &str {
        self.name.split('@').next().unwrap_or(&self.name)
    }

    /// What this volume reads: its snapshot's view, or the head.
    pub fn view(&self) -> Result<DiffView, ClientError> {
        Ok(self.snap_id()?.map_or(DiffView::Head, DiffView::Snap))
    }

    /// Bytes per object.
    pub fn object_size(&self) -> u64 {
        self.object_size
    }

    /// Objects covering `size` bytes.
    pub fn objects_in(&self, size: u64) -> u64 {
        size.div_ceil(self.object_size)
    }

    /// The extents of object `index` (volume offsets, ascending, within
    /// this volume's size) that differ between `from` and this volume's
    /// view, with what this view reads there. Asks the object's primary,
    /// which reads no data.
    pub async fn diff_object(
        &self,
        index: u64,
        from: DiffView,
    ) -> Result<Vec<ChangedExtent>, ClientError> {
        let to = self.view()?;
        let oid = ObjectId::new(self.id.0, index);
        let (reply, _) = self
            .transport
            .call(
                oid,
                |target, _| Message::Diff(DiffReq { target, from, to }),
                None,
            )
            .await?;
        let extents = decode_extents(&reply.ranges, self.object_size)
            .map_err(|e| ClientError::Protocol(format!("object {oid}: {e}")))?;
        let base = index * self.object_size;
        let size = self.current_size();
        Ok(extents
            .into_iter()
            .filter_map(|e| {
                let offset = base + e.offset;
                let len = e.len.min(size.saturating_sub(offset));
                (len > 0).then_some(ChangedExtent {
                    offset,
                    len,
                    data: e.data,
                })
            })
            .collect())
    }

    /// [`Volume::diff_object`] with the changed data read: at most one
    /// object's worth in memory.
    pub async fn read_changes(
        &self,
        index: u64,
        from: DiffView,
    ) -> Result<Vec<Change>, ClientError> {
        let mut out = Vec::new();
        for extent in self.diff_object(index, from).await? {
            let mut data = Vec::new();
            let end = extent.offset + extent.len;
            let mut at = extent.offset;
            while extent.data && at < end {
                let n = READ_CHUNK.min(end - at);
                data.push((at, self.read_at(at, n).await?));
                at += n;
            }
            out.push(Change { extent, data });
        }
        Ok(out)
    }

    /// Returns object `index` of this volume's head to what `snap` (a
    /// snapshot of this volume) reads: copies the snapshot's blocks where
    /// the head differs, discards where the snapshot reads zeros, and
    /// discards the part past the snapshot's size. Returns the bytes
    /// rewritten or discarded.
    pub async fn rollback_object(&self, snap: &Volume, index: u64) -> Result<u64, ClientError> {
        self.writable()?;
        if snap.id != self.id || !snap.is_snapshot() {
            return Err(ClientError::InvalidArgument(format!(
                "{} is not a snapshot of {}",
                snap.name, self.name
            )));
        }
        let start = index * self.object_size;
        let end = (start + self.object_size).min(self.current_size());
        let snap_end = snap.current_size().min(end);
        let mut changed = 0;
        if start < snap_end {
            for c in snap.read_changes(index, DiffView::Head).await? {
                if !c.extent.data {
                    self.discard_at(c.extent.offset, c.extent.len).await?;
                }
                for (at, data) in c.data {
                    self.write_buf(at, data).await?;
                }
                changed += c.extent.len;
            }
        }
        // Past the snapshot's size it reads nothing: discard what the head
        // holds there.
        let tail = snap_end.max(start);
        if tail < end {
            for e in self.diff_object(index, DiffView::Nothing).await? {
                let (s, t) = (e.offset.max(tail), (e.offset + e.len).min(end));
                if s < t {
                    self.discard_at(s, t - s).await?;
                    changed += t - s;
                }
            }
        }
        Ok(changed)
    }
}
