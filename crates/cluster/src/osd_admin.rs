//! OSD life cycle and maintenance, in the words operators know from Ceph:
//! the cluster-wide OSD flags (`noout`, `norebalance`, `norecover`), hosts
//! in maintenance, destroyed OSDs whose ids wait for a replacement drive,
//! the out-after interval and minimum in ratio the manager honours, and the
//! recovery throttles every OSD reads live.
//!
//! All of it lives in the map, in [`OsdSettings`] ([`ClusterSettings::osd`],
//! key `settings`), so every change bumps the epoch and reaches the manager
//! and the OSDs through their map watch. The operations are pure functions
//! of a [`ClusterMap`], meant to run inside [`MapStore::update`]; each says
//! whether it changed anything, or refuses with a reason an operator can
//! act on ([`AdminError`]).
//!
//! Weights: an OSD's `weight` is MiB of its device by convention (the OSD
//! registers with that). [`reweight`] takes Ceph's reweight, a fraction in
//! `[0, 1]`, and sets `weight = fraction × device MiB`, so `1.0` restores
//! the full weight and `0` drains the OSD; [`OsdRecord`]s therefore carry
//! one weight, and the fraction shown is `weight / device MiB`.
//!
//! [`ClusterSettings::osd`]: crate::ClusterSettings::osd

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use pontoon_types::{OsdId, PgId};
use serde::{Deserialize, Serialize};

use crate::model::{ClusterMap, OsdRecord};
use crate::{ClusterError, MapStore, keys, recompute};

/// Default time an OSD may be down before the manager marks it out: ten
/// minutes, as Ceph's `mon_osd_down_out_interval`.
pub const DEFAULT_OUT_AFTER_SECS: u64 = 600;
/// Default minimum fraction of OSDs in, as Ceph's `mon_osd_min_in_ratio`.
pub const DEFAULT_MIN_IN_RATIO: f64 = 0.75;
/// Default objects each OSD shard recovers at once.
pub const DEFAULT_RECOVERY_MAX_ACTIVE: u32 = 2;
/// Most objects a shard may be set to recover at once.
pub const MAX_RECOVERY_MAX_ACTIVE: u32 = 64;
/// Longest pause between two recovered objects that may be set.
pub const MAX_RECOVERY_SLEEP_MS: u64 = 10_000;
/// Longest out-after that may be set (30 days).
pub const MAX_OUT_AFTER_SECS: u64 = 30 * 86_400;

/// A cluster-wide OSD flag (`pontoon osd set|unset FLAG`), named as in Ceph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OsdFlag {
    /// The manager marks no down OSD out (no re-replication starts).
    Noout,
    /// PGs whose every object still has all its copies (only misplaced,
    /// not degraded) are not backfilled onto their new OSDs.
    Norebalance,
    /// No background recovery or backfill at all (a client's I/O to an
    /// object still brings that object up to date first).
    Norecover,
}

impl OsdFlag {
    /// Every flag, in order.
    pub const ALL: [OsdFlag; 3] = [OsdFlag::Noout, OsdFlag::Norebalance, OsdFlag::Norecover];

    /// The flag's name, e.g. `noout`.
    pub fn as_str(self) -> &'static str {
        match self {
            OsdFlag::Noout => "noout",
            OsdFlag::Norebalance => "norebalance",
            OsdFlag::Norecover => "norecover",
        }
    }

    /// What the flag does, in one line.
    pub fn meaning(self) -> &'static str {
        match self {
            OsdFlag::Noout => "down OSDs are not marked out",
            OsdFlag::Norebalance => "misplaced PGs are not backfilled",
            OsdFlag::Norecover => "recovery and backfill are paused",
        }
    }
}

impl fmt::Display for OsdFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OsdFlag {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OsdFlag::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                format!("unknown OSD flag {s:?} (expected noout, norebalance or norecover)")
            })
    }
}

/// serde encoding of a set of OSD ids as an array of bare numbers.
mod osd_id_set {
    use std::collections::BTreeSet;

    use pontoon_types::OsdId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &BTreeSet<OsdId>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|o| o.0))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<OsdId>, D::Error> {
        Vec::<u32>::deserialize(d).map(|v| v.into_iter().map(OsdId).collect())
    }
}

/// What operators set on the OSDs as a whole, kept in the map's settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OsdSettings {
    /// Flags set with `pontoon osd set`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub flags: BTreeSet<OsdFlag>,
    /// Hosts in maintenance: their OSDs are not marked out while down
    /// (`noout` for those OSDs only).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub maintenance_hosts: BTreeSet<String>,
    /// Destroyed OSDs: their data is gone, their ids (and place) wait for
    /// a replacement drive (`pontoon osd replace`). Their daemons may not
    /// start, and the manager never marks them in.
    #[serde(
        default,
        skip_serializing_if = "BTreeSet::is_empty",
        with = "osd_id_set"
    )]
    pub destroyed: BTreeSet<OsdId>,
    /// Seconds an OSD may be down before the manager marks it out; `None`:
    /// not set, each manager uses its own `--out-after` (default
    /// [`DEFAULT_OUT_AFTER_SECS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_after_secs: Option<u64>,
    /// The manager marks a down OSD out only while at least this fraction
    /// of the OSDs (destroyed ones not counted) is in, counted before
    /// marking it, as Ceph's `mon_osd_min_in_ratio`.
    #[serde(default = "default_min_in_ratio")]
    pub min_in_ratio: f64,
    /// Objects each OSD shard recovers (or backfills) at once.
    #[serde(default = "default_recovery_max_active")]
    pub recovery_max_active: u32,
    /// Pause after each object a PG's background recovery copies, in
    /// milliseconds (0: none), to spare client I/O.
    #[serde(default)]
    pub recovery_sleep_ms: u64,
}

fn default_min_in_ratio() -> f64 {
    DEFAULT_MIN_IN_RATIO
}

fn default_recovery_max_active() -> u32 {
    DEFAULT_RECOVERY_MAX_ACTIVE
}

impl Default for OsdSettings {
    fn default() -> Self {
        Self {
            flags: BTreeSet::new(),
            maintenance_hosts: BTreeSet::new(),
            destroyed: BTreeSet::new(),
            out_after_secs: None,
            min_in_ratio: DEFAULT_MIN_IN_RATIO,
            recovery_max_active: DEFAULT_RECOVERY_MAX_ACTIVE,
            recovery_sleep_ms: 0,
        }
    }
}

impl PartialEq for OsdSettings {
    fn eq(&self, o: &Self) -> bool {
        self.flags == o.flags
            && self.maintenance_hosts == o.maintenance_hosts
            && self.destroyed == o.destroyed
            && self.out_after_secs == o.out_after_secs
            && self.min_in_ratio.to_bits() == o.min_in_ratio.to_bits()
            && self.recovery_max_active == o.recovery_max_active
            && self.recovery_sleep_ms == o.recovery_sleep_ms
    }
}

impl Eq for OsdSettings {}

impl OsdSettings {
    /// Whether `flag` is set.
    pub fn has(&self, flag: OsdFlag) -> bool {
        self.flags.contains(&flag)
    }

    /// The out-after in force: the map's, else `fallback` (the manager's own).
    pub fn out_after(&self, fallback: Duration) -> Duration {
        self.out_after_secs.map_or(fallback, Duration::from_secs)
    }

    /// The pause after each recovered object.
    pub fn recovery_sleep(&self) -> Duration {
        Duration::from_millis(self.recovery_sleep_ms)
    }

    /// Checks every value is in range.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_in_ratio.is_finite() && (0.0..=1.0).contains(&self.min_in_ratio)) {
            return Err(format!(
                "min_in_ratio {} is not between 0 and 1",
                self.min_in_ratio
            ));
        }
        if !(1..=MAX_RECOVERY_MAX_ACTIVE).contains(&self.recovery_max_active) {
            return Err(format!(
                "recovery_max_active {} is not between 1 and {MAX_RECOVERY_MAX_ACTIVE}",
                self.recovery_max_active
            ));
        }
        if self.recovery_sleep_ms > MAX_RECOVERY_SLEEP_MS {
            return Err(format!(
                "recovery_sleep {}ms is more than {MAX_RECOVERY_SLEEP_MS}ms",
                self.recovery_sleep_ms
            ));
        }
        if self.out_after_secs.is_some_and(|s| s > MAX_OUT_AFTER_SECS) {
            return Err(format!(
                "out_after is more than {MAX_OUT_AFTER_SECS}s (30 days)"
            ));
        }
        Ok(())
    }
}

/// Why an OSD maintenance command was refused. Each message is one line
/// an operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No OSD has that id.
    #[error("{0} does not exist")]
    NoSuchOsd(OsdId),
    /// The request cannot be done in the cluster's present state.
    #[error("{0}")]
    Refused(String),
    /// Reading or writing the map failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl From<crate::PgMapError> for AdminError {
    fn from(e: crate::PgMapError) -> Self {
        AdminError::Cluster(e.into())
    }
}

fn record(map: &ClusterMap, id: OsdId) -> Result<&OsdRecord, AdminError> {
    map.osds.get(&id).ok_or(AdminError::NoSuchOsd(id))
}

fn refuse(msg: String) -> AdminError {
    AdminError::Refused(msg)
}

/// Lists at most a few PGs, for a message.
fn some_pgs(pgs: &[PgId]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = pgs.iter().take(SHOWN).map(ToString::to_string).collect();
    if pgs.len() > SHOWN {
        names.push("…".into());
    }
    names.join(", ")
}

impl ClusterMap {
    /// Whether `osd` was destroyed and awaits a replacement.
    pub fn is_destroyed(&self, osd: OsdId) -> bool {
        self.settings.osd.destroyed.contains(&osd)
    }

    /// Why the manager must not mark `osd` out, if something forbids it:
    /// the `noout` flag, or its host being in maintenance.
    pub fn noout_reason(&self, osd: OsdId) -> Option<String> {
        let s = &self.settings.osd;
        if s.has(OsdFlag::Noout) {
            return Some("the noout flag is set".into());
        }
        let host = &self.osds.get(&osd)?.host;
        s.maintenance_hosts
            .contains(host)
            .then(|| format!("its host {host} is in maintenance"))
    }

    /// PGs whose up or acting set, or some past interval, names `osd`: the
    /// PGs that may still need what it holds.
    pub fn pgs_referencing(&self, osd: OsdId) -> Vec<PgId> {
        self.pgs
            .values()
            .filter(|p| {
                p.up.contains(&osd)
                    || p.acting.contains(&osd)
                    || p.past_intervals.iter().any(|i| i.acting.contains(&osd))
            })
            .map(|p| p.pg)
            .collect()
    }

    /// Why discarding what `osd` holds could lose or block data, one line
    /// per PG at risk (empty: safe, as Ceph's `safe-to-destroy`): a PG
    /// that names it and has fewer than `min_size` other live members, or
    /// an earlier interval of such a PG that could have taken writes and
    /// has no other member alive.
    pub fn destroy_risks(&self, osd: OsdId) -> Vec<String> {
        let mut out = Vec::new();
        for pg in self.pgs.values() {
            let Some(pool) = self.pools.get(&pg.pg.pool) else {
                continue;
            };
            let min = pool.min_size.max(1) as usize;
            let named = pg.up.contains(&osd) || pg.acting.contains(&osd);
            let pasts: Vec<_> = pg
                .past_intervals
                .iter()
                .filter(|i| i.acting.contains(&osd))
                .collect();
            if !named && pasts.is_empty() {
                continue;
            }
            let live = pg
                .acting
                .iter()
                .filter(|o| **o != osd && self.is_alive(**o))
                .count();
            if live < min {
                out.push(format!(
                    "pg {} has {live} other live copies (min_size {min})",
                    pg.pg
                ));
                continue;
            }
            if let Some(i) = pasts.iter().find(|i| {
                i.acting.len() >= min && !i.acting.iter().any(|o| *o != osd && self.is_alive(*o))
            }) {
                out.push(format!(
                    "pg {}: no other member of its interval {} is up",
                    pg.pg, i.interval
                ));
            }
        }
        out
    }

    /// OSDs in (destroyed ones not counted) and all OSDs (the same), the
    /// two numbers the minimum in ratio compares.
    pub fn in_counts(&self) -> (usize, usize) {
        let counted = self.osds.values().filter(|o| !self.is_destroyed(o.id));
        let (mut in_, mut all) = (0, 0);
        for o in counted {
            all += 1;
            in_ += usize::from(o.in_cluster);
        }
        (in_, all)
    }

    /// The reweight (Ceph's 0–1 override) `weight` stands for: its share
    /// of the device's MiB. `None` when the device size is unknown.
    pub fn reweight_of(o: &OsdRecord) -> Option<f64> {
        let mib = o.device_bytes >> 20;
        (mib > 0).then(|| o.weight as f64 / mib as f64)
    }
}

/// Sets (`on`) or clears a flag. Returns whether it changed.
pub fn set_flag(map: &mut ClusterMap, flag: OsdFlag, on: bool) -> bool {
    let flags = &mut map.settings.osd.flags;
    if on {
        flags.insert(flag)
    } else {
        flags.remove(&flag)
    }
}

/// Puts `host` in maintenance: its OSDs are not marked out while down.
/// Refused for a host no OSD is registered on (a typo would otherwise
/// protect nothing). Returns whether it changed and the host's OSDs.
pub fn enter_maintenance(
    map: &mut ClusterMap,
    host: &str,
) -> Result<(bool, Vec<OsdId>), AdminError> {
    let osds: Vec<OsdId> = map
        .osds
        .values()
        .filter(|o| o.host == host)
        .map(|o| o.id)
        .collect();
    if osds.is_empty() {
        let mut hosts: Vec<&str> = map.osds.values().map(|o| o.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        return Err(refuse(format!(
            "no OSD is registered on host {host:?} (hosts: {})",
            if hosts.is_empty() {
                "none".to_string()
            } else {
                hosts.join(", ")
            }
        )));
    }
    let changed = map.settings.osd.maintenance_hosts.insert(host.to_string());
    Ok((changed, osds))
}

/// Takes `host` out of maintenance; refused if it is not in maintenance.
pub fn exit_maintenance(map: &mut ClusterMap, host: &str) -> Result<(), AdminError> {
    if map.settings.osd.maintenance_hosts.remove(host) {
        Ok(())
    } else {
        Err(refuse(format!("host {host:?} is not in maintenance")))
    }
}

/// Sets `id`'s reweight to `fraction` (Ceph's `osd reweight`, 0 to 1):
/// `weight = fraction × device MiB`, at least 1 unless `fraction` is 0.
/// Recomputes the PG table. Returns the old and new weight.
pub fn reweight(map: &mut ClusterMap, id: OsdId, fraction: f64) -> Result<(u64, u64), AdminError> {
    if !(fraction.is_finite() && (0.0..=1.0).contains(&fraction)) {
        return Err(refuse(format!(
            "reweight {fraction} is not between 0.0 and 1.0"
        )));
    }
    let mib = record(map, id)?.device_bytes >> 20;
    if mib == 0 {
        return Err(refuse(format!(
            "{id} has no device size recorded, so no weight can be derived from it"
        )));
    }
    let mut weight = (fraction * mib as f64).round() as u64;
    if fraction > 0.0 {
        weight = weight.max(1);
    }
    let rec = map.osds.get_mut(&id).ok_or(AdminError::NoSuchOsd(id))?;
    let old = std::mem::replace(&mut rec.weight, weight);
    if old != weight {
        recompute(map)?;
    }
    Ok((old, weight))
}

fn must_be_down(map: &ClusterMap, id: OsdId, what: &str) -> Result<(), AdminError> {
    record(map, id)?;
    if map.is_alive(id) {
        return Err(refuse(format!(
            "{id} is up: stop its daemon before you {what} it"
        )));
    }
    Ok(())
}

fn must_be_safe(map: &ClusterMap, id: OsdId, what: &str) -> Result<(), AdminError> {
    let risks = map.destroy_risks(id);
    if risks.is_empty() {
        return Ok(());
    }
    Err(refuse(format!(
        "{what} {id} could lose data: {}{}; wait until they recover, or pass --yes-i-really-mean-it",
        risks.iter().take(3).cloned().collect::<Vec<_>>().join("; "),
        if risks.len() > 3 {
            format!(" (and {} more PGs)", risks.len() - 3)
        } else {
            String::new()
        }
    )))
}

/// Marks `id` destroyed (Ceph's `osd destroy`): its id and its place in
/// placement (weight, in/out) are kept for a replacement drive
/// ([`prepare_replacement`]), its daemon may not start again. Only a down
/// OSD, and unless `force`, only one whose data is not needed
/// ([`ClusterMap::destroy_risks`]). Returns whether it changed.
pub fn destroy(map: &mut ClusterMap, id: OsdId, force: bool) -> Result<bool, AdminError> {
    must_be_down(map, id, "destroy")?;
    if map.is_destroyed(id) {
        return Ok(false);
    }
    if !force {
        must_be_safe(map, id, "destroying")?;
    }
    map.settings.osd.destroyed.insert(id);
    Ok(true)
}

/// Removes `id` from the map (Ceph's `osd rm`): only a down, out OSD that
/// no PG names any more (not in an up or acting set, nor in an interval
/// peering may still ask). Returns the removed record.
pub fn remove(map: &mut ClusterMap, id: OsdId) -> Result<OsdRecord, AdminError> {
    must_be_down(map, id, "remove")?;
    if record(map, id)?.in_cluster {
        return Err(refuse(format!(
            "{id} is in: mark it out (`pontoon osd out {}`) and wait until its PGs are clean elsewhere",
            id.0
        )));
    }
    let pgs = map.pgs_referencing(id);
    if !pgs.is_empty() {
        return Err(refuse(format!(
            "{id} still appears in {} PGs ({}): wait until they are active+clean without it",
            pgs.len(),
            some_pgs(&pgs)
        )));
    }
    map.settings.osd.destroyed.remove(&id);
    map.osds.remove(&id).ok_or(AdminError::NoSuchOsd(id))
}

/// Removes `id` from the map and from placement in one step (Ceph's `osd
/// purge`): a down OSD, in or out, destroyed or not; unless `force`, only
/// if no PG needs its data ([`ClusterMap::destroy_risks`]). The PG table
/// is recomputed, so its PGs move to other OSDs. The caller deletes its
/// traces outside the map ([`MapStore::remove_osd_traces`]).
pub fn purge(map: &mut ClusterMap, id: OsdId, force: bool) -> Result<OsdRecord, AdminError> {
    must_be_down(map, id, "purge")?;
    if !force {
        must_be_safe(map, id, "purging")?;
    }
    map.settings.osd.destroyed.remove(&id);
    let rec = map.osds.remove(&id).ok_or(AdminError::NoSuchOsd(id))?;
    recompute(map)?;
    Ok(rec)
}

/// Lets a new device take destroyed OSD `id`'s place (Ceph's `osd
/// replace`): clears the destroyed mark and records the new device's size,
/// with the full weight of a fresh drive. The OSD that then starts under
/// `id` is empty and backfill fills it.
pub fn prepare_replacement(
    map: &mut ClusterMap,
    id: OsdId,
    device_bytes: u64,
) -> Result<(), AdminError> {
    record(map, id)?;
    if !map.is_destroyed(id) {
        return Err(refuse(format!(
            "{id} is not destroyed: `pontoon osd destroy {}` it first (a replacement takes over a destroyed OSD's id)",
            id.0
        )));
    }
    if map.is_alive(id) {
        return Err(refuse(format!("{id} is up: stop it first")));
    }
    map.settings.osd.destroyed.remove(&id);
    let rec = map.osds.get_mut(&id).ok_or(AdminError::NoSuchOsd(id))?;
    rec.device_bytes = device_bytes;
    let weight = crate::identity::weight_for_size(device_bytes);
    if rec.weight != weight {
        rec.weight = weight;
        recompute(map)?;
    }
    Ok(())
}

impl MapStore {
    /// Deletes what the cluster keeps of OSD `id` outside the map: its
    /// last report, its rated endurance and its daemon-registry entry
    /// (`osd purge`; the record itself goes with [`purge`]).
    pub async fn remove_osd_traces(&self, id: OsdId) -> Result<(), ClusterError> {
        let rels = [
            keys::report_key(id),
            format!("{}{}", crate::history::ENDURANCE, id.0),
            format!(
                "{}{}.{}",
                crate::daemons::DAEMONS,
                crate::daemons::kind::OSD,
                id.0
            ),
        ];
        for rel in rels {
            let key = self.key(&rel);
            self.run("delete an OSD's traces", |c| {
                let key = key.clone();
                async move { c.kv_client().delete(key, None).await }
            })
            .await?;
        }
        Ok(())
    }

    /// Deletes OSD `id`'s last report (`osd rm`), so health and status do
    /// not keep showing what a removed OSD last said.
    pub async fn remove_osd_report(&self, id: OsdId) -> Result<(), ClusterError> {
        let key = self.key(&keys::report_key(id));
        self.run("delete an OSD report", |c| {
            let key = key.clone();
            async move { c.kv_client().delete(key, None).await }
        })
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FailureDomain, PastInterval, PoolRecord};
    use pontoon_types::{Epoch, PoolId};

    fn osd(id: u32, host: &str) -> OsdRecord {
        OsdRecord {
            id: OsdId(id),
            host: host.into(),
            addrs: vec![std::net::SocketAddr::from((
                [127, 0, 0, 1],
                7000 + id as u16,
            ))],
            weight: 1024,
            device_bytes: 1 << 30,
            in_cluster: true,
            down_since_unix: None,
            reported_down: false,
            full: Default::default(),
        }
    }

    /// Four alive OSDs on two hosts, one pool of 8 PGs × 3 (min_size 2).
    fn cluster() -> ClusterMap {
        let mut m = ClusterMap::new("t");
        for i in 0..4 {
            m.osds
                .insert(OsdId(i), osd(i, if i < 2 { "a" } else { "b" }));
            m.alive.insert(OsdId(i));
        }
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "p".into(),
                size: 3,
                min_size: 2,
                pgs: 8,
                failure_domain: FailureDomain::Osd,
            },
        );
        m.epoch = Epoch(1);
        recompute(&mut m).unwrap();
        m
    }

    /// `f` applied as an update would: at the next epoch.
    fn next<T>(m: &mut ClusterMap, f: impl FnOnce(&mut ClusterMap) -> T) -> T {
        m.epoch = Epoch(m.epoch.0 + 1);
        f(m)
    }

    fn down(m: &mut ClusterMap, id: u32) {
        m.alive.remove(&OsdId(id));
        next(m, |m| recompute(m).unwrap());
    }

    fn refused<T: fmt::Debug>(r: Result<T, AdminError>) -> String {
        match r {
            Err(AdminError::Refused(msg)) => msg,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn flags_parse_print_and_toggle() {
        for f in OsdFlag::ALL {
            assert_eq!(f.as_str().parse::<OsdFlag>().unwrap(), f);
            assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{f}\""));
        }
        assert!("nodown".parse::<OsdFlag>().unwrap_err().contains("noout"));
        let mut m = cluster();
        assert!(set_flag(&mut m, OsdFlag::Noout, true));
        assert!(!set_flag(&mut m, OsdFlag::Noout, true));
        assert!(m.noout_reason(OsdId(3)).unwrap().contains("noout"));
        assert!(set_flag(&mut m, OsdFlag::Noout, false));
        assert!(!set_flag(&mut m, OsdFlag::Noout, false));
        assert_eq!(m.noout_reason(OsdId(3)), None);
    }

    #[test]
    fn settings_round_trip_and_old_maps_read_as_defaults() {
        let mut s = OsdSettings::default();
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            !json.contains("flags") && !json.contains("destroyed"),
            "{json}"
        );
        s.flags.insert(OsdFlag::Norecover);
        s.destroyed.insert(OsdId(7));
        s.maintenance_hosts.insert("h1".into());
        s.out_after_secs = Some(30);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""flags":["norecover"]"#), "{json}");
        assert!(json.contains(r#""destroyed":[7]"#), "{json}");
        assert_eq!(serde_json::from_str::<OsdSettings>(&json).unwrap(), s);
        let old: crate::ClusterSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(old.osd, OsdSettings::default());
        assert_eq!(old.osd.min_in_ratio, 0.75);
        assert_eq!(
            old.osd.out_after(Duration::from_secs(9)),
            Duration::from_secs(9)
        );
        s.min_in_ratio = 1.5;
        assert!(s.validate().unwrap_err().contains("min_in_ratio"));
    }

    #[test]
    fn maintenance_is_per_host_and_refuses_unknown_hosts() {
        let mut m = cluster();
        let (changed, osds) = enter_maintenance(&mut m, "a").unwrap();
        assert!(changed);
        assert_eq!(osds, vec![OsdId(0), OsdId(1)]);
        assert!(!enter_maintenance(&mut m, "a").unwrap().0);
        assert!(m.noout_reason(OsdId(0)).unwrap().contains("host a"));
        assert_eq!(m.noout_reason(OsdId(2)), None);
        let msg = refused(enter_maintenance(&mut m, "c"));
        assert!(msg.contains("hosts: a, b"), "{msg}");
        exit_maintenance(&mut m, "a").unwrap();
        assert!(refused(exit_maintenance(&mut m, "a")).contains("not in maintenance"));
    }

    #[test]
    fn reweight_is_a_fraction_of_the_device() {
        let mut m = cluster();
        let (old, new) = next(&mut m, |m| reweight(m, OsdId(1), 0.5)).unwrap();
        assert_eq!((old, new), (1024, 512));
        assert_eq!(ClusterMap::reweight_of(&m.osds[&OsdId(1)]), Some(0.5));
        assert_eq!(next(&mut m, |m| reweight(m, OsdId(1), 0.0)).unwrap().1, 0);
        assert!(m.pgs.values().all(|p| !p.up.contains(&OsdId(1))));
        assert_eq!(
            next(&mut m, |m| reweight(m, OsdId(1), 1.0)).unwrap().1,
            1024
        );
        assert_eq!(next(&mut m, |m| reweight(m, OsdId(1), 1e-9)).unwrap().1, 1);
        for bad in [1.5, -0.1, f64::NAN] {
            assert!(refused(reweight(&mut m, OsdId(1), bad)).contains("between 0.0 and 1.0"));
        }
        assert!(matches!(
            reweight(&mut m, OsdId(9), 0.5),
            Err(AdminError::NoSuchOsd(OsdId(9)))
        ));
    }

    #[test]
    fn rm_takes_only_a_down_out_osd_no_pg_names() {
        let mut m = cluster();
        assert!(refused(remove(&mut m, OsdId(3))).contains("osd.3 is up"));
        down(&mut m, 3);
        assert!(refused(remove(&mut m, OsdId(3))).contains("osd.3 is in"));
        m.osds.get_mut(&OsdId(3)).unwrap().in_cluster = false;
        next(&mut m, |m| recompute(m).unwrap());
        // Its PGs moved, but their past intervals still name it.
        let msg = refused(remove(&mut m, OsdId(3)));
        assert!(msg.contains("still appears in"), "{msg}");
        for pg in m.pgs.values_mut() {
            pg.past_intervals.clear();
        }
        let rec = remove(&mut m, OsdId(3)).unwrap();
        assert_eq!(rec.id, OsdId(3));
        assert!(!m.osds.contains_key(&OsdId(3)));
        m.validate().unwrap();
        assert!(matches!(
            remove(&mut m, OsdId(3)),
            Err(AdminError::NoSuchOsd(_))
        ));
    }

    #[test]
    fn destroy_keeps_the_id_and_is_refused_when_data_would_be_lost() {
        let mut m = cluster();
        assert!(refused(destroy(&mut m, OsdId(0), false)).contains("stop its daemon"));
        down(&mut m, 0);
        // Every PG keeps at least min_size live copies: safe.
        assert!(m.destroy_risks(OsdId(0)).is_empty());
        assert!(destroy(&mut m, OsdId(0), false).unwrap());
        assert!(!destroy(&mut m, OsdId(0), false).unwrap());
        assert!(m.is_destroyed(OsdId(0)) && m.osds.contains_key(&OsdId(0)));
        assert_eq!(m.in_counts(), (3, 3));
        // A second OSD down leaves some PGs below min_size.
        down(&mut m, 1);
        let risks = m.destroy_risks(OsdId(1));
        assert!(!risks.is_empty());
        assert!(risks[0].contains("min_size 2"), "{risks:?}");
        assert!(refused(destroy(&mut m, OsdId(1), false)).contains("--yes-i-really-mean-it"));
        assert!(destroy(&mut m, OsdId(1), true).unwrap());
    }

    #[test]
    fn a_past_interval_with_no_other_live_member_is_a_risk() {
        let mut m = cluster();
        down(&mut m, 3);
        // A PG served by osd.0 and osd.1 that once had osd.3 and osd.2.
        let pg = *m
            .pgs
            .values()
            .find(|p| p.acting == [OsdId(0), OsdId(1)] || p.acting == [OsdId(1), OsdId(0)])
            .map(|p| &p.pg)
            .expect("a PG on osd.0 and osd.1 whose third member was osd.3");
        m.pgs
            .get_mut(&pg)
            .unwrap()
            .past_intervals
            .push(PastInterval {
                interval: Epoch(1),
                acting: vec![OsdId(3), OsdId(2)],
            });
        assert!(m.destroy_risks(OsdId(3)).is_empty(), "osd.2 is alive");
        m.alive.remove(&OsdId(2));
        let risks = m.destroy_risks(OsdId(3));
        let want = format!(
            "pg {pg}: no other member of its interval {} is up",
            Epoch(1)
        );
        assert!(risks.contains(&want), "{risks:?}");
    }

    #[test]
    fn purge_drops_the_osd_from_placement_in_one_step() {
        let mut m = cluster();
        down(&mut m, 2);
        next(&mut m, |m| destroy(m, OsdId(2), false)).unwrap();
        let rec = next(&mut m, |m| purge(m, OsdId(2), false)).unwrap();
        assert_eq!(rec.host, "b");
        assert!(!m.is_destroyed(OsdId(2)));
        assert!(m.pgs.values().all(|p| !p.up.contains(&OsdId(2))));
        m.validate().unwrap();
    }

    #[test]
    fn a_replacement_takes_a_destroyed_id_only() {
        let mut m = cluster();
        down(&mut m, 1);
        assert!(refused(prepare_replacement(&mut m, OsdId(1), 2 << 30)).contains("not destroyed"));
        next(&mut m, |m| destroy(m, OsdId(1), false)).unwrap();
        next(&mut m, |m| prepare_replacement(m, OsdId(1), 2 << 30)).unwrap();
        let rec = &m.osds[&OsdId(1)];
        assert!(!m.is_destroyed(OsdId(1)));
        assert_eq!((rec.device_bytes, rec.weight), (2 << 30, 2048));
        assert!(matches!(
            prepare_replacement(&mut m, OsdId(8), 1),
            Err(AdminError::NoSuchOsd(_))
        ));
    }
}
