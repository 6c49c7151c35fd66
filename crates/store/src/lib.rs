//! Pontoon's device store: the engine that owns one slice of a data device
//! and keeps every acknowledged write safe while driving the device at close
//! to its raw speed.
//!
//! A slice holds two checkpoint slots, a journal ring and a data area.
//! Small writes go to the journal, data and metadata in one record, and are
//! acknowledged once durable; large writes are redirected to fresh blocks
//! and then recorded. One committer groups every ready write into one
//! durable record (group commit). A flusher moves journaled blocks home,
//! writes fuzzy checkpoints of the in-memory object table and trims the
//! journal. Every 4 KiB block carries a crc32c verified on read.
//!
//! The store owns placement-free objects: `(volume, index)` with a version
//! the caller stamps, and, for volumes with snapshots, each object's clones:
//! blocks a snapshot still reads move from the head into a clone instead of
//! being freed (see `snaps.rs`); snapshot trimming frees them. It never talks to the network, never spawns threads,
//! never shares state between slices, and never blocks its thread: all
//! device I/O goes through [`BlockDevice`], which is io_uring in production
//! and an in-memory, crash-simulating device in tests.

mod alloc;
mod checkpoint;
mod commit;
pub mod device;
mod error;
mod flusher;
pub mod layout;
pub mod mem_device;
mod objects;
mod open;
pub mod probe;
mod record;
mod signal;
mod snap_ops;
mod snap_space;
mod snaps;
mod state;
mod stats;
mod store;
mod submit;
#[doc(hidden)]
pub mod testkit;

pub use device::{BlockDevice, FileDevice};
pub use error::{Result, StoreError};
pub use layout::{DeviceHeader, FormatOptions, OsdIdentity, SliceLayout};
pub use mem_device::MemDevice;
pub use open::read_header;
pub use snap_ops::{
    CloneImage, CloneInfo, DiffExtent, HEAD, SnapImage, SnapInfo, SnapUsage, TrimProgress,
};
pub use snap_space::SnapSpace;
pub use stats::{LatencySummary, StoreStats, VolumeUsage, latency_histogram};
pub use store::{BackgroundTask, ObjectImage, ReadOutput, Store};
