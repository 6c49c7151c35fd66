//! The cluster map's records: what etcd stores under the cluster prefix, one
//! JSON value per key, and the [`ClusterMap`] they load into.
//!
//! The id newtypes of `pontoon-types` carry no serde derives (that crate
//! depends on nothing), so the records name their encodings with the small
//! `#[serde(with = ...)]` modules in [`ids`]: an id is its bare number, a PG
//! id is `{"pool": p, "index": i}`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use pontoon_types::{Epoch, ObjectId, OsdId, PgId, PoolId, VolumeId};
use serde::{Deserialize, Serialize};

use crate::space::{FullRatios, FullState};

/// Default object size of a new volume: 4 MiB, the unit of placement and
/// recovery (see DESIGN.md, "Data path").
pub const DEFAULT_OBJECT_SIZE: u64 = 4 << 20;

/// The largest PG count a pool may have. Object → PG is `hash % pgs`, so the
/// count is fixed at creation; the bound keeps the PG table (and the etcd
/// transaction that writes it) finite.
pub const MAX_PGS_PER_POOL: u32 = 65_536;

/// The longest pool, volume or host name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// serde encodings for the `pontoon-types` ids, which have no serde derives
/// of their own.
pub mod ids {
    /// Declares a `with` module for a `u32`/`u64` newtype and one for a `Vec` of it.
    macro_rules! newtype_serde {
        ($single:ident, $vec:ident, $ty:ident, $raw:ty) => {
            #[doc = concat!("Encodes a `pontoon_types::", stringify!($ty), "` as its bare number.")]
            pub mod $single {
                use serde::{Deserialize, Deserializer, Serializer};

                /// serde `with` hook: writes the bare number.
                pub fn serialize<S: Serializer>(
                    v: &pontoon_types::$ty,
                    s: S,
                ) -> Result<S::Ok, S::Error> {
                    serde::Serialize::serialize(&v.0, s)
                }

                /// serde `with` hook: reads the bare number.
                pub fn deserialize<'de, D: Deserializer<'de>>(
                    d: D,
                ) -> Result<pontoon_types::$ty, D::Error> {
                    <$raw>::deserialize(d).map(pontoon_types::$ty)
                }
            }

            #[doc = concat!("Encodes a `Vec<", stringify!($ty), ">` as an array of bare numbers.")]
            pub mod $vec {
                use serde::{Deserialize, Deserializer, Serializer};

                /// serde `with` hook: writes an array of bare numbers.
                pub fn serialize<S: Serializer>(
                    v: &[pontoon_types::$ty],
                    s: S,
                ) -> Result<S::Ok, S::Error> {
                    s.collect_seq(v.iter().map(|x| x.0))
                }

                /// serde `with` hook: reads an array of bare numbers.
                pub fn deserialize<'de, D: Deserializer<'de>>(
                    d: D,
                ) -> Result<Vec<pontoon_types::$ty>, D::Error> {
                    Vec::<$raw>::deserialize(d)
                        .map(|raw| raw.into_iter().map(pontoon_types::$ty).collect())
                }
            }
        };
    }

    newtype_serde!(osd_id, osd_ids, OsdId, u32);
    newtype_serde!(pool_id, pool_ids, PoolId, u32);
    newtype_serde!(volume_id, volume_ids, VolumeId, u64);
    newtype_serde!(epoch, epochs, Epoch, u64);

    /// Encodes a [`PgId`](pontoon_types::PgId) as `{"pool": p, "index": i}`.
    pub mod pg_id {
        use pontoon_types::PgId;
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        #[derive(Serialize, Deserialize)]
        struct Repr {
            pool: u32,
            index: u32,
        }

        /// serde `with` hook: writes `{"pool": p, "index": i}`.
        pub fn serialize<S: Serializer>(v: &PgId, s: S) -> Result<S::Ok, S::Error> {
            Repr {
                pool: v.pool.0,
                index: v.index,
            }
            .serialize(s)
        }

        /// serde `with` hook: reads `{"pool": p, "index": i}`.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PgId, D::Error> {
            Repr::deserialize(d).map(|r| PgId::new(r.pool, r.index))
        }
    }
}

/// One OSD (one data device) as the cluster knows it. Key `osds/<id>`.
///
/// Written by `register_osd` when the OSD daemon starts, and by operators
/// (in/out, weight). Whether the OSD is *running* is not here: that is the
/// `alive/<id>` key, held by the OSD's lease (see [`ClusterMap::alive`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdRecord {
    /// The OSD's id, also the key suffix.
    #[serde(with = "ids::osd_id")]
    pub id: OsdId,
    /// The host the OSD runs on: the unit of the `host` failure domain.
    pub host: String,
    /// One listening address per shard; index = shard number. A PG is
    /// served by shard `pg.index % addrs.len()` (see [`ClusterMap::addr_of`]).
    pub addrs: Vec<SocketAddr>,
    /// Placement weight, by convention MiB of capacity. 0 receives no PGs.
    pub weight: u64,
    /// Size of the data device in bytes, for capacity accounting.
    pub device_bytes: u64,
    /// "in" (true) or "out": an out OSD is given no PGs, and its data is
    /// re-replicated elsewhere. Down OSDs stay in until the manager (or an
    /// operator) marks them out.
    pub in_cluster: bool,
    /// When the manager first saw the OSD's liveness key gone (Unix
    /// seconds, for people); `None` while it is alive. The down → out
    /// timer itself runs on the manager's monotonic clock.
    #[serde(default)]
    pub down_since_unix: Option<u64>,
    /// Held down by the manager because peers on other hosts cannot reach
    /// it: the OSD fences itself and gives up its lease, and takes no new
    /// one until the manager releases it (when the reports stop).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reported_down: bool,
    /// How full the manager last found the OSD against the full ratios:
    /// primaries refuse writes needing new space on a PG with a `full`
    /// member, and recovery does not push to a `backfillfull` one.
    #[serde(default, skip_serializing_if = "FullState::is_ok")]
    pub full: FullState,
}

/// Settings the whole cluster shares, kept in the map (key `settings`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSettings {
    /// When OSDs count as nearfull, backfillfull and full.
    #[serde(default)]
    pub full_ratios: FullRatios,
    /// Deep-scrub every PG this often, in seconds (0: only on request).
    #[serde(default = "default_deep_scrub_interval")]
    pub deep_scrub_interval_secs: u64,
    /// The upmap balancer's settings (see [`crate::balancer`]).
    #[serde(default)]
    pub balancer: crate::balancer::BalancerSettings,
    /// OSD flags, hosts in maintenance, destroyed OSDs, out-after, the
    /// minimum in ratio and the recovery throttles (see [`crate::osd_admin`]).
    #[serde(default)]
    pub osd: crate::osd_admin::OsdSettings,
    /// How the binary protocol's connections authenticate and protect
    /// their frames (`ms_mode`: none, authenticated or secure).
    #[serde(default, with = "wire_mode_text")]
    pub ms_mode: pontoon_types::WireMode,
}

/// A [`pontoon_types::WireMode`] as its name in the map's JSON.
mod wire_mode_text {
    use pontoon_types::WireMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &WireMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<WireMode, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            full_ratios: FullRatios::default(),
            deep_scrub_interval_secs: default_deep_scrub_interval(),
            balancer: Default::default(),
            osd: Default::default(),
            ms_mode: Default::default(),
        }
    }
}

/// A week, as Ceph's `osd_deep_scrub_interval`.
fn default_deep_scrub_interval() -> u64 {
    7 * 24 * 3600
}

/// An operator's request to scrub a PG, stamped with the map epoch it was
/// made at: served once the PG's primary begins a scrub at a later epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubRequest {
    /// Deep (read every block) or light.
    pub deep: bool,
    /// The epoch of the request.
    #[serde(with = "ids::epoch")]
    pub epoch: Epoch,
}

/// Which unit two replicas of one PG may never share. Key field of
/// [`PoolRecord`]; encoded as `"osd"` / `"host"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureDomain {
    /// Replicas on distinct OSDs, possibly on the same host (test clusters).
    Osd,
    /// Replicas on distinct hosts: a host failure loses at most one replica.
    Host,
}

impl From<FailureDomain> for pontoon_placement::FailureDomain {
    fn from(d: FailureDomain) -> Self {
        match d {
            FailureDomain::Osd => pontoon_placement::FailureDomain::Osd,
            FailureDomain::Host => pontoon_placement::FailureDomain::Host,
        }
    }
}

impl fmt::Display for FailureDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureDomain::Osd => "osd",
            FailureDomain::Host => "host",
        })
    }
}

impl FromStr for FailureDomain {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "osd" => Ok(FailureDomain::Osd),
            "host" => Ok(FailureDomain::Host),
            other => Err(format!(
                "unknown failure domain {other:?} (expected osd or host)"
            )),
        }
    }
}

/// A pool: a replication policy and a fixed number of PGs. Key `pools/<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRecord {
    /// The pool's id, never reused.
    #[serde(with = "ids::pool_id")]
    pub id: PoolId,
    /// Unique, human-chosen name (`[A-Za-z0-9._-]+`).
    pub name: String,
    /// Replicas per object (`1..=32`).
    pub size: u32,
    /// Fewest acting members with which a PG still accepts writes.
    pub min_size: u32,
    /// Number of PGs, fixed at creation (objects hash into them modulo it).
    pub pgs: u32,
    /// The unit no two replicas of a PG may share.
    pub failure_domain: FailureDomain,
}

impl PoolRecord {
    /// The placement rule this pool gives `pontoon-placement`.
    pub fn rule(&self) -> pontoon_placement::PoolRule {
        pontoon_placement::PoolRule {
            pool: self.id,
            size: self.size,
            failure_domain: self.failure_domain.into(),
        }
    }
}

/// A thin-provisioned volume: `size_bytes / object_size` objects (rounded up)
/// in one pool. Key `volumes/<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    /// The volume's id, never reused (object ids embed it).
    #[serde(with = "ids::volume_id")]
    pub id: VolumeId,
    /// Unique, human-chosen name (`[A-Za-z0-9._-]+`).
    pub name: String,
    /// The pool holding the volume's objects.
    #[serde(with = "ids::pool_id")]
    pub pool: PoolId,
    /// Logical size in bytes, a multiple of 4096.
    pub size_bytes: u64,
    /// Bytes per object (default [`DEFAULT_OBJECT_SIZE`]); fixed at creation.
    pub object_size: u64,
    /// The volume's snapshot sequence: bumped by every snapshot create
    /// (and never lowered), so it is the newest snapshot id ever taken; 0
    /// before the first. Writes carry it (see [`crate::snapshots`]).
    #[serde(default, skip_serializing_if = "crate::snapshots::is_zero")]
    pub snap_seq: u64,
    /// The volume's snapshots, ascending by id (at most
    /// [`crate::snapshots::MAX_SNAPSHOTS_PER_VOLUME`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<crate::snapshots::SnapshotRecord>,
    /// The snapshot this volume is a clone of, until it is flattened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::clones::ParentRecord>,
}

impl VolumeRecord {
    /// Number of objects covering the volume (the last may be partial).
    pub fn object_count(&self) -> u64 {
        if self.object_size == 0 {
            return 0;
        }
        self.size_bytes.div_ceil(self.object_size)
    }
}

/// The NQN of the NVMe-oF discovery subsystem, fixed by the NVMe over
/// Fabrics specification: never the name of a configured subsystem.
pub const NVMF_DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// The longest NQN (subsystem or host) accepted, in bytes: the limit of
/// the NVMe specification.
pub const NVMF_MAX_NQN_LEN: usize = 223;

/// Most namespaces one NVMe-oF subsystem may have (keeps its record, one
/// etcd value, small).
pub const NVMF_MAX_NAMESPACES: usize = 1024;

/// Most host NQNs one subsystem's allow-list may hold.
pub const NVMF_MAX_HOSTS: usize = 1024;

/// One namespace of an NVMe-oF subsystem: a volume exported under a
/// namespace id. The map key is the namespace id (see
/// [`NvmfSubsystemRecord::namespaces`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmfNamespaceRecord {
    /// The exported volume, by name.
    pub volume: String,
    /// The namespace's stable identity (its NGUID/UUID as hosts see it):
    /// 32 hex digits, bare or in the 8-4-4-4-12 form. Chosen at random
    /// when the namespace is added and never changed, so a host recognises
    /// the namespace across reconnects and gateways.
    pub uuid: String,
}

impl NvmfNamespaceRecord {
    /// The UUID as 16 bytes, if it is well formed.
    pub fn uuid_bytes(&self) -> Option<[u8; 16]> {
        parse_uuid(&self.uuid)
    }
}

/// An NVMe-oF subsystem that every NVMe/TCP gateway exports: its
/// namespaces and the hosts allowed to connect. Key `nvmf/<escaped NQN>`
/// (see [`crate::keys::nvmf_key`]). Not data-moving: the OSDs ignore it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmfSubsystemRecord {
    /// The subsystem's NQN (`nqn.…`, at most [`NVMF_MAX_NQN_LEN`] bytes).
    pub nqn: String,
    /// Namespaces by namespace id (1-based).
    #[serde(default)]
    pub namespaces: BTreeMap<u32, NvmfNamespaceRecord>,
    /// Host NQNs allowed to connect; empty means none (unless a gateway
    /// runs with `--allow-any-host`).
    #[serde(default)]
    pub hosts: BTreeSet<String>,
    /// DH-HMAC-CHAP (NVMe in-band authentication) of the hosts that must
    /// authenticate, by host NQN; each is also in `hosts`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dhchap: BTreeMap<String, NvmfHostAuthRecord>,
}

/// What one host must authenticate with: secrets in the NVMe `DHHC-1:`
/// form (`nvme gen-dhchap-key`), checked by the CLI before they are
/// stored. Its `Debug` form never shows a secret.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NvmfHostAuthRecord {
    /// The host's secret.
    pub secret: String,
    /// The controller's secret, for bidirectional authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctrl_secret: Option<String>,
    /// The hash the gateway picks (`sha256`, `sha384`, `sha512`; none: the
    /// host's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The DH group the gateway picks (`null`, `ffdhe2048` ...
    /// `ffdhe8192`; none: ffdhe2048 first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhgroup: Option<String>,
}

/// `DHHC-1:01:<redacted>` for a secret's text.
pub fn redact_dhchap_secret(secret: &str) -> String {
    match secret.get(..10).filter(|p| p.starts_with("DHHC-1:")) {
        Some(prefix) => format!("{prefix}<redacted>"),
        None => "<redacted>".into(),
    }
}

impl std::fmt::Debug for NvmfHostAuthRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmfHostAuthRecord")
            .field("secret", &redact_dhchap_secret(&self.secret))
            .field(
                "ctrl_secret",
                &self.ctrl_secret.as_deref().map(redact_dhchap_secret),
            )
            .field("hash", &self.hash)
            .field("dhgroup", &self.dhgroup)
            .finish()
    }
}

impl NvmfSubsystemRecord {
    /// The namespace exporting `volume`, if any.
    pub fn namespace_of(&self, volume: &str) -> Option<u32> {
        self.namespaces
            .iter()
            .find(|(_, ns)| ns.volume == volume)
            .map(|(id, _)| *id)
    }

    /// The lowest namespace id (≥ 1) not in use.
    pub fn free_nsid(&self) -> Option<u32> {
        let mut want = 1u32;
        for &id in self.namespaces.keys() {
            if id > want {
                break;
            }
            want = id.checked_add(1)?;
        }
        (want <= NVMF_MAX_NSID).then_some(want)
    }
}

/// The largest valid namespace id (`0xFFFFFFFF` is the broadcast value).
pub const NVMF_MAX_NSID: u32 = 0xFFFF_FFFE;

/// Parses a UUID written as 32 hex digits, bare or as 8-4-4-4-12.
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = match s.len() {
        32 => s.bytes().collect(),
        36 => {
            let b = s.as_bytes();
            if [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
                return None;
            }
            s.bytes().filter(|&c| c != b'-').collect()
        }
        _ => return None,
    };
    if hex.len() != 32 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// Formats 16 bytes as a UUID in the 8-4-4-4-12 form, lower case.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

/// An earlier acting set of a PG that may hold writes the current one lacks.
/// Peering must hear from at least one member of each before serving I/O.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastInterval {
    /// Epoch at which that acting set took over.
    #[serde(with = "ids::epoch")]
    pub interval: Epoch,
    /// The acting set during the interval (first was primary).
    #[serde(with = "ids::osd_ids")]
    pub acting: Vec<OsdId>,
}

/// The placement of one PG, as the manager computed it. Stored in chunks of
/// consecutive PGs under `pgs/<pool>/<first index>` (see the crate docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgRecord {
    /// The PG.
    #[serde(with = "ids::pg_id")]
    pub pg: PgId,
    /// Where placement puts the PG over the OSDs that are in (with weight),
    /// best first, ignoring liveness.
    #[serde(with = "ids::osd_ids")]
    pub up: Vec<OsdId>,
    /// `up` filtered to alive OSDs, same order: the OSDs serving the PG.
    /// The first is the primary; empty means nobody serves it.
    #[serde(with = "ids::osd_ids")]
    pub acting: Vec<OsdId>,
    /// Epoch at which `acting` last changed: the interval writes are
    /// stamped with, and what peering is keyed on.
    #[serde(with = "ids::epoch")]
    pub interval: Epoch,
    /// Earlier non-empty acting sets since the PG was last clean, oldest
    /// first. Trimmed only when the primary reports the PG clean in its
    /// current interval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub past_intervals: Vec<PastInterval>,
    /// The latest scrub an operator asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_request: Option<ScrubRequest>,
    /// The balancer's exceptions to straw2 for this PG, already applied
    /// to `up` by [`recompute`](crate::recompute); those that stop
    /// applying are dropped there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upmap_items: Vec<crate::balancer::UpmapItem>,
}

impl PgRecord {
    /// The primary: first of the acting set, if any member is alive.
    pub fn primary(&self) -> Option<OsdId> {
        self.acting.first().copied()
    }
}

/// A PG's state as its primary (or a replica) reports it. Each state says
/// what is true of the PG's data and whether it serves I/O.
///
/// Encoded (serde and `Display`) the way operators know from Ceph:
/// `"active+clean"`, `"active+degraded"`, …
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PgState {
    /// The primary is gathering versions from current and past acting
    /// sets; no I/O is served until that ends.
    Peering,
    /// Peering is done and I/O is served; the report does not (yet) say
    /// whether every copy is complete.
    Active,
    /// Serving I/O with a full acting set (`size` members) all holding
    /// every object: the only state in which past intervals may be trimmed.
    ActiveClean,
    /// Serving I/O with fewer than `size` members (but at least
    /// `min_size`); nothing to copy to them until they return or are replaced.
    Degraded,
    /// Serving I/O while copying missing or stale objects to members.
    Recovering,
    /// Peering could not hear from any member of some past interval, so
    /// the newest data may be unknown: I/O blocks rather than return stale data.
    Incomplete,
    /// Not serving I/O: fewer than `min_size` members, or no primary.
    Inactive,
}

impl PgState {
    /// Every state, in declaration order (for status tables and tests).
    pub const ALL: [PgState; 7] = [
        PgState::Peering,
        PgState::Active,
        PgState::ActiveClean,
        PgState::Degraded,
        PgState::Recovering,
        PgState::Incomplete,
        PgState::Inactive,
    ];

    /// The operator-facing name, e.g. `"active+clean"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PgState::Peering => "peering",
            PgState::Active => "active",
            PgState::ActiveClean => "active+clean",
            PgState::Degraded => "active+degraded",
            PgState::Recovering => "active+recovering",
            PgState::Incomplete => "incomplete",
            PgState::Inactive => "inactive",
        }
    }

    /// Whether a PG in this state serves client I/O.
    pub fn serves_io(self) -> bool {
        matches!(
            self,
            PgState::Active | PgState::ActiveClean | PgState::Degraded | PgState::Recovering
        )
    }
}

impl fmt::Display for PgState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PgState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(state) = PgState::ALL.into_iter().find(|st| st.as_str() == s) {
            return Ok(state);
        }
        // Short forms accepted on input.
        match s {
            "clean" => Ok(PgState::ActiveClean),
            "degraded" => Ok(PgState::Degraded),
            "recovering" => Ok(PgState::Recovering),
            _ => Err(format!("unknown PG state {s:?}")),
        }
    }
}

impl Serialize for PgState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PgState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One PG as an OSD reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgReport {
    /// The PG.
    #[serde(with = "ids::pg_id")]
    pub pg: PgId,
    /// The interval the reporter is serving the PG in; a report from an
    /// older interval than the map's is stale.
    #[serde(with = "ids::epoch")]
    pub interval: Epoch,
    /// The PG's state.
    pub state: PgState,
    /// Objects the PG holds.
    pub objects: u64,
    /// Objects with fewer than `size` up-to-date copies.
    pub degraded_objects: u64,
    /// Objects whose authoritative version is not on the primary.
    pub missing_objects: u64,
    /// Objects recovered so far in this interval.
    pub recovered_objects: u64,
    /// Why the PG is incomplete or its recovery waits, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What scrub found (primaries report it).
    #[serde(default, skip_serializing_if = "PgScrubReport::is_empty")]
    pub scrub: PgScrubReport,
}

/// A PG's scrub stamps and findings, as its primary reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgScrubReport {
    /// When the last scrub (light or deep) finished, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scrub_unix: Option<u64>,
    /// When the last deep scrub finished, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deep_scrub_unix: Option<u64>,
    /// Objects whose copies differed in the last scrub.
    #[serde(default)]
    pub inconsistent_objects: u64,
    /// Objects repaired by scrub since the primary started.
    #[serde(default)]
    pub repaired_objects: u64,
    /// Objects the last scrub found no good copy of.
    #[serde(default)]
    pub unrecoverable_objects: u64,
    /// Their names (the first few).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecoverable: Vec<String>,
    /// Objects compared so far and in all, while a scrub runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<(u64, u64)>,
}

impl PgScrubReport {
    /// Whether there is nothing to report (serde skips it).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What one OSD reports periodically to the manager. Key `reports/<osd>`;
/// not part of [`ClusterMap`] (reports change often and do not move data).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdReport {
    /// The reporting OSD.
    #[serde(with = "ids::osd_id")]
    pub osd: OsdId,
    /// The map epoch the OSD had when it reported.
    #[serde(with = "ids::epoch")]
    pub epoch: Epoch,
    /// The PGs the OSD serves (as primary or replica).
    pub pgs: Vec<PgReport>,
    /// Bytes in use on the device.
    pub used_bytes: u64,
    /// Usable bytes of the device: its data areas.
    pub capacity_bytes: u64,
    /// Bytes of the device (or file) itself.
    #[serde(default)]
    pub device_bytes: u64,
    /// Bytes of the data areas still free for new data.
    #[serde(default)]
    pub free_bytes: u64,
    /// Bytes of the journal rings (the write buffer).
    #[serde(default)]
    pub journal_bytes: u64,
    /// What each volume holds on this OSD: every copy here, stray copies
    /// included until reclaimed. Ascending by volume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpace>,
    /// Each snapshot's exclusive bytes on this OSD (every copy here), for
    /// snapshots that hold any. Ascending by volume and snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapSpaceReport>,
    /// Objects of removed volumes and stray PG copies waiting to be deleted.
    #[serde(default)]
    pub reclaim_pending: u64,
    /// Objects deleted by reclaim since the OSD started.
    #[serde(default)]
    pub reclaimed_objects: u64,
    /// Reads that found a block not matching its checksum, since the OSD
    /// started: a sign of a failing device.
    #[serde(default)]
    pub checksum_errors: u64,
    /// Why the OSD's store stopped accepting writes, if it did (the OSD
    /// exits soon after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_failure: Option<String>,
    /// OSDs this one shares PGs with and has not heard from, by heartbeat,
    /// for longer than the grace.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "ids::osd_ids")]
    pub unreachable: Vec<OsdId>,
    /// Cumulative I/O counters of the OSD's stores, and what an NVMe
    /// device says of its own wear (capacity history and endurance).
    #[serde(default, skip_serializing_if = "OsdIo::is_empty")]
    pub io: OsdIo,
}

/// An OSD's cumulative I/O counters since its process started (summed
/// over its store slices; reset by a restart, which `since_unix` tells),
/// and its device's own wear where the device is NVMe. A report is not
/// republished for these alone (see the OSD's control loop), so they may
/// lag by the report refresh (10 s).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdIo {
    /// When the OSD process started (Unix seconds): counters restart at 0
    /// with a new value.
    #[serde(default)]
    pub since_unix: u64,
    /// Read operations the stores completed (client and recovery reads).
    #[serde(default)]
    pub reads: u64,
    /// Write operations the stores completed (client writes at the
    /// primary and replica writes alike).
    #[serde(default)]
    pub writes: u64,
    /// Bytes the stores returned to readers.
    #[serde(default)]
    pub read_bytes: u64,
    /// Bytes the stores' callers asked to write ("user" bytes).
    #[serde(default)]
    pub written_bytes: u64,
    /// Bytes written to the device: journal, data, moved, checkpoints.
    #[serde(default)]
    pub device_written_bytes: u64,
    /// Of those, bytes written to the journal rings (the write buffer).
    #[serde(default)]
    pub journal_written_bytes: u64,
    /// Whether the journal is on a device of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub journal_separate: bool,
    /// The device's NVMe SMART wear; `None` when it is not NVMe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme: Option<NvmeWear>,
}

impl OsdIo {
    /// Whether nothing was counted (serde skips it).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What an NVMe device's SMART / Health log page says of its wear.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmeWear {
    /// The device read (e.g. `/dev/nvme0n1`).
    pub device: String,
    /// "Data Units Written": thousands of 512-byte units the host wrote
    /// over the device's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_units_written: Option<u64>,
    /// "Percentage Used": the vendor's estimate of life used (may exceed 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_used: Option<u8>,
    /// Why the log page could not be read, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one volume holds on one OSD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSpace {
    /// The volume.
    #[serde(with = "ids::volume_id")]
    pub volume: VolumeId,
    /// Objects held.
    pub objects: u64,
    /// Allocated bytes of those objects (written and not discarded).
    pub bytes: u64,
    /// Bytes only the volume's snapshots hold (their clones' blocks).
    #[serde(default, skip_serializing_if = "crate::snapshots::is_zero")]
    pub snap_bytes: u64,
}

/// What removing one snapshot would free on one OSD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapSpaceReport {
    /// The volume.
    #[serde(with = "ids::volume_id")]
    pub volume: VolumeId,
    /// The snapshot id.
    pub snap: u64,
    /// Bytes of blocks this snapshot alone holds on this OSD.
    pub exclusive_bytes: u64,
}

/// The id counters (`next/osd`, `next/pool`, `next/volume`): the smallest id
/// never handed out of each kind. Ids are never reused, so a removed volume's
/// objects can never be mistaken for a new volume's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextIds {
    /// Next OSD id.
    pub osd: u32,
    /// Next pool id.
    pub pool: u32,
    /// Next volume id.
    pub volume: u64,
}

/// The whole cluster map at one epoch: everything clients and OSDs need to
/// route I/O, loaded from etcd in one consistent read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterMap {
    /// The cluster's name (the etcd key prefix is `/pontoon/<name>/`).
    pub name: String,
    /// Bumped by every committed change to the map (see the crate docs).
    pub epoch: Epoch,
    /// Registered OSDs.
    pub osds: BTreeMap<OsdId, OsdRecord>,
    /// OSDs whose liveness lease is held right now (`alive/<id>`). Changes
    /// here do not bump the epoch by themselves: the manager reacts by
    /// recomputing acting sets, and that change bumps it.
    pub alive: BTreeSet<OsdId>,
    /// Pools by id.
    pub pools: BTreeMap<PoolId, PoolRecord>,
    /// Volumes by id.
    pub volumes: BTreeMap<VolumeId, VolumeRecord>,
    /// Every PG of every pool.
    pub pgs: BTreeMap<PgId, PgRecord>,
    /// Id counters.
    pub next: NextIds,
    /// NVMe-oF subsystems by NQN (what the NVMe/TCP gateways export).
    pub nvmf: BTreeMap<String, NvmfSubsystemRecord>,
    /// Cluster-wide settings.
    pub settings: ClusterSettings,
    /// The cluster's unique id, recorded in every OSD's device header
    /// (see [`crate::identity`]); `None` until first asked for.
    pub fsid: Option<crate::identity::ClusterFsid>,
    /// OSD ids handed out to devices (`pontoon osd create`) whose OSD has
    /// not registered yet.
    pub created_osds: BTreeSet<OsdId>,
    /// Entities, their keys and caps (`auth/<entity>`, [`crate::auth`]).
    /// Holds secrets: the whole-map JSON leaves it out.
    pub auth: crate::auth::AuthTable,
}

impl ClusterMap {
    /// An empty map (epoch 0) for the named cluster.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// The volume called `name`.
    pub fn volume_by_name(&self, name: &str) -> Option<&VolumeRecord> {
        self.volumes.values().find(|v| v.name == name)
    }

    /// The NVMe-oF namespaces exporting the volume called `name`, as
    /// (subsystem NQN, namespace id).
    pub fn nvmf_exports_of(&self, name: &str) -> Vec<(&str, u32)> {
        self.nvmf
            .values()
            .flat_map(|s| {
                s.namespaces
                    .iter()
                    .filter(|(_, ns)| ns.volume == name)
                    .map(|(id, _)| (s.nqn.as_str(), *id))
            })
            .collect()
    }

    /// The pool called `name`.
    pub fn pool_by_name(&self, name: &str) -> Option<&PoolRecord> {
        self.pools.values().find(|p| p.name == name)
    }

    /// The PG of `pool` an object with placement hash `object_hash` lives
    /// in: `hash % pgs`. `None` if the pool does not exist (or has no PGs).
    pub fn pg_of(&self, pool: PoolId, object_hash: u64) -> Option<PgId> {
        let pgs = self.pools.get(&pool)?.pgs;
        if pgs == 0 {
            return None;
        }
        // The remainder is below `pgs`, a u32.
        let index = (object_hash % u64::from(pgs)) as u32;
        Some(PgId { pool, index })
    }

    /// The PG holding `object`, looked up through its volume's pool.
    pub fn pg_of_object(&self, object: &ObjectId) -> Option<PgId> {
        let volume = self.volumes.get(&object.volume)?;
        self.pg_of(volume.pool, object.placement_hash())
    }

    /// The primary OSD of `pg`, if the PG exists and has a live member.
    pub fn primary(&self, pg: PgId) -> Option<OsdId> {
        self.pgs.get(&pg)?.primary()
    }

    /// The address of the shard of `osd` that serves `pg`:
    /// `addrs[pg.index % addrs.len()]`.
    pub fn addr_of(&self, osd: OsdId, pg: PgId) -> Option<SocketAddr> {
        let addrs = &self.osds.get(&osd)?.addrs;
        if addrs.is_empty() {
            return None;
        }
        addrs.get(pg.index as usize % addrs.len()).copied()
    }

    /// Whether `osd` holds its liveness lease.
    pub fn is_alive(&self, osd: OsdId) -> bool {
        self.alive.contains(&osd)
    }

    /// Hands out an OSD id: `requested` if given and not registered (an OSD
    /// that knows its id from its device), else the next never-used id.
    /// The counter moves past whatever is handed out.
    pub fn alloc_osd_id(&mut self, requested: Option<OsdId>) -> OsdId {
        let next = self
            .osds
            .keys()
            .next_back()
            .map_or(self.next.osd, |m| self.next.osd.max(m.0.saturating_add(1)));
        let id = match requested {
            Some(r) if !self.osds.contains_key(&r) => r.0,
            _ => next,
        };
        self.next.osd = next.max(id.saturating_add(1));
        OsdId(id)
    }

    /// Hands out the next pool id, advancing the counter.
    pub fn alloc_pool_id(&mut self) -> PoolId {
        let id = self.pools.keys().next_back().map_or(self.next.pool, |m| {
            self.next.pool.max(m.0.saturating_add(1))
        });
        self.next.pool = id.saturating_add(1);
        PoolId(id)
    }

    /// Hands out the next volume id, advancing the counter.
    pub fn alloc_volume_id(&mut self) -> VolumeId {
        let id = self
            .volumes
            .keys()
            .next_back()
            .map_or(self.next.volume, |m| {
                self.next.volume.max(m.0.saturating_add(1))
            });
        self.next.volume = id.saturating_add(1);
        VolumeId(id)
    }
}

/// Largest object size a volume may have (1 GiB): objects are the unit of
/// recovery, read whole when a replica is rebuilt.
pub const MAX_OBJECT_SIZE: u64 = 1 << 30;

/// Most listening addresses (shards) one OSD record may hold.
pub const MAX_OSD_ADDRS: usize = 1024;

impl ClusterMap {
    /// Checks every record on its own and against the others: what a
    /// client or OSD derives from the map (object counts, PG indices,
    /// shard addresses) must never divide by zero, overflow or index out
    /// of range. A record that fails is named with the reason.
    pub fn validate(&self) -> Result<(), crate::ClusterError> {
        let bad = |key: String, reason: String| crate::ClusterError::Corrupt { key, reason };
        for o in self.osds.values() {
            let key = || crate::keys::osd_key(o.id);
            if o.addrs.is_empty() || o.addrs.len() > MAX_OSD_ADDRS {
                return Err(bad(
                    key(),
                    format!(
                        "{} listening addresses (1-{MAX_OSD_ADDRS} allowed)",
                        o.addrs.len()
                    ),
                ));
            }
            if !is_valid_name(&o.host) {
                return Err(bad(key(), format!("host name {:?} is not valid", o.host)));
            }
        }
        for p in self.pools.values() {
            let key = || format!("{}{}", crate::keys::POOLS, p.id.0);
            if !is_valid_name(&p.name) {
                return Err(bad(key(), format!("name {:?} is not valid", p.name)));
            }
            if !(1..=pontoon_placement::MAX_POOL_SIZE).contains(&p.size)
                || !(1..=p.size).contains(&p.min_size)
            {
                return Err(bad(
                    key(),
                    format!("size {} / min_size {} out of range", p.size, p.min_size),
                ));
            }
            if !(1..=MAX_PGS_PER_POOL).contains(&p.pgs) {
                return Err(bad(
                    key(),
                    format!("{} PGs (1-{MAX_PGS_PER_POOL} allowed)", p.pgs),
                ));
            }
        }
        for v in self.volumes.values() {
            let key = || format!("{}{}", crate::keys::VOLUMES, v.id.0);
            let block = pontoon_types::BLOCK_SIZE_U64;
            if !is_valid_name(&v.name) {
                return Err(bad(key(), format!("name {:?} is not valid", v.name)));
            }
            if v.object_size == 0
                || !v.object_size.is_multiple_of(block)
                || v.object_size > MAX_OBJECT_SIZE
            {
                return Err(bad(
                    key(),
                    format!(
                        "object size {} is not a multiple of {block} between {block} and {MAX_OBJECT_SIZE}",
                        v.object_size
                    ),
                ));
            }
            if v.size_bytes == 0 || !v.size_bytes.is_multiple_of(block) {
                return Err(bad(
                    key(),
                    format!(
                        "size {} is not a positive multiple of {block}",
                        v.size_bytes
                    ),
                ));
            }
            if !self.pools.contains_key(&v.pool) {
                return Err(bad(key(), format!("its pool {} does not exist", v.pool)));
            }
            crate::snapshots::check_snapshots(v).map_err(|why| bad(key(), why))?;
            crate::clones::check_parent(self, v).map_err(|why| bad(key(), why))?;
        }
        for rec in self.pgs.values() {
            let key = || crate::keys::pg_chunk_key(rec.pg);
            let Some(pool) = self.pools.get(&rec.pg.pool) else {
                return Err(bad(key(), format!("{} belongs to no pool", rec.pg)));
            };
            if rec.pg.index >= pool.pgs {
                return Err(bad(
                    key(),
                    format!("{} is beyond the pool's {} PGs", rec.pg, pool.pgs),
                ));
            }
            for set in [&rec.up, &rec.acting] {
                if set.len() > pool.size as usize {
                    return Err(bad(
                        key(),
                        format!(
                            "{} lists {} OSDs for a pool of size {}",
                            rec.pg,
                            set.len(),
                            pool.size
                        ),
                    ));
                }
                let distinct: BTreeSet<_> = set.iter().collect();
                if distinct.len() != set.len() {
                    return Err(bad(key(), format!("{} lists an OSD twice", rec.pg)));
                }
                if let Some(o) = set.iter().find(|o| !self.osds.contains_key(o)) {
                    return Err(bad(key(), format!("{} names unregistered {o}", rec.pg)));
                }
            }
        }
        Ok(())
    }
}

/// The JSON form of a whole [`ClusterMap`] (for status output and
/// debugging; etcd stores the records one per key instead). It leaves out
/// the auth table, which holds keys.
#[derive(Serialize, Deserialize)]
struct ClusterMapRepr {
    name: String,
    #[serde(with = "ids::epoch")]
    epoch: Epoch,
    osds: Vec<OsdRecord>,
    #[serde(with = "ids::osd_ids")]
    alive: Vec<OsdId>,
    pools: Vec<PoolRecord>,
    volumes: Vec<VolumeRecord>,
    pgs: Vec<PgRecord>,
    #[serde(default)]
    next: NextIds,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    nvmf: Vec<NvmfSubsystemRecord>,
    #[serde(default)]
    settings: ClusterSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fsid: Option<crate::identity::ClusterFsid>,
    #[serde(default, with = "ids::osd_ids", skip_serializing_if = "Vec::is_empty")]
    created_osds: Vec<OsdId>,
}

impl Serialize for ClusterMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ClusterMapRepr {
            name: self.name.clone(),
            epoch: self.epoch,
            osds: self.osds.values().cloned().collect(),
            alive: self.alive.iter().copied().collect(),
            pools: self.pools.values().cloned().collect(),
            volumes: self.volumes.values().cloned().collect(),
            pgs: self.pgs.values().cloned().collect(),
            next: self.next,
            nvmf: self.nvmf.values().cloned().collect(),
            settings: self.settings.clone(),
            fsid: self.fsid,
            created_osds: self.created_osds.iter().copied().collect(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ClusterMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = ClusterMapRepr::deserialize(d)?;
        Ok(ClusterMap {
            name: r.name,
            epoch: r.epoch,
            osds: r.osds.into_iter().map(|o| (o.id, o)).collect(),
            alive: r.alive.into_iter().collect(),
            pools: r.pools.into_iter().map(|p| (p.id, p)).collect(),
            volumes: r.volumes.into_iter().map(|v| (v.id, v)).collect(),
            pgs: r.pgs.into_iter().map(|p| (p.pg, p)).collect(),
            next: r.next,
            nvmf: r.nvmf.into_iter().map(|s| (s.nqn.clone(), s)).collect(),
            settings: r.settings,
            fsid: r.fsid,
            created_osds: r.created_osds.into_iter().collect(),
            // Never in the JSON form: it holds keys.
            auth: Default::default(),
        })
    }
}

/// Whether `name` is acceptable for a pool, volume or cluster: 1 to
/// [`MAX_NAME_LEN`] bytes of `[A-Za-z0-9._-]`. Such names are safe in etcd
/// keys, file names and command lines.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_map() -> ClusterMap {
        let mut m = ClusterMap::new("c1");
        m.epoch = Epoch(7);
        m.osds.insert(
            OsdId(3),
            OsdRecord {
                id: OsdId(3),
                host: "h1".into(),
                addrs: vec![
                    "127.0.0.1:7000".parse().unwrap(),
                    "127.0.0.1:7001".parse().unwrap(),
                ],
                weight: 1024,
                device_bytes: 1 << 30,
                in_cluster: true,
                down_since_unix: None,
                reported_down: false,
                full: Default::default(),
            },
        );
        m.alive.insert(OsdId(3));
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "rbd".into(),
                size: 3,
                min_size: 2,
                pgs: 8,
                failure_domain: FailureDomain::Host,
            },
        );
        m.volumes.insert(
            VolumeId(5),
            VolumeRecord {
                id: VolumeId(5),
                name: "vm1".into(),
                pool: PoolId(1),
                size_bytes: 10 << 20,
                object_size: DEFAULT_OBJECT_SIZE,
                snap_seq: 2,
                snapshots: vec![crate::SnapshotRecord {
                    id: 2,
                    name: "nightly".into(),
                    created_unix: 1_700_000_000,
                    size_bytes: 10 << 20,
                    protected: true,
                }],
                parent: None,
            },
        );
        m.pgs.insert(
            PgId::new(1, 3),
            PgRecord {
                pg: PgId::new(1, 3),
                up: vec![OsdId(3)],
                acting: vec![OsdId(3)],
                interval: Epoch(6),
                past_intervals: vec![PastInterval {
                    interval: Epoch(2),
                    acting: vec![OsdId(1), OsdId(3)],
                }],
                scrub_request: Some(crate::ScrubRequest {
                    deep: true,
                    epoch: Epoch(5),
                }),
                upmap_items: vec![crate::balancer::UpmapItem {
                    from: OsdId(2),
                    to: OsdId(3),
                }],
            },
        );
        let nqn = "nqn.2024-01.io.pontoon:vm1";
        m.nvmf.insert(
            nqn.into(),
            NvmfSubsystemRecord {
                nqn: nqn.into(),
                namespaces: BTreeMap::from([(
                    2,
                    NvmfNamespaceRecord {
                        volume: "vm1".into(),
                        uuid: "0123456789abcdef0123456789abcdef".into(),
                    },
                )]),
                hosts: BTreeSet::from(["nqn.2014-08.org.nvmexpress:uuid:h1".to_string()]),
                dhchap: BTreeMap::new(),
            },
        );
        m
    }

    #[test]
    fn records_round_trip_through_json_with_bare_ids() {
        let m = sample_map();
        let osd = serde_json::to_string(&m.osds[&OsdId(3)]).unwrap();
        assert!(osd.starts_with(r#"{"id":3,"host":"h1""#), "{osd}");
        let pg = serde_json::to_string(&m.pgs[&PgId::new(1, 3)]).unwrap();
        assert!(pg.contains(r#""pg":{"pool":1,"index":3}"#), "{pg}");
        assert!(pg.contains(r#""acting":[3]"#), "{pg}");
        let pool = serde_json::to_string(&m.pools[&PoolId(1)]).unwrap();
        assert!(pool.contains(r#""failure_domain":"host""#), "{pool}");

        let whole = serde_json::to_string(&m).unwrap();
        assert!(
            whole.contains(r#""snap_seq":2,"snapshots":[{"id":2,"name":"nightly""#),
            "{whole}"
        );
        let back: ClusterMap = serde_json::from_str(&whole).unwrap();
        assert_eq!(back, m);
        assert!(m.validate().is_ok());
    }

    #[test]
    fn pg_state_encodes_as_operators_know_it() {
        assert_eq!(PgState::ActiveClean.to_string(), "active+clean");
        assert_eq!(
            serde_json::to_string(&PgState::Degraded).unwrap(),
            r#""active+degraded""#
        );
        for st in PgState::ALL {
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(serde_json::from_str::<PgState>(&json).unwrap(), st);
            assert_eq!(st.as_str().parse::<PgState>().unwrap(), st);
        }
        assert_eq!("degraded".parse::<PgState>().unwrap(), PgState::Degraded);
        assert!("bogus".parse::<PgState>().is_err());
        assert!(serde_json::from_str::<PgState>(r#""active+bogus""#).is_err());
    }

    #[test]
    fn report_round_trips() {
        let r = OsdReport {
            osd: OsdId(2),
            epoch: Epoch(9),
            pgs: vec![PgReport {
                pg: PgId::new(1, 0),
                interval: Epoch(8),
                state: PgState::Recovering,
                objects: 10,
                degraded_objects: 2,
                missing_objects: 1,
                recovered_objects: 4,
                note: None,
                scrub: Default::default(),
            }],
            used_bytes: 100,
            capacity_bytes: 1000,
            unreachable: Vec::new(),
            ..Default::default()
        };
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains(r#""state":"active+recovering""#), "{json}");
        assert_eq!(serde_json::from_str::<OsdReport>(&json).unwrap(), r);
    }

    #[test]
    fn lookups_route_objects_to_primary_shards() {
        let m = sample_map();
        assert_eq!(m.pool_by_name("rbd").map(|p| p.id), Some(PoolId(1)));
        assert_eq!(m.volume_by_name("vm1").map(|v| v.id), Some(VolumeId(5)));
        assert!(m.volume_by_name("nope").is_none());
        assert_eq!(m.pg_of(PoolId(1), 11), Some(PgId::new(1, 3)));
        assert_eq!(m.pg_of(PoolId(9), 11), None);
        let obj = ObjectId::new(5, 42);
        let pg = m.pg_of_object(&obj).unwrap();
        assert_eq!(pg.index as u64, obj.placement_hash() % 8);
        assert_eq!(m.primary(PgId::new(1, 3)), Some(OsdId(3)));
        assert_eq!(m.primary(PgId::new(1, 4)), None);
        assert_eq!(
            m.addr_of(OsdId(3), PgId::new(1, 3)),
            Some("127.0.0.1:7001".parse().unwrap())
        );
        assert_eq!(
            m.addr_of(OsdId(3), PgId::new(1, 4)),
            Some("127.0.0.1:7000".parse().unwrap())
        );
        assert_eq!(m.addr_of(OsdId(4), PgId::new(1, 4)), None);
        assert_eq!(m.volumes[&VolumeId(5)].object_count(), 3);
    }

    #[test]
    fn ids_are_never_reused() {
        let mut m = sample_map();
        assert_eq!(m.alloc_volume_id(), VolumeId(6));
        m.volumes.clear();
        assert_eq!(m.alloc_volume_id(), VolumeId(7));
        assert_eq!(m.alloc_pool_id(), PoolId(2));
        assert_eq!(m.alloc_osd_id(None), OsdId(4));
        assert_eq!(m.alloc_osd_id(Some(OsdId(10))), OsdId(10));
        assert_eq!(m.alloc_osd_id(None), OsdId(11));
        // A free requested id is honoured even below the counter; a taken
        // one is not.
        assert_eq!(m.alloc_osd_id(Some(OsdId(1))), OsdId(1));
        assert_eq!(m.alloc_osd_id(Some(OsdId(3))), OsdId(12));
    }

    #[test]
    fn nvmf_records_encode_nsids_as_keys_and_find_exports() {
        let m = sample_map();
        let rec = &m.nvmf["nqn.2024-01.io.pontoon:vm1"];
        let json = serde_json::to_string(rec).unwrap();
        assert!(
            json.contains(r#""namespaces":{"2":{"volume":"vm1""#),
            "{json}"
        );
        assert_eq!(
            serde_json::from_str::<NvmfSubsystemRecord>(&json).unwrap(),
            *rec
        );
        // Absent collections read as empty.
        let bare: NvmfSubsystemRecord = serde_json::from_str(r#"{"nqn":"nqn.x"}"#).unwrap();
        assert!(bare.namespaces.is_empty() && bare.hosts.is_empty());
        assert_eq!(
            m.nvmf_exports_of("vm1"),
            vec![("nqn.2024-01.io.pontoon:vm1", 2)]
        );
        assert!(m.nvmf_exports_of("vm2").is_empty());
        assert_eq!(rec.namespace_of("vm1"), Some(2));
        assert_eq!(rec.free_nsid(), Some(1));
    }

    #[test]
    fn nvmf_dhchap_records_round_trip_and_never_debug_print_a_secret() {
        let secret = "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:";
        let mut rec = NvmfSubsystemRecord {
            nqn: "nqn.x".into(),
            ..Default::default()
        };
        rec.hosts.insert("nqn.h".into());
        rec.dhchap.insert(
            "nqn.h".into(),
            NvmfHostAuthRecord {
                secret: secret.into(),
                ctrl_secret: Some(secret.replace(":01:", ":00:")),
                hash: Some("sha384".into()),
                dhgroup: None,
            },
        );
        let json = serde_json::to_string(&rec).unwrap();
        assert_eq!(
            serde_json::from_str::<NvmfSubsystemRecord>(&json).unwrap(),
            rec
        );
        let dbg = format!("{rec:?}");
        assert!(!dbg.contains("Fm2C"), "{dbg}");
        assert!(dbg.contains("DHHC-1:01:<redacted>"), "{dbg}");
        // Records written before DH-HMAC-CHAP read with no secrets.
        let old: NvmfSubsystemRecord =
            serde_json::from_str(r#"{"nqn":"nqn.x","hosts":["nqn.h"]}"#).unwrap();
        assert!(old.dhchap.is_empty());
        assert!(!serde_json::to_string(&old).unwrap().contains("dhchap"));
    }

    #[test]
    fn free_nsid_is_the_lowest_gap() {
        let ns = |volume: &str| NvmfNamespaceRecord {
            volume: volume.into(),
            uuid: String::new(),
        };
        let mut s = NvmfSubsystemRecord::default();
        assert_eq!(s.free_nsid(), Some(1));
        s.namespaces.insert(1, ns("a"));
        s.namespaces.insert(2, ns("b"));
        s.namespaces.insert(4, ns("c"));
        assert_eq!(s.free_nsid(), Some(3));
        s.namespaces.insert(3, ns("d"));
        assert_eq!(s.free_nsid(), Some(5));
        let mut full = NvmfSubsystemRecord::default();
        full.namespaces.insert(NVMF_MAX_NSID, ns("x"));
        assert_eq!(full.free_nsid(), Some(1));
        full.namespaces.insert(1, ns("y"));
        assert_eq!(full.free_nsid(), Some(2));
    }

    #[test]
    fn uuids_parse_in_both_forms_and_format_canonically() {
        let bytes: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        let text = format_uuid(&bytes);
        assert_eq!(text, "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(parse_uuid(&text), Some(bytes));
        assert_eq!(parse_uuid(&text.replace('-', "")), Some(bytes));
        assert_eq!(parse_uuid(&text.to_uppercase()), Some(bytes));
        for bad in [
            "",
            "00112233-4455-6677-8899-aabbccddeef",
            "0011223344556677-8899-aabbccddeeff0",
            "00112233-4455-6677-8899-aabbccddeefg",
            "001122334455667788990aabbccddeeff",
            "+0112233445566778899aabbccddeeff",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
    }

    #[test]
    fn names_are_restricted_to_safe_characters() {
        assert!(is_valid_name("rbd.ssd-1_a"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a/b"));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name(&"x".repeat(MAX_NAME_LEN + 1)));
    }
}
