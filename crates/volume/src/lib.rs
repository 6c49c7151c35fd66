//! The interface between Pontoon's host-protocol front-ends (NBD, NVMe/TCP)
//! and whatever serves the blocks: the cluster client library in
//! production, an in-memory volume in tests.
//!
//! A front-end opens volumes by name through a [`VolumeCatalog`] and issues
//! 4 KiB-aligned I/O on a [`BlockVolume`]. Both are per-thread (`!Send` is
//! fine): each front-end worker thread owns its own catalog, built by a
//! factory, so no lock is shared on the data path. This crate must not
//! depend on the cluster, the network or any runtime.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, BLOCK_SIZE_U64};

/// Alignment of every offset and length given to a [`BlockVolume`].
pub const VOLUME_BLOCK: u64 = BLOCK_SIZE_U64;

/// Why a volume operation failed, in terms a host protocol can report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// Offset/length unaligned, or past the end of the volume.
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The pool has no space for new data.
    #[error("no space left in the pool: {0}")]
    NoSpace(String),
    /// The volume is read-only (e.g. a snapshot).
    #[error("volume is read-only")]
    ReadOnly,
    /// The cluster refused the client's identity or its caps do not allow
    /// the operation.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The data is temporarily unreachable (PG inactive, timeouts); the
    /// host may retry.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
    /// Data could not be read intact from any replica.
    #[error("data integrity error: {0}")]
    DataLoss(String),
    /// Any other I/O failure.
    #[error("I/O error: {0}")]
    Io(String),
}

/// A run of a volume's address space and whether it holds data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes (a multiple of [`VOLUME_BLOCK`]).
    pub len: u64,
    /// False for a hole: never written, or discarded (reads as zeros).
    pub allocated: bool,
}

/// A thin-provisioned block device of fixed size.
///
/// Every offset and length is a multiple of [`VOLUME_BLOCK`] and inside the
/// volume; an implementation answers anything else with
/// [`VolumeError::InvalidArgument`]. A write completes once it is durable
/// on every replica, so `fua` and `flush` cost nothing extra in Pontoon,
/// but front-ends pass them through faithfully.
pub trait BlockVolume: 'static {
    /// Size in bytes.
    fn size(&self) -> u64;

    /// Whether the volume refuses changes (a snapshot): writes, discards
    /// and write-zeroes fail with [`VolumeError::ReadOnly`], and front-ends
    /// advertise it (NBD's `NBD_FLAG_READ_ONLY`). Required, not defaulted,
    /// so that a wrapper cannot forget to pass it on.
    fn read_only(&self) -> bool;

    /// Reads `len` bytes at `offset`; holes read as zeros.
    fn read(&self, offset: u64, len: u64) -> impl Future<Output = Result<AlignedBuf, VolumeError>>;

    /// Writes `data` at `offset`.
    fn write(
        &self,
        offset: u64,
        data: AlignedBuf,
        fua: bool,
    ) -> impl Future<Output = Result<(), VolumeError>>;

    /// Makes every completed write durable.
    fn flush(&self) -> impl Future<Output = Result<(), VolumeError>>;

    /// Deallocates a range (reads as zeros afterwards).
    fn discard(&self, offset: u64, len: u64) -> impl Future<Output = Result<(), VolumeError>>;

    /// Makes a range read as zeros; with `may_unmap`, by deallocating it.
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        may_unmap: bool,
    ) -> impl Future<Output = Result<(), VolumeError>>;

    /// Allocation status of `offset..offset+len` as consecutive extents
    /// covering the range from `offset` (may stop early; never empty for a
    /// non-empty range).
    fn allocation(
        &self,
        offset: u64,
        len: u64,
    ) -> impl Future<Output = Result<Vec<Extent>, VolumeError>>;
}

/// A volume's name and size, as a front-end lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeInfo {
    /// The volume's name (the NBD export name, the NVMe namespace's volume).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
}

/// Finds and opens volumes by name.
pub trait VolumeCatalog: 'static {
    /// The volume type opened.
    type Volume: BlockVolume;

    /// All volumes, sorted by name.
    fn list(&self) -> impl Future<Output = Result<Vec<VolumeInfo>, VolumeError>>;

    /// Opens a volume; `Ok(None)` if there is none by that name.
    fn open(&self, name: &str) -> impl Future<Output = Result<Option<Self::Volume>, VolumeError>>;
}

/// Checks a request against alignment and size.
pub fn check_io(size: u64, offset: u64, len: u64) -> Result<(), VolumeError> {
    if !offset.is_multiple_of(VOLUME_BLOCK) || !len.is_multiple_of(VOLUME_BLOCK) {
        return Err(VolumeError::InvalidArgument(format!(
            "offset {offset} and length {len} must be multiples of {VOLUME_BLOCK}"
        )));
    }
    if offset.checked_add(len).is_none_or(|e| e > size) {
        return Err(VolumeError::InvalidArgument(format!(
            "range {offset}+{len} is past the end of the volume ({size} bytes)"
        )));
    }
    Ok(())
}

/// Locks test state, shrugging off a poisoned lock (a panicking test
/// thread must not hide the contents from the others).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An in-memory thin volume (tests and examples). Clones share contents,
/// also across threads, so every worker of a multi-threaded front-end can
/// be given the same volume.
#[derive(Clone)]
pub struct MemVolume {
    size: u64,
    blocks: Arc<Mutex<BTreeMap<u64, Box<[u8]>>>>,
}

impl MemVolume {
    /// An empty volume of `size` bytes (rounded down to 4 KiB).
    pub fn new(size: u64) -> Self {
        Self {
            size: size / VOLUME_BLOCK * VOLUME_BLOCK,
            blocks: Arc::default(),
        }
    }

    /// Number of allocated blocks.
    pub fn allocated_blocks(&self) -> usize {
        lock(&self.blocks).len()
    }
}

impl BlockVolume for MemVolume {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_only(&self) -> bool {
        false
    }

    async fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, VolumeError> {
        check_io(self.size, offset, len)?;
        let mut out = AlignedBuf::zeroed(len as usize);
        let b = lock(&self.blocks);
        for (blk, data) in b.range(offset / VOLUME_BLOCK..(offset + len) / VOLUME_BLOCK) {
            let at = (blk * VOLUME_BLOCK - offset) as usize;
            out[at..at + BLOCK_SIZE].copy_from_slice(data);
        }
        Ok(out)
    }

    async fn write(&self, offset: u64, data: AlignedBuf, _fua: bool) -> Result<(), VolumeError> {
        check_io(self.size, offset, data.len() as u64)?;
        let mut b = lock(&self.blocks);
        for (i, chunk) in data.chunks(BLOCK_SIZE).enumerate() {
            b.insert(offset / VOLUME_BLOCK + i as u64, chunk.into());
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), VolumeError> {
        Ok(())
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        check_io(self.size, offset, len)?;
        let mut b = lock(&self.blocks);
        let keys: Vec<u64> = b
            .range(offset / VOLUME_BLOCK..(offset + len) / VOLUME_BLOCK)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            b.remove(&k);
        }
        Ok(())
    }

    async fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        _may_unmap: bool,
    ) -> Result<(), VolumeError> {
        self.discard(offset, len).await
    }

    async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<Extent>, VolumeError> {
        check_io(self.size, offset, len)?;
        let b = lock(&self.blocks);
        let mut out: Vec<Extent> = Vec::new();
        for blk in offset / VOLUME_BLOCK..(offset + len) / VOLUME_BLOCK {
            let allocated = b.contains_key(&blk);
            match out.last_mut() {
                Some(e) if e.allocated == allocated => e.len += VOLUME_BLOCK,
                _ => out.push(Extent {
                    len: VOLUME_BLOCK,
                    allocated,
                }),
            }
        }
        Ok(out)
    }
}

/// An in-memory catalog of [`MemVolume`]s (tests and examples). Clones
/// share the same volumes, also across threads.
#[derive(Clone, Default)]
pub struct MemCatalog {
    volumes: Arc<Mutex<BTreeMap<String, MemVolume>>>,
}

impl MemCatalog {
    /// Adds (or replaces) a volume.
    pub fn insert(&self, name: &str, volume: MemVolume) {
        lock(&self.volumes).insert(name.to_string(), volume);
    }
}

impl VolumeCatalog for MemCatalog {
    type Volume = MemVolume;

    async fn list(&self) -> Result<Vec<VolumeInfo>, VolumeError> {
        Ok(lock(&self.volumes)
            .iter()
            .map(|(name, v)| VolumeInfo {
                name: name.clone(),
                size: v.size,
            })
            .collect())
    }

    async fn open(&self, name: &str) -> Result<Option<MemVolume>, VolumeError> {
        Ok(lock(&self.volumes).get(name).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn mem_volume_is_thin_and_checks_bounds() {
        let v = MemVolume::new(1 << 20);
        block_on(async {
            v.write(8192, AlignedBuf::copy_from(&[7u8; 8192]), false)
                .await
                .unwrap();
            let r = v.read(4096, 16384).await.unwrap();
            assert!(r[..4096].iter().all(|&b| b == 0));
            assert!(r[4096..12288].iter().all(|&b| b == 7));
            let a = v.allocation(0, 20480).await.unwrap();
            assert_eq!(
                a,
                vec![
                    Extent {
                        len: 8192,
                        allocated: false
                    },
                    Extent {
                        len: 8192,
                        allocated: true
                    },
                    Extent {
                        len: 4096,
                        allocated: false
                    }
                ]
            );
            v.discard(8192, 4096).await.unwrap();
            assert_eq!(v.allocated_blocks(), 1);
            assert!(matches!(
                v.read(1 << 20, 4096).await,
                Err(VolumeError::InvalidArgument(_))
            ));
            assert!(matches!(
                v.read(1, 4096).await,
                Err(VolumeError::InvalidArgument(_))
            ));
        });
    }
}
