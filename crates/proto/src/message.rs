//! Messages and the encoding of their fields.
//!
//! Client → primary: [`ReadReq`], [`WriteReq`], [`DiscardReq`], allocation
//! and changed-extents ([`DiffReq`]) queries; primary → replicas:
//! [`SubOp`]; peering and recovery among OSDs: [`PeerQuery`]/[`PeerInfo`]
//! and pulls (answered with a [`SnapCopy`] for objects with snapshot
//! state); every other answer is a [`Reply`].
//! Every request names the PG and the interval epoch its sender believes
//! current, so a receiver with a different view can refuse it.

use pontoon_types::codec::Decoder;
use pontoon_types::{Epoch, ObjectId, OsdId, PgId, Version};

use crate::diff::{DiffReq, DiffView};
use crate::fields::{R, W};
use crate::frame::{MAX_META, ProtoError};
use crate::image::{SnapCopy, SnapLayout};

/// Protocol revision spoken; a peer with another one is refused at hello.
/// 6: replace sub-ops carry an optional snapshot layout, pulls of objects
/// with snapshot state are answered with a [`SnapCopy`], and the
/// changed-extents query ([`DiffReq`]) exists. 7: a copy larger than one
/// message moves a layer at a time ([`PullLayerReq`], [`SubOpKind::Fetch`]).
pub const PROTOCOL_VERSION: u32 = 7;
/// Longest error text carried in a reply.
const MAX_MESSAGE_TEXT: usize = 1024;
/// Most objects one peering answer may list.
const MAX_PEER_OBJECTS: u32 = 32_768;

/// Message type numbers on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum MsgType {
    /// [`Hello`].
    Hello = 1,
    /// [`crate::AuthHello`] (handshake only, not a [`Message`]).
    AuthHello = 2,
    /// [`crate::AuthChallenge`] (handshake only, not a [`Message`]).
    AuthChallenge = 3,
    /// [`crate::AuthProof`] (handshake only, not a [`Message`]).
    AuthProof = 4,
    /// [`ReadReq`].
    Read = 10,
    /// [`WriteReq`].
    Write = 11,
    /// [`DiscardReq`].
    Discard = 12,
    /// Allocation query: a [`Target`].
    Allocation = 13,
    /// Changed-extents query: a [`DiffReq`].
    Diff = 14,
    /// [`Reply`].
    Reply = 20,
    /// [`SubOp`].
    SubOp = 30,
    /// [`PeerQuery`].
    PeerQuery = 31,
    /// [`PeerInfo`].
    PeerInfo = 32,
    /// Pull an object: a [`Target`].
    Pull = 33,
    /// A heartbeat between OSDs ([`Message::Ping`]).
    Ping = 34,
    /// [`DigestReq`] (scrub).
    Digest = 35,
    /// [`ObjectDigest`].
    DigestInfo = 36,
    /// [`SnapCopy`] (a pull's answer).
    SnapCopy = 37,
    /// [`PullLayerReq`].
    PullLayer = 38,
}

impl MsgType {
    /// Parses a wire number.
    pub fn from_u16(v: u16) -> Result<Self, ProtoError> {
        Ok(match v {
            1 => Self::Hello,
            2 => Self::AuthHello,
            3 => Self::AuthChallenge,
            4 => Self::AuthProof,
            10 => Self::Read,
            11 => Self::Write,
            12 => Self::Discard,
            13 => Self::Allocation,
            14 => Self::Diff,
            20 => Self::Reply,
            30 => Self::SubOp,
            31 => Self::PeerQuery,
            32 => Self::PeerInfo,
            33 => Self::Pull,
            34 => Self::Ping,
            35 => Self::Digest,
            36 => Self::DigestInfo,
            37 => Self::SnapCopy,
            38 => Self::PullLayer,
            _ => return Err(ProtoError::UnknownType(v)),
        })
    }
}

/// Who is speaking on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A client (library, gateway, CLI).
    Client,
    /// Another OSD.
    Osd(OsdId),
}

/// First message on every connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub version: u32,
    /// Who the sender is.
    pub role: Role,
    /// The sender's session and this connection's place in it, if it has one.
    pub session: Option<Session>,
}

/// A client's run of connections to one server, in the order it opened
/// them. A server that sees connection `seq` of a session stops taking
/// requests from the session's earlier connections: the client gave those
/// up, and a request still unread on one of them must not be applied after
/// the client's retry on the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Session {
    /// Chosen at random by the client, once per connection pool.
    pub id: u64,
    /// Increases with every connection the client opens.
    pub seq: u64,
}

/// The object an operation addresses, and the sender's view of its PG.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Placement group of the object.
    pub pg: PgId,
    /// Epoch at which the sender believes the PG's current interval began.
    pub epoch: Epoch,
    /// The object.
    pub oid: ObjectId,
}

/// Read `len` bytes at `offset` of an object; data comes back in the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadReq {
    /// What to read.
    pub target: Target,
    /// Byte offset within the object.
    pub offset: u64,
    /// Bytes to read.
    pub len: u32,
    /// Read the object as this snapshot of its volume sees it (`None`:
    /// the head). Snapshot ids start at 1; 0 is refused on the wire.
    pub snap: Option<u64>,
}

/// Write the frame's data at `offset` of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteReq {
    /// Where to write.
    pub target: Target,
    /// Byte offset within the object.
    pub offset: u64,
    /// crc32c of the frame data, checked by the receiver (end to end).
    pub data_crc: u32,
    /// Forced unit access requested by the host (writes are always durable
    /// when acknowledged; carried for accounting).
    pub fua: bool,
    /// Fill only: write just the blocks of the range the object does not
    /// hold yet, decided by the primary under the object's lock (a clone's
    /// flatten, which must not overwrite the clone's own writes).
    pub fill: bool,
    /// The volume's snapshot sequence in the sender's map (its snap
    /// context): blocks a snapshot up to it reads are kept.
    pub snap_seq: u64,
}

/// [`WriteReq::fua`] on the wire.
const WRITE_FUA: u8 = 1;
/// [`WriteReq::fill`] on the wire.
const WRITE_FILL: u8 = 2;

/// Deallocate `len` bytes at `offset` of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscardReq {
    /// Where to discard.
    pub target: Target,
    /// Byte offset within the object.
    pub offset: u64,
    /// Bytes to discard.
    pub len: u64,
    /// The volume's snapshot sequence in the sender's map (see
    /// [`WriteReq::snap_seq`]).
    pub snap_seq: u64,
}

/// What a replica operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubOpKind {
    /// Write the data at the single extent.
    Write = 1,
    /// Deallocate the single extent.
    Discard = 2,
    /// Replace the whole object with exactly the extents (recovery push),
    /// and its clones with the sub-op's snapshot layout if it has one.
    Replace = 3,
    /// Remove the object.
    Delete = 4,
    /// Take the object at the sub-op's version, head and clones, from the
    /// sender with [`PullLayerReq`]s and install it (a recovery push of a
    /// copy larger than one message). No extents, no data.
    Fetch = 5,
}

/// Recovery: one layer of an object's copy, for a copy larger than one
/// message. Answered like a pull, with a [`SnapCopy`] whose layout lists
/// every clone (ids, holes) but the extents and data of that layer only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullLayerReq {
    /// Object and interval.
    pub target: Target,
    /// 0 for the head, otherwise the clone's snapshot id.
    pub layer: u64,
}

/// An operation the primary sends to a replica, already versioned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubOp {
    /// Object and interval.
    pub target: Target,
    /// Version stamped by the primary.
    pub version: Version,
    /// What to do.
    pub kind: SubOpKind,
    /// (offset, length) extents; data for writes and replaces is the frame
    /// data, extents back to back.
    pub extents: Vec<(u64, u64)>,
    /// crc32c of the frame data.
    pub data_crc: u32,
    /// Snapshot sequence writes, discards and deletes apply under (the
    /// client's, as the primary accepted it); 0 for replaces.
    pub snap_seq: u64,
    /// Replaces only: the object's clones and sequence (`None`: it has no
    /// snapshot state). Their data follows the head's in the frame data.
    pub snaps: Option<Box<SnapLayout>>,
}

/// Asks an OSD for the versions of a PG's objects it holds, and fences it:
/// once answered, it refuses operations of intervals before `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerQuery {
    /// The PG.
    pub pg: PgId,
    /// The new interval's epoch.
    pub epoch: Epoch,
    /// Continue after this object (pagination).
    pub after: Option<ObjectId>,
}

/// Objects of a PG held by the answering OSD, with versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Objects in ascending order.
    pub objects: Vec<(ObjectId, Version)>,
    /// More objects follow (ask again after the last one).
    pub more: bool,
}

/// Scrub asks a member for its copy of an object: the version, and with
/// `deep` a digest of its content after reading (and checksumming) every
/// block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DigestReq {
    /// The object (and the asker's interval).
    pub target: Target,
    /// Read every block and digest the content.
    pub deep: bool,
}

/// A member's copy of an object as scrub compares it. An absent object is
/// version zero with no blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectDigest {
    /// The copy's version.
    pub version: Version,
    /// Allocated 4 KiB blocks, the head's and its snapshot clones'.
    pub blocks: u64,
    /// Digest of the allocated extents and their bytes (deep only; 0 otherwise).
    pub digest: u64,
}

/// Outcome of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// The sender's epoch is older than the receiver's: refresh the map.
    StaleEpoch = 1,
    /// The receiver has not seen the sender's epoch yet: retry shortly.
    EpochAhead = 2,
    /// The receiver is not the PG's primary.
    NotPrimary = 3,
    /// The PG is peering, recovering this object or incomplete: retry.
    PgInactive = 4,
    /// The pool is out of space.
    NoSpace = 5,
    /// Bad offset, length or alignment.
    InvalidArgument = 6,
    /// Device I/O error.
    Io = 7,
    /// No intact copy of the data could be read.
    Checksum = 8,
    /// Too many requests in flight: retry.
    Busy = 9,
    /// The OSD is stopping.
    ShuttingDown = 10,
    /// The OSD lost its liveness lease and stopped serving.
    Fenced = 11,
    /// The frame could not be understood.
    Malformed = 12,
    /// The peer's entity may not do this (its caps, a revoked or rotated-out
    /// key, or an OSD-only request from something that is not an OSD of
    /// the map).
    PermissionDenied = 13,
    /// The key the connection was authenticated with is no longer accepted
    /// (rotated out, or the entity removed): reconnect with the current
    /// key, and retry.
    KeyRevoked = 14,
    /// The receiver knows a newer snapshot sequence for the volume than
    /// the request carries: refresh the map and send it again under it.
    StaleSnapSeq = 15,
}

impl Status {
    fn from_u16(v: u16) -> Result<Self, ProtoError> {
        Ok(match v {
            0 => Self::Ok,
            1 => Self::StaleEpoch,
            2 => Self::EpochAhead,
            3 => Self::NotPrimary,
            4 => Self::PgInactive,
            5 => Self::NoSpace,
            6 => Self::InvalidArgument,
            7 => Self::Io,
            8 => Self::Checksum,
            9 => Self::Busy,
            10 => Self::ShuttingDown,
            11 => Self::Fenced,
            12 => Self::Malformed,
            13 => Self::PermissionDenied,
            14 => Self::KeyRevoked,
            15 => Self::StaleSnapSeq,
            _ => return Err(ProtoError::Malformed("reply", "unknown status")),
        })
    }

    /// Whether a client should retry (after refreshing its map if needed).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::StaleEpoch
                | Self::EpochAhead
                | Self::NotPrimary
                | Self::PgInactive
                | Self::Busy
                | Self::ShuttingDown
                | Self::Fenced
                | Self::KeyRevoked
                | Self::StaleSnapSeq
        )
    }
}

/// The answer to any request; read and pull data follows in the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Outcome.
    pub status: Status,
    /// Object version (reads, writes, pulls).
    pub version: Version,
    /// The responder's interval epoch for the PG (helps a stale sender).
    pub epoch: Epoch,
    /// Allocated ranges (allocation queries) or extents of the data (pulls).
    pub ranges: Vec<(u64, u64)>,
    /// Human-readable detail for errors.
    pub message: String,
}

impl Reply {
    /// A success with a version.
    pub fn ok(version: Version) -> Self {
        Self {
            status: Status::Ok,
            version,
            epoch: Epoch(0),
            ranges: Vec::new(),
            message: String::new(),
        }
    }

    /// An error with detail and the responder's epoch.
    pub fn error(status: Status, epoch: Epoch, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_MESSAGE_TEXT {
            let mut cut = MAX_MESSAGE_TEXT;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        Self {
            status,
            version: Version::ZERO,
            epoch,
            ranges: Vec::new(),
            message,
        }
    }
}

/// Any message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Connection opening.
    Hello(Hello),
    /// Client read.
    Read(ReadReq),
    /// Client write (data in frame).
    Write(WriteReq),
    /// Client discard.
    Discard(DiscardReq),
    /// Which ranges of an object are allocated.
    Allocation(Target),
    /// Which ranges of an object differ between two views.
    Diff(DiffReq),
    /// Answer to anything.
    Reply(Reply),
    /// Primary to replica.
    SubOp(SubOp),
    /// Peering query.
    PeerQuery(PeerQuery),
    /// Peering answer.
    PeerInfo(PeerInfo),
    /// Recovery: send me your copy of this object.
    Pull(Target),
    /// Heartbeat: are you there? Answered at once with an empty success,
    /// fenced or not (it measures the network path and the shard's event
    /// loop, not the lease).
    Ping,
    /// Scrub: describe your copy of this object.
    Digest(DigestReq),
    /// Scrub's answer.
    DigestInfo(ObjectDigest),
    /// A pull's answer for an object with snapshot state.
    SnapCopy(SnapCopy),
    /// Recovery: send me one layer of your copy of this object.
    PullLayer(PullLayerReq),
}

impl Message {
    /// The wire type of this message.
    pub fn msg_type(&self) -> MsgType {
        match self {
            Message::Hello(_) => MsgType::Hello,
            Message::Read(_) => MsgType::Read,
            Message::Write(_) => MsgType::Write,
            Message::Discard(_) => MsgType::Discard,
            Message::Allocation(_) => MsgType::Allocation,
            Message::Diff(_) => MsgType::Diff,
            Message::Reply(_) => MsgType::Reply,
            Message::SubOp(_) => MsgType::SubOp,
            Message::PeerQuery(_) => MsgType::PeerQuery,
            Message::PeerInfo(_) => MsgType::PeerInfo,
            Message::Pull(_) => MsgType::Pull,
            Message::Ping => MsgType::Ping,
            Message::Digest(_) => MsgType::Digest,
            Message::DigestInfo(_) => MsgType::DigestInfo,
            Message::SnapCopy(_) => MsgType::SnapCopy,
            Message::PullLayer(_) => MsgType::PullLayer,
        }
    }

    /// Encodes the message fields (not the header or data).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(&mut out);
        out
    }

    /// Appends the message fields to `out` (a frame being built behind
    /// its header, so that a frame needs one allocation, not two).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let mut w = W(std::mem::take(out));
        match self {
            Message::Hello(h) => {
                w.u32(h.version);
                match h.role {
                    Role::Client => w.u8(0),
                    Role::Osd(id) => {
                        w.u8(1);
                        w.u32(id.0);
                    }
                }
                match h.session {
                    None => w.u8(0),
                    Some(s) => {
                        w.u8(1);
                        w.u64(s.id);
                        w.u64(s.seq);
                    }
                }
            }
            Message::Read(r) => {
                w.target(&r.target);
                w.u64(r.offset);
                w.u32(r.len);
                w.u64(r.snap.unwrap_or(0));
            }
            Message::Write(r) => {
                w.target(&r.target);
                w.u64(r.offset);
                w.u32(r.data_crc);
                w.u8(if r.fua { WRITE_FUA } else { 0 } | if r.fill { WRITE_FILL } else { 0 });
                w.u64(r.snap_seq);
            }
            Message::Discard(r) => {
                w.target(&r.target);
                w.u64(r.offset);
                w.u64(r.len);
                w.u64(r.snap_seq);
            }
            Message::Allocation(t) | Message::Pull(t) => w.target(t),
            Message::Diff(d) => {
                w.target(&d.target);
                w.u64(d.from.to_wire());
                w.u64(d.to.to_wire());
            }
            Message::Ping => {}
            Message::Digest(d) => {
                w.target(&d.target);
                w.u8(d.deep as u8);
            }
            Message::DigestInfo(d) => {
                w.version(&d.version);
                w.u64(d.blocks);
                w.u64(d.digest);
            }
            Message::Reply(r) => {
                w.u16(r.status as u16);
                w.version(&r.version);
                w.u64(r.epoch.0);
                w.ranges(&r.ranges);
                let text = r.message.as_bytes();
                let n = text.len().min(MAX_MESSAGE_TEXT);
                w.u32(n as u32);
                w.0.extend_from_slice(&text[..n]);
            }
            Message::SubOp(s) => {
                w.target(&s.target);
                w.version(&s.version);
                w.u8(s.kind as u8);
                w.ranges(&s.extents);
                w.u32(s.data_crc);
                w.u64(s.snap_seq);
                match &s.snaps {
                    None => w.u8(0),
                    Some(l) => {
                        w.u8(1);
                        l.encode(&mut w);
                    }
                }
            }
            Message::SnapCopy(c) => c.encode(&mut w),
            Message::PullLayer(p) => {
                w.target(&p.target);
                w.u64(p.layer);
            }
            Message::PeerQuery(q) => {
                w.u32(q.pg.pool.0);
                w.u32(q.pg.index);
                w.u64(q.epoch.0);
                match &q.after {
                    None => w.u8(0),
                    Some(o) => {
                        w.u8(1);
                        w.oid(o);
                    }
                }
            }
            Message::PeerInfo(p) => {
                w.u32(p.objects.len() as u32);
                for (o, v) in &p.objects {
                    w.oid(o);
                    w.version(v);
                }
                w.u8(p.more as u8);
            }
        }
        debug_assert!(w.0.len() - start <= MAX_META as usize);
        *out = w.0;
    }

    /// Decodes message fields of type `msg_type`. Never panics.
    pub fn decode(msg_type: u16, meta: &[u8]) -> Result<Self, ProtoError> {
        let t = MsgType::from_u16(msg_type)?;
        let what = match t {
            MsgType::Hello => "hello",
            MsgType::AuthHello | MsgType::AuthChallenge | MsgType::AuthProof => {
                return Err(ProtoError::Malformed(
                    "handshake",
                    "an authentication message outside the handshake",
                ));
            }
            MsgType::Read => "read",
            MsgType::Write => "write",
            MsgType::Discard => "discard",
            MsgType::Allocation => "allocation",
            MsgType::Diff => "diff",
            MsgType::Reply => "reply",
            MsgType::SubOp => "sub-op",
            MsgType::PeerQuery => "peer query",
            MsgType::PeerInfo => "peer info",
            MsgType::Pull => "pull",
            MsgType::Ping => "ping",
            MsgType::Digest => "digest",
            MsgType::DigestInfo => "digest info",
            MsgType::SnapCopy => "snapshot copy",
            MsgType::PullLayer => "layer pull",
        };
        let mut r = R {
            d: Decoder::new(meta),
            what,
        };
        let m = match t {
            MsgType::Hello => {
                let version = r.u32()?;
                let role = match r.u8()? {
                    0 => Role::Client,
                    1 => Role::Osd(OsdId(r.u32()?)),
                    _ => return Err(r.err("unknown role")),
                };
                // Version 1 hellos end here: decode them, so the version
                // check can refuse them by name.
                let session = match if r.d.remaining() == 0 { 0 } else { r.u8()? } {
                    0 => None,
                    1 => Some(Session {
                        id: r.u64()?,
                        seq: r.u64()?,
                    }),
                    _ => return Err(r.err("bad session flag")),
                };
                Message::Hello(Hello {
                    version,
                    role,
                    session,
                })
            }
            MsgType::Read => Message::Read(ReadReq {
                target: r.target()?,
                offset: r.u64()?,
                len: r.u32()?,
                snap: match r.snap_seq()? {
                    0 => None,
                    id => Some(id),
                },
            }),
            MsgType::Write => {
                let (target, offset, data_crc) = (r.target()?, r.u64()?, r.u32()?);
                let flags = r.u8()?;
                if flags & !(WRITE_FUA | WRITE_FILL) != 0 {
                    return Err(r.err("unknown write flags"));
                }
                Message::Write(WriteReq {
                    target,
                    offset,
                    data_crc,
                    fua: flags & WRITE_FUA != 0,
                    fill: flags & WRITE_FILL != 0,
                    snap_seq: r.snap_seq()?,
                })
            }
            MsgType::Discard => Message::Discard(DiscardReq {
                target: r.target()?,
                offset: r.u64()?,
                len: r.u64()?,
                snap_seq: r.snap_seq()?,
            }),
            MsgType::Allocation => Message::Allocation(r.target()?),
            MsgType::Diff => Message::Diff(DiffReq {
                target: r.target()?,
                from: DiffView::from_wire(r.u64()?),
                to: match DiffView::from_wire(r.u64()?) {
                    DiffView::Nothing => return Err(r.err("a diff to nothing")),
                    v => v,
                },
            }),
            MsgType::Pull => Message::Pull(r.target()?),
            MsgType::AuthHello | MsgType::AuthChallenge | MsgType::AuthProof => {
                return Err(r.err("an authentication message outside the handshake"));
            }
            MsgType::Ping => Message::Ping,
            MsgType::Digest => Message::Digest(DigestReq {
                target: r.target()?,
                deep: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(r.err("bad deep flag")),
                },
            }),
            MsgType::DigestInfo => Message::DigestInfo(ObjectDigest {
                version: r.version()?,
                blocks: r.u64()?,
                digest: r.u64()?,
            }),
            MsgType::Reply => {
                let status = Status::from_u16(r.u16()?)?;
                let version = r.version()?;
                let epoch = Epoch(r.u64()?);
                let ranges = r.ranges()?;
                let n = r.u32()? as usize;
                if n > MAX_MESSAGE_TEXT {
                    return Err(r.err("message text too long"));
                }
                let text =
                    r.d.bytes(n)
                        .map_err(|_| ProtoError::Malformed(what, "truncated"))?;
                Message::Reply(Reply {
                    status,
                    version,
                    epoch,
                    ranges,
                    message: String::from_utf8_lossy(text).into_owned(),
                })
            }
            MsgType::SubOp => {
                let target = r.target()?;
                let version = r.version()?;
                let kind = match r.u8()? {
                    1 => SubOpKind::Write,
                    2 => SubOpKind::Discard,
                    3 => SubOpKind::Replace,
                    4 => SubOpKind::Delete,
                    5 => SubOpKind::Fetch,
                    _ => return Err(r.err("unknown kind")),
                };
                let extents = r.ranges()?;
                let data_crc = r.u32()?;
                let snap_seq = r.snap_seq()?;
                let snaps = match (r.u8()?, kind) {
                    (0, _) => None,
                    (1, SubOpKind::Replace) => {
                        Some(Box::new(SnapLayout::decode(&mut r, &extents)?))
                    }
                    (1, _) => {
                        return Err(r.err("a snapshot layout on a sub-op that is not a replace"));
                    }
                    _ => return Err(r.err("bad snapshot layout flag")),
                };
                Message::SubOp(SubOp {
                    target,
                    version,
                    kind,
                    extents,
                    data_crc,
                    snap_seq,
                    snaps,
                })
            }
            MsgType::SnapCopy => Message::SnapCopy(SnapCopy::decode(&mut r)?),
            MsgType::PullLayer => Message::PullLayer(PullLayerReq {
                target: r.target()?,
                layer: r.u64()?,
            }),
            MsgType::PeerQuery => {
                let pg = PgId::new(r.u32()?, r.u32()?);
                let epoch = Epoch(r.u64()?);
                let after = match r.u8()? {
                    0 => None,
                    1 => Some(r.oid()?),
                    _ => return Err(r.err("bad cursor flag")),
                };
                Message::PeerQuery(PeerQuery { pg, epoch, after })
            }
            MsgType::PeerInfo => {
                let n = r.u32()?;
                if n > MAX_PEER_OBJECTS || n as usize * 32 > r.d.remaining() {
                    return Err(r.err("too many objects"));
                }
                let objects = (0..n)
                    .map(|_| Ok((r.oid()?, r.version()?)))
                    .collect::<Result<Vec<_>, ProtoError>>()?;
                let more = r.u8()? != 0;
                Message::PeerInfo(PeerInfo { objects, more })
            }
        };
        r.end()?;
        Ok(m)
    }
}

/// Most objects a peering answer carries per frame: 32 bytes each, so a
/// full page stays inside [`MAX_META`] with room for the header fields.
pub const PEER_PAGE: usize = 32_000;

const _: () = assert!(PEER_PAGE * 32 + 64 <= MAX_META as usize);
const _: () = assert!(PEER_PAGE <= MAX_PEER_OBJECTS as usize);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameHeader, HEADER_LEN};
    use crate::image::CloneLayout;
    use proptest::prelude::*;

    fn target() -> Target {
        Target {
            pg: PgId::new(2, 77),
            epoch: Epoch(9),
            oid: ObjectId::new(5, 123),
        }
    }

    /// Two clones, one with holes, under sequence 7.
    fn layout() -> SnapLayout {
        SnapLayout {
            seq: 7,
            has_head: true,
            clones: vec![
                CloneLayout {
                    id: 2,
                    complete: false,
                    extents: vec![(0, 8192)],
                    holes: vec![(8192, 4096), (20480, 4096)],
                },
                CloneLayout {
                    id: 7,
                    complete: true,
                    extents: vec![(4096, 4096), (12288, 8192)],
                    holes: Vec::new(),
                },
            ],
        }
    }

    fn samples() -> Vec<Message> {
        vec![
            Message::Hello(Hello {
                version: PROTOCOL_VERSION,
                role: Role::Osd(OsdId(3)),
                session: Some(Session {
                    id: u64::MAX - 5,
                    seq: 17,
                }),
            }),
            Message::Hello(Hello {
                version: 1,
                role: Role::Client,
                session: None,
            }),
            Message::Read(ReadReq {
                target: target(),
                offset: 4096,
                len: 8192,
                snap: None,
            }),
            Message::Read(ReadReq {
                target: target(),
                offset: 4096,
                len: 8192,
                snap: Some(3),
            }),
            Message::Write(WriteReq {
                target: target(),
                offset: 0,
                data_crc: 0xabcd,
                fua: true,
                fill: true,
                snap_seq: 7,
            }),
            Message::Discard(DiscardReq {
                target: target(),
                offset: 8192,
                len: 1 << 20,
                snap_seq: 0,
            }),
            Message::Allocation(target()),
            Message::Diff(DiffReq {
                target: target(),
                from: DiffView::Snap(3),
                to: DiffView::Head,
            }),
            Message::Diff(DiffReq {
                target: target(),
                from: DiffView::Nothing,
                to: DiffView::Snap(9),
            }),
            Message::Pull(target()),
            Message::PullLayer(PullLayerReq {
                target: target(),
                layer: 7,
            }),
            Message::Ping,
            Message::Digest(DigestReq {
                target: target(),
                deep: true,
            }),
            Message::DigestInfo(ObjectDigest {
                version: Version::new(4, 5),
                blocks: 1024,
                digest: u64::MAX - 1,
            }),
            Message::Reply(Reply::ok(Version::new(3, 4))),
            Message::Reply(Reply {
                ranges: vec![(0, 4096), (8192, 4096)],
                ..Reply::error(Status::StaleEpoch, Epoch(12), "pg 2.4d is at e12")
            }),
            Message::SubOp(SubOp {
                target: target(),
                version: Version::new(9, 1),
                kind: SubOpKind::Replace,
                extents: vec![(0, 4096), (65536, 8192)],
                data_crc: 7,
                snap_seq: 12,
                snaps: None,
            }),
            Message::SubOp(SubOp {
                target: target(),
                version: Version::new(9, 2),
                kind: SubOpKind::Replace,
                extents: vec![(0, 4096)],
                data_crc: 8,
                snap_seq: 0,
                snaps: Some(Box::new(layout())),
            }),
            Message::SubOp(SubOp {
                target: target(),
                version: Version::new(9, 3),
                kind: SubOpKind::Replace,
                extents: Vec::new(),
                data_crc: 9,
                snap_seq: 0,
                snaps: Some(Box::new(SnapLayout {
                    has_head: false,
                    ..layout()
                })),
            }),
            Message::SubOp(SubOp {
                target: target(),
                version: Version::new(9, 5),
                kind: SubOpKind::Fetch,
                extents: Vec::new(),
                data_crc: 0,
                snap_seq: 0,
                snaps: None,
            }),
            Message::SubOp(SubOp {
                target: target(),
                version: Version::new(9, 4),
                kind: SubOpKind::Delete,
                extents: Vec::new(),
                data_crc: 0,
                snap_seq: 3,
                snaps: None,
            }),
            Message::SnapCopy(SnapCopy {
                version: Version::new(4, 4),
                extents: vec![(8192, 4096)],
                snaps: layout(),
            }),
            Message::PeerQuery(PeerQuery {
                pg: PgId::new(1, 2),
                epoch: Epoch(3),
                after: Some(ObjectId::new(1, 1)),
            }),
            Message::PeerInfo(PeerInfo {
                objects: vec![(ObjectId::new(1, 1), Version::new(2, 2))],
                more: true,
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let meta = m.encode();
            let back = Message::decode(m.msg_type() as u16, &meta).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn headers_round_trip_and_limits_hold() {
        let h = FrameHeader {
            msg_type: 11,
            flags: 0,
            req_id: 77,
            meta_len: 100,
            data_len: 4096,
        };
        assert_eq!(FrameHeader::decode(&h.encode()).unwrap(), h);
        let mut big = h;
        big.data_len = u32::MAX;
        assert!(matches!(
            FrameHeader::decode(&big.encode()),
            Err(ProtoError::TooLarge { .. })
        ));
        let mut b = h.encode();
        b[0] ^= 1;
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(ProtoError::BadMagic(_))
        ));
    }

    #[test]
    fn truncations_and_trailing_bytes_are_errors() {
        for m in samples() {
            let meta = m.encode();
            for cut in 0..meta.len() {
                let decoded = Message::decode(m.msg_type() as u16, &meta[..cut]);
                match (&m, decoded) {
                    // A hello without its session is a version-1 hello:
                    // decoded, so that the version check can refuse it.
                    (Message::Hello(h), Ok(Message::Hello(short))) => {
                        assert_eq!(short.session, None);
                        assert_eq!((short.version, short.role), (h.version, h.role));
                    }
                    (_, d) => assert!(d.is_err(), "{m:?} cut at {cut}"),
                }
            }
            let mut longer = meta.clone();
            longer.push(0);
            assert!(Message::decode(m.msg_type() as u16, &longer).is_err());
        }
        assert!(matches!(
            Message::decode(999, &[]),
            Err(ProtoError::UnknownType(999))
        ));
    }

    #[test]
    fn a_snapshot_sequence_of_the_head_id_is_refused() {
        for m in [
            Message::Read(ReadReq {
                target: target(),
                offset: 0,
                len: 4096,
                snap: Some(u64::MAX),
            }),
            Message::Write(WriteReq {
                target: target(),
                offset: 0,
                data_crc: 0,
                fua: false,
                fill: false,
                snap_seq: u64::MAX,
            }),
            Message::Discard(DiscardReq {
                target: target(),
                offset: 0,
                len: 4096,
                snap_seq: u64::MAX,
            }),
        ] {
            assert!(Message::decode(m.msg_type() as u16, &m.encode()).is_err());
        }
        assert!(Status::StaleSnapSeq.is_retryable());
    }

    /// A replace carrying `snaps` with `extents` for the head.
    fn replace_with(extents: Vec<(u64, u64)>, snaps: SnapLayout) -> Message {
        Message::SubOp(SubOp {
            target: target(),
            version: Version::new(1, 1),
            kind: SubOpKind::Replace,
            extents,
            data_crc: 0,
            snap_seq: 0,
            snaps: Some(Box::new(snaps)),
        })
    }

    #[test]
    fn snapshot_layouts_that_break_the_rules_are_refused() {
        let with_clones = |f: &dyn Fn(&mut Vec<CloneLayout>)| {
            let mut l = layout();
            f(&mut l.clones);
            l
        };
        let bad: Vec<(&str, Message)> = vec![
            (
                "descending ids",
                replace_with(vec![], with_clones(&|c| c.swap(0, 1))),
            ),
            (
                "a repeated id",
                replace_with(vec![], with_clones(&|c| c[1].id = 2)),
            ),
            (
                "clone id 0",
                replace_with(vec![], with_clones(&|c| c[0].id = 0)),
            ),
            (
                "a clone newer than the sequence",
                replace_with(vec![], with_clones(&|c| c[1].id = 8)),
            ),
            (
                "the head's id as the sequence",
                replace_with(
                    vec![],
                    SnapLayout {
                        seq: u64::MAX,
                        ..layout()
                    },
                ),
            ),
            (
                "a range that overflows",
                replace_with(
                    vec![],
                    with_clones(&|c| c[0].holes = vec![(u64::MAX, 4096)]),
                ),
            ),
            (
                "a headless object with head extents",
                replace_with(
                    vec![(0, 4096)],
                    SnapLayout {
                        has_head: false,
                        ..layout()
                    },
                ),
            ),
            (
                "a headless object without clones",
                replace_with(
                    vec![],
                    SnapLayout {
                        seq: 7,
                        has_head: false,
                        clones: Vec::new(),
                    },
                ),
            ),
            (
                "a layout on a write",
                Message::SubOp(SubOp {
                    target: target(),
                    version: Version::new(1, 1),
                    kind: SubOpKind::Write,
                    extents: vec![(0, 4096)],
                    data_crc: 0,
                    snap_seq: 0,
                    snaps: Some(Box::new(layout())),
                }),
            ),
            (
                "a headless copy with head extents",
                Message::SnapCopy(SnapCopy {
                    version: Version::new(1, 1),
                    extents: vec![(0, 4096)],
                    snaps: SnapLayout {
                        has_head: false,
                        ..layout()
                    },
                }),
            ),
        ];
        for (what, m) in bad {
            assert!(
                Message::decode(m.msg_type() as u16, &m.encode()).is_err(),
                "{what}"
            );
        }
        // Flags other than 0 and 1, and more clones than fit, by hand.
        let good = replace_with(vec![(0, 4096)], layout());
        let meta = good.encode();
        let flag_at = meta.len() - layout_len(&layout()) - 1;
        let head_flag_at = flag_at + 1 + 8;
        let clones_at = head_flag_at + 1;
        let first_complete_at = clones_at + 4 + 8;
        for (what, at, value) in [
            ("layout flag", flag_at, 2u8),
            ("head flag", head_flag_at, 2),
            ("complete flag", first_complete_at, 9),
        ] {
            let mut m = meta.clone();
            m[at] = value;
            assert!(
                Message::decode(MsgType::SubOp as u16, &m).is_err(),
                "{what}"
            );
        }
        let mut m = meta.clone();
        m[clones_at..clones_at + 4]
            .copy_from_slice(&(crate::image::MAX_IMAGE_CLONES + 1).to_le_bytes());
        assert!(
            Message::decode(MsgType::SubOp as u16, &m).is_err(),
            "too many clones"
        );
    }

    /// Encoded bytes of a layout.
    fn layout_len(l: &SnapLayout) -> usize {
        let mut w = W(Vec::new());
        l.encode(&mut w);
        w.0.len()
    }

    proptest! {
        #[test]
        fn corrupted_snapshot_images_never_panic(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        ) {
            for m in [replace_with(vec![(0, 4096)], layout()), samples().into_iter().find(|m| matches!(m, Message::SnapCopy(_))).expect("a snapshot copy")] {
                let mut meta = m.encode();
                for (at, v) in &flips {
                    let n = meta.len();
                    meta[at % n] ^= v;
                }
                let _ = Message::decode(m.msg_type() as u16, &meta);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(t in 0u16..40, meta in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Message::decode(t, &meta);
        }

        #[test]
        fn arbitrary_headers_never_panic(b in proptest::array::uniform24(any::<u8>())) {
            let arr: [u8; HEADER_LEN] = b;
            let _ = FrameHeader::decode(&arr);
        }
    }
}
