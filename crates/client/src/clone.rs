//! Clones, layered by the client as librbd does: a clone's block reads as
//! what the clone wrote there, else (within the overlap) as the parent
//! snapshot's block, else zeros. The map names the parent
//! (`pontoon_cluster::clones`); the OSDs know nothing of clones.
//!
//! Per-block allocation and round trips. The store does not tell a block
//! never written from one written with zeros on a read, so a read of an
//! object the clone may not have written in full also asks for the
//! object's allocated ranges. That [`Message::Allocation`] goes out with
//! the read, at once, so the answer costs one round trip, not two; only
//! when it shows holes inside the overlap does a second round trip read
//! the parent snapshot (one read spanning all the holes of the piece).
//! Once an object is seen fully allocated (an allocation answer, or a
//! write of the whole object) the handle remembers it in a bit set, and
//! its reads are single plain reads, as on any volume: the clone's
//! library never deallocates a block inside the overlap (see below), so a
//! fully written object stays so. Writes go only to the blocks written,
//! with no copy-up of the rest of the object: a read merges per block.
//!
//! Discard and write-zeroes inside the overlap write zeros: a deallocated
//! block would fall through to the parent again. Past the overlap (a
//! grown clone) they deallocate as on any volume.
//!
//! Flatten copies, object by object, the parent's data into the blocks
//! the clone has not written (blocks that read zeros in the parent are
//! skipped: they read zeros once detached too), then the caller detaches
//! the parent in the map. It only fills holes, so an interrupted flatten
//! is rerun from the start at the cost of the allocation queries. Its
//! writes are fills ([`pontoon_proto::WriteReq::fill`]): the primary
//! writes only the blocks the object still lacks, decided under the
//! object's lock, so a client writing the clone meanwhile keeps its data.

use std::cell::RefCell;
use std::rc::Rc;

use futures::StreamExt;
use pontoon_buf::AlignedBuf;
use pontoon_cluster::clones::ParentRecord;
use pontoon_proto::Message;
use pontoon_types::BLOCK_SIZE_U64;
use pontoon_volume::Extent;

use crate::ClientError;
use crate::snapshot::SnapView;
use crate::volume::{Piece, Volume};

/// Objects whose flatten runs concurrently.
const FLATTEN_PARALLEL: usize = 4;
/// Largest zero-write a discard inside the overlap sends at once.
const ZERO_CHUNK: u64 = 1 << 20;

/// Indices of a clone's objects known to be allocated in full: one bit
/// per object, so bounded by the volume's object count.
#[derive(Clone, Default)]
pub(crate) struct WrittenObjects(Rc<RefCell<Vec<u64>>>);

impl WrittenObjects {
    fn contains(&self, index: u64) -> bool {
        let word = (index / 64) as usize;
        self.0
            .borrow()
            .get(word)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    }

    fn insert(&self, index: u64) {
        let word = (index / 64) as usize;
        let mut bits = self.0.borrow_mut();
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        bits[word] |= 1 << (index % 64);
    }
}

/// A clone's parent, opened for reading.
pub(crate) struct Layer {
    /// The parent snapshot, read-only.
    pub parent: Volume,
    /// Bytes of the clone that fall through to it.
    pub overlap: u64,
}

/// The parts of `[start, end)` that `ranges` (allocated `(offset, len)`,
/// ascending) leave unallocated, as `(start, end)` pairs.
fn holes(ranges: &[(u64, u64)], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = start;
    for &(o, l) in ranges {
        let (s, e) = (o.max(start), (o + l).min(end));
        if s >= e {
            continue;
        }
        if s > pos {
            out.push((pos, s));
        }
        pos = pos.max(e);
    }
    if pos < end {
        out.push((pos, end));
    }
    out
}

/// Appends `len` bytes (allocated or not) to `out`, merging with the last
/// extent when it is of the same kind.
pub(crate) fn push_extent(out: &mut Vec<Extent>, len: u64, allocated: bool) {
    if len == 0 {
        return;
    }
    match out.last_mut() {
        Some(e) if e.allocated == allocated => e.len += len,
        _ => out.push(Extent { len, allocated }),
    }
}

/// The union of two allocation maps that start at the same offset: a
/// block is allocated if either says so. `b` may cover less than `a` (a
/// clone's overlap ends inside the range); the result covers `a`'s range.
pub(crate) fn union_extents(a: &[Extent], b: &[Extent]) -> Vec<Extent> {
    let spans = |x: &[Extent]| {
        let mut pos = 0;
        x.iter()
            .map(|e| {
                pos += e.len;
                (pos - e.len, pos, e.allocated)
            })
            .collect::<Vec<_>>()
    };
    let (sa, sb) = (spans(a), spans(b));
    let mut cuts: Vec<u64> = sa.iter().chain(&sb).flat_map(|s| [s.0, s.1]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let total = sa.last().map_or(0, |s| s.1);
    let at = |spans: &[(u64, u64, bool)], p: u64| spans.iter().any(|s| s.0 <= p && p < s.1 && s.2);
    let mut out = Vec::new();
    for w in cuts.windows(2) {
        let (s, e) = (w[0], w[1].min(total));
        if s < e {
            push_extent(&mut out, e - s, at(&sa, s) || at(&sb, s));
        }
    }
    out
}

/// What a flatten did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlattenStats {
    /// Objects of the overlap looked at.
    pub objects: u64,
    /// Bytes copied from the parent.
    pub copied_bytes: u64,
}

impl Volume {
    /// The parent this volume reads through to, in the newest map (`None`
    /// for a volume that is not a clone, and for snapshots: a clone takes
    /// no snapshots).
    pub(crate) fn parent_layer(&self) -> Result<Option<Layer>, ClientError> {
        if self.snap.is_some() {
            return Ok(None);
        }
        let map = self.transport.map.get();
        let Some(p) = map.volumes.get(&self.id).and_then(|v| v.parent.clone()) else {
            return Ok(None);
        };
        let spec = map.parent_spec(&p);
        let pv = map
            .volumes
            .get(&p.volume)
            .ok_or_else(|| ClientError::NotFound(spec.clone()))?;
        let s = pv
            .snapshot(p.snap)
            .ok_or_else(|| ClientError::NotFound(spec.clone()))?;
        Ok(Some(Layer {
            parent: Volume {
                transport: self.transport.clone(),
                id: pv.id,
                name: spec,
                size: s.size_bytes,
                object_size: pv.object_size,
                snap: Some(SnapView {
                    id: s.id,
                    name: s.name.clone(),
                }),
                written: WrittenObjects::default(),
            },
            overlap: p.overlap,
        }))
    }

    /// The parent record of this volume in the newest map, if it is a clone.
    pub fn parent(&self) -> Option<ParentRecord> {
        let map = self.transport.map.get();
        map.volumes.get(&self.id).and_then(|v| v.parent.clone())
    }

    /// Bytes of object `index` inside the volume's current size.
    fn object_len(&self, index: u64) -> u64 {
        let base = index * self.object_size;
        self.object_size
            .min(self.current_size().saturating_sub(base))
    }

    /// Whether piece `p` of a clone may need its parent's blocks.
    pub(crate) fn falls_through(&self, l: &Layer, p: &Piece) -> bool {
        let base = p.oid.index * self.object_size;
        base + p.offset < l.overlap && !self.written.contains(p.oid.index)
    }

    /// Remembers that a write covered object `p.oid` in full.
    pub(crate) fn note_write(&self, p: &Piece) {
        if p.offset == 0 && p.len == self.object_len(p.oid.index) {
            self.written.insert(p.oid.index);
        }
    }

    /// Reads piece `p` of a clone: the clone's read and its allocation
    /// query together, then the parent's blocks for the holes inside the
    /// overlap.
    pub(crate) async fn read_clone_piece(
        &self,
        p: &Piece,
        l: &Layer,
    ) -> Result<AlignedBuf, ClientError> {
        let (read, alloc) = futures::join!(
            self.read_piece(p, None),
            self.transport
                .call(p.oid, |t, _| Message::Allocation(t), None)
        );
        let mut data = read?;
        let ranges = alloc?.0.ranges;
        let index = p.oid.index;
        let base = index * self.object_size;
        if holes(&ranges, 0, self.object_len(index)).is_empty() {
            self.written.insert(index);
        }
        let end = (p.offset + p.len).min(l.overlap.saturating_sub(base));
        let gaps = holes(&ranges, p.offset, end);
        let (Some(&(first, _)), Some(&(_, last))) = (gaps.first(), gaps.last()) else {
            return Ok(data);
        };
        let from = l.parent.read_at(base + first, last - first).await?;
        for (s, e) in gaps {
            data[(s - p.offset) as usize..(e - p.offset) as usize]
                .copy_from_slice(&from[(s - first) as usize..(e - first) as usize]);
        }
        Ok(data)
    }

    /// For a discard of `offset..offset+len` on a clone: writes zeros over
    /// the part inside the overlap and returns the rest to deallocate
    /// (`None`: nothing left). A volume that is not a clone gets its range
    /// back unchanged.
    pub(crate) async fn zero_overlap(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<Option<(u64, u64)>, ClientError> {
        let overlap = match self.parent_layer()? {
            Some(l) if offset < l.overlap => l.overlap,
            _ => return Ok(Some((offset, len))),
        };
        let end = offset + len;
        let zero_end = end.min(overlap);
        let zeros = AlignedBuf::zeroed(ZERO_CHUNK.min(zero_end - offset) as usize);
        let mut at = offset;
        while at < zero_end {
            let n = ZERO_CHUNK.min(zero_end - at);
            self.write_at(at, &zeros[..n as usize]).await?;
            at += n;
        }
        Ok((end > zero_end).then(|| (zero_end, end - zero_end)))
    }

    /// Copies the parent's data into every block of the overlap this clone
    /// has not written, `progress(done, total)` after each object. Does not
    /// detach the parent: the caller does that in the map once this
    /// returns. A volume that is not a clone has nothing to copy.
    pub async fn flatten(
        &self,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<FlattenStats, ClientError> {
        self.writable()?;
        let Some(l) = self.parent_layer()? else {
            return Ok(FlattenStats::default());
        };
        let total = l.overlap.div_ceil(self.object_size);
        let l = &l;
        let mut jobs = futures::stream::iter(0..total)
            .map(|index| self.flatten_object(l, index))
            .buffer_unordered(FLATTEN_PARALLEL);
        let mut stats = FlattenStats::default();
        while let Some(copied) = jobs.next().await {
            stats.objects += 1;
            stats.copied_bytes += copied?;
            progress(stats.objects, total);
        }
        Ok(stats)
    }

    /// Fills object `index`'s holes inside the overlap with the parent's
    /// non-zero blocks, reading only what the parent holds there; returns
    /// the bytes written.
    async fn flatten_object(&self, l: &Layer, index: u64) -> Result<u64, ClientError> {
        let base = index * self.object_size;
        let end = self.object_len(index).min(l.overlap.saturating_sub(base));
        let oid = pontoon_types::ObjectId::new(self.id.0, index);
        let (r, _) = self
            .transport
            .call(oid, |t, _| Message::Allocation(t), None)
            .await?;
        // Only where the clone has a hole and the parent holds data: the
        // parent's unallocated blocks read zeros, detached or not.
        let parent = l.parent.allocated_ranges(index).await?;
        let gaps: Vec<(u64, u64)> = holes(&r.ranges, 0, end)
            .into_iter()
            .flat_map(|(s, e)| {
                parent.iter().filter_map(move |&(o, n)| {
                    let (a, b) = (o.max(s), (o + n).min(e));
                    (a < b).then_some((a, b))
                })
            })
            .collect();
        let (Some(&(first, _)), Some(&(_, last))) = (gaps.first(), gaps.last()) else {
            return Ok(0);
        };
        let from = l.parent.read_at(base + first, last - first).await?;
        let mut copied = 0;
        for (s, e) in gaps {
            let mut block = s;
            while block < e {
                let nonzero = |b: u64| {
                    let at = (b - first) as usize;
                    from[at..at + BLOCK_SIZE_U64 as usize]
                        .iter()
                        .any(|&x| x != 0)
                };
                if !nonzero(block) {
                    block += BLOCK_SIZE_U64;
                    continue;
                }
                let run = block;
                while block < e && nonzero(block) {
                    block += BLOCK_SIZE_U64;
                }
                let (a, b) = ((run - first) as usize, (block - first) as usize);
                let piece = Piece {
                    oid,
                    offset: run,
                    len: block - run,
                    at: 0,
                };
                let data = Rc::new(AlignedBuf::copy_from(&from[a..b]));
                self.send_write(&piece, data, true).await?;
                copied += block - run;
            }
        }
        Ok(copied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_the_unallocated_parts_of_the_range() {
        let r = [(0, 4096), (12288, 8192)];
        assert_eq!(holes(&r, 0, 32768), vec![(4096, 12288), (20480, 32768)]);
        assert_eq!(holes(&r, 12288, 20480), vec![]);
        assert_eq!(holes(&[], 4096, 8192), vec![(4096, 8192)]);
        assert_eq!(holes(&r, 0, 4096), vec![]);
    }

    #[test]
    fn a_block_is_allocated_if_the_clone_or_its_parent_holds_it() {
        let e = |len, allocated| Extent { len, allocated };
        let clone = [e(8192, false), e(8192, true), e(8192, false)];
        // The parent's map covers only the overlap's first 12 KiB.
        let got = union_extents(&clone, &[e(4096, true), e(8192, false)]);
        assert_eq!(
            got,
            vec![e(4096, true), e(4096, false), e(8192, true), e(8192, false)]
        );
        let got = union_extents(&clone, &[e(4096, false), e(12288, true)]);
        assert_eq!(got, vec![e(4096, false), e(12288, true), e(8192, false)]);
        assert_eq!(union_extents(&clone, &[]), clone.to_vec());
        assert_eq!(
            union_extents(&[e(8192, false)], &[e(8192, true)]),
            vec![e(8192, true)]
        );
        assert_eq!(union_extents(&[], &[]), vec![]);
    }
}
