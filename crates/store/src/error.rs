//! The store's error type: every failure names what it was doing and where.

use std::io;

use pontoon_types::ObjectId;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The device returned an error.
    #[error("device I/O error while {what}: {source}")]
    Io {
        /// What the store was doing.
        what: &'static str,
        /// The device's error.
        #[source]
        source: io::Error,
    },
    /// The request is malformed: unaligned, empty or past the object's end.
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The device (or its object table) is full. Reads, discards and deletes
    /// still work.
    #[error("no space left on the store: {0}")]
    NoSpace(String),
    /// A block's contents do not match its checksum: the copy on this device
    /// is bad and must be repaired from another replica.
    #[error(
        "checksum mismatch in object {oid} block {block} (device block {device_block}): expected {expected:08x}, found {found:08x}"
    )]
    Checksum {
        /// Object holding the block.
        oid: ObjectId,
        /// Block index within the object.
        block: u32,
        /// Block address on the device (data area), or `u64::MAX` for journal memory.
        device_block: u64,
        /// Checksum recorded when the block was written.
        expected: u32,
        /// Checksum of what was read.
        found: u32,
    },
    /// On-device structures contradict each other.
    #[error("store metadata is corrupt: {0}")]
    Corrupt(String),
    /// The device does not hold a Pontoon store (or not this slice).
    #[error("not a Pontoon store: {0}")]
    NotFormatted(String),
    /// An earlier write failed; the store refuses writes until reopened.
    #[error("store stopped accepting writes after an I/O error: {0}")]
    Failed(String),
    /// The store was closed.
    #[error("store is closed")]
    Closed,
}

impl StoreError {
    pub(crate) fn io(what: &'static str, source: io::Error) -> Self {
        StoreError::Io { what, source }
    }
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
