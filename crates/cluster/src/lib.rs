//! The cluster map: its data model, the PG table computed from it, and its
//! store in etcd v3.
//!
//! This crate owns what every Pontoon process agrees on: which OSDs exist
//! and where their shards listen, which are alive, the pools and volumes,
//! and each PG's acting set with its interval history. Clients and OSDs load
//! and [watch](MapStore::watch) it; the manager changes it with
//! [`MapStore::update`] and [`pgmap::recompute`]. It must never sit on the
//! data path: nothing here is called per I/O, and the map a data-path
//! thread reads is an immutable `Arc<ClusterMap>` snapshot.
//!
//! # Key layout
//!
//! Everything lives under `/pontoon/<cluster>/` (one value per key, JSON
//! unless noted):
//!
//! | key | value |
//! |---|---|
//! | `epoch` | the map epoch, decimal |
//! | `next/osd`, `next/pool`, `next/volume` | id counters, decimal; ids are never reused |
//! | `fsid`, `created_osds` | the cluster's unique id; OSD ids given to devices not yet run ([`identity`]) |
//! | `osds/<id>` | [`OsdRecord`] |
//! | `alive/<id>` | liveness marker, attached to the OSD's lease ([`OsdLease`]) |
//! | `pools/<id>` | [`PoolRecord`] |
//! | `volumes/<id>` | [`VolumeRecord`], with its snapshot sequence and snapshots ([`snapshots`]) |
//! | `pgs/<pool>/<first>` | array of up to [`keys::PG_CHUNK`] [`PgRecord`]s, PGs `first..first+1024` |
//! | `reports/<osd>` | the OSD's latest [`OsdReport`] (not part of the map) |
//! | `mgr/leader` | the active manager's name, attached to its lease ([`Leadership`]) |
//! | `daemons/<kind>.<name>` | a running daemon and its `/metrics` address, attached to its lease ([`daemons`]; not part of the map) |
//! | `history/<tier>/<start>/<group>` | capacity history chunks, binary ([`history`]; not part of the map) |
//! | `endurance/<osd>` | an OSD's rated endurance ([`history::RatedEndurance`]; not part of the map) |
//! | `auth/<entity>` | [`auth::AuthRecord`]: an entity's caps and key(s) ([`auth`]) |
//! | `config/api_token` | the REST API token ([`config`]; not part of the map) |
//! | `mgr/balancer` | the balancer's latest round ([`balancer::BalancerStatus`]; not part of the map) |
//!
//! PGs are stored in chunks rather than one key each because etcd accepts
//! at most 128 operations per transaction by default, and one OSD failing
//! can change thousands of acting sets in one epoch.
//!
//! # Consistency
//!
//! * A [load](MapStore::load) is one etcd transaction of range reads, so it
//!   sees one revision: never half of a change.
//! * Every change goes through [`MapStore::update`]: read the map, apply a
//!   closure, and write the changed keys together with `epoch + 1` in one
//!   transaction that commits only if the `epoch` key's mod revision is
//!   still the one read (optimistic concurrency; bounded retries). As every
//!   writer of map keys bumps the epoch, an unchanged epoch key means an
//!   unchanged map, so concurrent updaters never lose each other's changes.
//!   [`MapStore::update_as_leader`] also requires that the caller still holds
//!   the manager lease, fencing a deposed manager.
//! * Liveness (`alive/<id>`) is the exception: etcd deletes it when the
//!   OSD's lease expires, without touching the epoch. The manager watches
//!   for that and recomputes acting sets, and *that* change bumps the epoch.
//!   Epochs therefore number acting-set changes, which is what OSDs and
//!   clients compare.
//! * Watchers get a fresh snapshot after each change (bursts coalesced),
//!   not a diff: the map is small enough, and a snapshot cannot drift.
//!
//! etcd itself needs no special configuration; a pool of more than about
//! 10,000 PGs needs its `--max-request-bytes` raised above the 1.5 MiB
//! default, as its creation writes every PG record in one transaction.

#![warn(missing_docs)]

pub mod auth;
pub mod balancer;
pub mod clones;
pub mod config;
pub mod daemons;
pub mod etcd;
pub mod etcd_auth;
pub mod history;
pub mod identity;
pub mod keys;
pub mod lease;
pub mod model;
pub mod osd_admin;
pub mod pgmap;
pub mod runtime_config;
pub mod snapshots;
pub mod space;
pub mod testkit;

pub use etcd::{MapStore, Updated};
pub use etcd_auth::{EtcdAuth, Secret};
pub use identity::{ClusterFsid, weight_for_size};
pub use lease::{Leadership, OsdLease};
pub use model::{
    ClusterMap, ClusterSettings, DEFAULT_OBJECT_SIZE, FailureDomain, MAX_NAME_LEN,
    MAX_PGS_PER_POOL, NextIds, OsdRecord, OsdReport, PastInterval, PgRecord, PgReport,
    PgScrubReport, PgState, PoolRecord, ScrubRequest, SnapSpaceReport, VolumeRecord, VolumeSpace,
    is_valid_name,
};
pub use model::{NvmeWear, OsdIo};
pub use pgmap::{PgChanges, PgMapError, recompute, trim_clean_pgs, trim_past_intervals};
pub use snapshots::{MAX_SNAPSHOTS_PER_VOLUME, SnapshotRecord, check_snap_name, parse_snap_spec};

/// Why a cluster-map operation failed. Variants are meant to be shown to an
/// operator as they are.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The named pool, volume or OSD does not exist.
    #[error("{kind} {name} not found")]
    NotFound {
        /// What was looked for: "pool", "volume", "snapshot", "osd".
        kind: &'static str,
        /// Its name or id.
        name: String,
    },
    /// A pool, volume or snapshot of that name already exists.
    #[error("{kind} {name} already exists")]
    AlreadyExists {
        /// "pool", "volume" or "snapshot".
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// The object cannot be removed while something uses it.
    #[error("{kind} {name} is in use: {reason}")]
    InUse {
        /// "pool", …
        kind: &'static str,
        /// Its name.
        name: String,
        /// What uses it.
        reason: String,
    },
    /// A request that can never succeed as given (bad name, size, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// etcd answered with an error.
    #[error("etcd {op} failed: {source}")]
    Etcd {
        /// What was being done.
        op: &'static str,
        /// etcd's error.
        #[source]
        source: etcd_client::Error,
    },
    /// A change was bigger than etcd accepts in one transaction.
    #[error(
        "the change writes {keys} keys ({bytes} bytes), more than etcd accepts in one transaction ({reason}); raise etcd's --max-request-bytes / --max-txn-ops"
    )]
    TooLarge {
        /// Keys written.
        keys: usize,
        /// Bytes of keys and values written.
        bytes: usize,
        /// etcd's message.
        reason: String,
    },
    /// Other writers kept changing the map; the update gave up.
    #[error("the cluster map changed concurrently {attempts} times in a row; gave up")]
    Conflict {
        /// Attempts made.
        attempts: u32,
    },
    /// The caller is no longer the manager leader (its lease expired or
    /// another manager holds `mgr/leader`).
    #[error("not the manager leader any more")]
    NotLeader,
    /// etcd could not be reached or did not answer in time.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// A stored record could not be decoded; the map is not trusted.
    #[error("corrupt cluster map record at {key}: {reason}")]
    Corrupt {
        /// The (relative) key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The PG table could not be recomputed.
    #[error(transparent)]
    PgMap(#[from] PgMapError),
}
