//! Pontoon's wire protocol: length-prefixed binary frames with a request
//! id, spoken between clients and OSD shards and among OSD shards.
//!
//! A frame is a fixed [`FrameHeader`], then `meta_len` bytes of message
//! fields, then `data_len` bytes of bulk data (block contents), which a
//! receiver reads straight into an aligned buffer. Requests are pipelined
//! and answered out of order, matched by request id.
//!
//! This crate only encodes and decodes; it does no I/O and must never
//! panic or allocate beyond the declared, bounded lengths on hostile input.

pub mod diff;
mod fields;
mod frame;
pub mod handshake;
mod image;
mod message;

pub use diff::{ChangedExtent, DiffReq, DiffView};
pub use frame::{FrameHeader, HEADER_LEN, MAGIC, MAX_DATA, MAX_META, ProtoError};
pub use handshake::{AuthChallenge, AuthHello, AuthProof};
pub use image::{CloneLayout, MAX_IMAGE_CLONES, SnapCopy, SnapLayout};
pub use message::{
    DigestReq, DiscardReq, Hello, Message, MsgType, ObjectDigest, PEER_PAGE, PROTOCOL_VERSION,
    PeerInfo, PeerQuery, PullLayerReq, ReadReq, Reply, Role, Session, Status, SubOp, SubOpKind,
    Target, WriteReq,
};
