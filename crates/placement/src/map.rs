//! The prebuilt placement map and the per-PG ranking.

use std::collections::BTreeMap;

use pontoon_types::OsdId;

use crate::hash::{ln_unit, ln_unit_upper_bound, osd_salt, pg_seed, unit_k};
use crate::{FailureDomain, MAX_POOL_SIZE, OsdSpec, PlacementError, PoolRule};

/// A candidate's draw is computed in full only if the cheap upper bound
/// `(u - 1) / w` could reach the draw it has to beat. The bound is compared
/// with this much relative slack — vastly more than the rounding error of
/// either side — so skipping never changes a result.
const BOUND_SLACK: f64 = 1.0 + 1e-9;

/// One host that has at least one eligible OSD.
#[derive(Clone, Debug)]
struct Host {
    /// The host's name as given in [`OsdSpec::host`].
    name: String,
    /// Its eligible OSDs are the map slots `start..end`.
    start: u32,
    end: u32,
}

/// The OSD list preprocessed for placing many PGs: eligible OSDs grouped by
/// host, with each OSD's hash salt and reciprocal weight computed once.
///
/// Build one per cluster-map epoch and place every PG of every pool with it.
/// Results do not depend on the order of the OSD list.
#[derive(Clone, Debug)]
pub struct PlacementMap {
    /// Every OSD given, sorted by id, eligible or not.
    osds: Vec<OsdSpec>,
    /// Eligible OSDs in slot order: hosts by name, ids ascending in a host.
    ids: Vec<OsdId>,
    /// [`osd_salt`] of each slot.
    salts: Vec<u64>,
    /// `1 / weight` of each slot.
    inv_weights: Vec<f64>,
    /// Weight of each slot.
    weights: Vec<u64>,
    /// Index into `hosts` of each slot.
    host_of: Vec<u32>,
    /// Hosts with at least one eligible OSD, sorted by name.
    hosts: Vec<Host>,
    /// Slot of each eligible OSD.
    slot_by_id: BTreeMap<OsdId, u32>,
    /// Sum of the eligible OSDs' weights.
    total_weight: u128,
}

/// The best `k` candidates seen so far, best first. Ordered by draw, then
/// by lower OSD id, so ties (never seen in practice) are still decided.
struct TopK {
    k: usize,
    len: usize,
    draws: [f64; MAX_POOL_SIZE as usize],
    ids: [u32; MAX_POOL_SIZE as usize],
    slots: [u32; MAX_POOL_SIZE as usize],
}

impl TopK {
    fn new(k: usize) -> Self {
        assert!((1..=MAX_POOL_SIZE as usize).contains(&k));
        Self {
            k,
            len: 0,
            draws: [0.0; MAX_POOL_SIZE as usize],
            ids: [0; MAX_POOL_SIZE as usize],
            slots: [0; MAX_POOL_SIZE as usize],
        }
    }

    /// The draw a newcomer has to reach, once the list is full.
    #[inline]
    fn threshold(&self) -> Option<f64> {
        (self.len == self.k).then(|| self.draws[self.k - 1])
    }

    /// Whether (draw, id) ranks above entry `i`.
    #[inline]
    fn beats(&self, draw: f64, id: u32, i: usize) -> bool {
        draw > self.draws[i] || (draw == self.draws[i] && id < self.ids[i])
    }

    #[inline]
    fn offer(&mut self, draw: f64, id: u32, slot: u32) {
        if self.len == self.k && !self.beats(draw, id, self.k - 1) {
            return;
        }
        // Find the insertion point, shifting worse entries down by one.
        let mut i = if self.len == self.k {
            self.k - 1
        } else {
            self.len
        };
        while i > 0 && self.beats(draw, id, i - 1) {
            self.draws[i] = self.draws[i - 1];
            self.ids[i] = self.ids[i - 1];
            self.slots[i] = self.slots[i - 1];
            i -= 1;
        }
        self.draws[i] = draw;
        self.ids[i] = id;
        self.slots[i] = slot;
        if self.len < self.k {
            self.len += 1;
        }
    }
}

/// Whether a candidate whose draw is at most `bound` can be skipped because
/// it cannot reach `to_beat`.
#[inline]
fn hopeless(bound: f64, to_beat: Option<f64>) -> bool {
    match to_beat {
        Some(t) => bound < t * BOUND_SLACK,
        None => false,
    }
}

impl PlacementMap {
    /// Preprocesses an OSD list. Fails on an empty list or a duplicate id;
    /// a list whose OSDs are all out or weightless is accepted (placing on
    /// it fails with [`PlacementError::NoEligibleOsd`]).
    pub fn new(osds: &[OsdSpec]) -> Result<Self, PlacementError> {
        if osds.is_empty() {
            return Err(PlacementError::EmptyCluster);
        }
        if u32::try_from(osds.len()).is_err() {
            return Err(PlacementError::TooManyOsds(osds.len()));
        }
        let mut all = osds.to_vec();
        all.sort_by_key(|o| o.id);
        if let Some(pair) = all.windows(2).find(|p| p[0].id == p[1].id) {
            return Err(PlacementError::DuplicateOsd(pair[0].id));
        }

        // Group eligible OSDs by host name; BTreeMaps give name order and,
        // since `all` is sorted, ascending ids inside each host.
        let mut by_host: BTreeMap<&str, Vec<&OsdSpec>> = BTreeMap::new();
        for o in all.iter().filter(|o| o.is_eligible()) {
            by_host.entry(o.host.as_str()).or_default().push(o);
        }

        let eligible = by_host.values().map(Vec::len).sum::<usize>();
        let mut map = Self {
            ids: Vec::with_capacity(eligible),
            salts: Vec::with_capacity(eligible),
            inv_weights: Vec::with_capacity(eligible),
            weights: Vec::with_capacity(eligible),
            host_of: Vec::with_capacity(eligible),
            hosts: Vec::with_capacity(by_host.len()),
            slot_by_id: BTreeMap::new(),
            total_weight: 0,
            osds: Vec::new(),
        };
        for (name, members) in &by_host {
            let host_index = to_u32(map.hosts.len());
            let start = to_u32(map.ids.len());
            for o in members {
                debug_assert!(o.weight > 0 && o.in_cluster);
                map.slot_by_id.insert(o.id, to_u32(map.ids.len()));
                map.ids.push(o.id);
                map.salts.push(osd_salt(o.id.0));
                map.inv_weights.push(1.0 / o.weight as f64);
                map.weights.push(o.weight);
                map.host_of.push(host_index);
                map.total_weight += u128::from(o.weight);
            }
            map.hosts.push(Host {
                name: (*name).to_owned(),
                start,
                end: to_u32(map.ids.len()),
            });
        }
        map.osds = all;
        Ok(map)
    }

    /// Every OSD the map was built from, sorted by id.
    pub fn osds(&self) -> &[OsdSpec] {
        &self.osds
    }

    /// The OSD with this id, if the map has it.
    pub fn osd(&self, id: OsdId) -> Option<&OsdSpec> {
        self.osds
            .binary_search_by_key(&id, |o| o.id)
            .ok()
            .map(|i| &self.osds[i])
    }

    /// The OSDs that can receive replicas (in, weight > 0), sorted by id.
    pub fn eligible_osds(&self) -> impl Iterator<Item = &OsdSpec> {
        self.osds.iter().filter(|o| o.is_eligible())
    }

    /// How many OSDs can receive replicas.
    pub fn eligible_count(&self) -> usize {
        self.ids.len()
    }

    /// How many hosts have at least one OSD that can receive replicas.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// Names of the hosts with at least one OSD that can receive replicas,
    /// sorted.
    pub fn host_names(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().map(|h| h.name.as_str())
    }

    /// Sum of the weights of the OSDs that can receive replicas.
    pub fn total_weight(&self) -> u128 {
        self.total_weight
    }

    /// How many failure domains of this kind can receive replicas: the
    /// most replicas a PG can get.
    pub fn domain_count(&self, domain: FailureDomain) -> usize {
        match domain {
            FailureDomain::Osd => self.ids.len(),
            FailureDomain::Host => self.hosts.len(),
        }
    }

    /// Each eligible OSD's expected share of a PG's replicas under `rule`,
    /// by slot: weight-proportional, except that a failure domain holds at
    /// most one replica of a PG, so a domain whose weight would earn it
    /// more is capped at one and the rest is shared by weight among the
    /// others (water-filling). The shares add up to the replicas a PG gets,
    /// `min(size, domains)`. With hosts of unequal weight under a host
    /// rule, plain weight shares are targets no placement can reach.
    pub(crate) fn replica_shares(&self, rule: &PoolRule) -> Vec<f64> {
        let domain_of = |slot: usize| match rule.failure_domain {
            FailureDomain::Osd => slot,
            FailureDomain::Host => self.host_of[slot] as usize,
        };
        let domains = self.domain_count(rule.failure_domain);
        let mut weight = vec![0.0f64; domains];
        for (slot, w) in self.weights.iter().enumerate() {
            weight[domain_of(slot)] += *w as f64;
        }
        let mut share = vec![0.0f64; domains];
        let mut open: Vec<usize> = (0..domains).filter(|d| weight[*d] > 0.0).collect();
        let mut left = (rule.size as usize).min(open.len()) as f64;
        // Capping every domain over one at once is exact: removing a
        // domain that earned more than one replica raises the others'.
        while left > 0.0 && !open.is_empty() {
            let total: f64 = open.iter().map(|d| weight[*d]).sum();
            let (full, rest): (Vec<usize>, Vec<usize>) = open
                .iter()
                .partition(|d| left * weight[**d] / total > 1.0 + 1e-12);
            if full.is_empty() {
                for d in &rest {
                    share[*d] = left * weight[*d] / total;
                }
                break;
            }
            for d in &full {
                share[*d] = 1.0;
            }
            left -= full.len() as f64;
            open = rest;
        }
        (0..self.weights.len())
            .map(|slot| {
                let d = domain_of(slot);
                share[d] * self.weights[slot] as f64 / weight[d]
            })
            .collect()
    }

    /// Each eligible OSD's expected replica count for `pgs` PGs under
    /// `rule` (see [`replica_shares`](Self::replica_shares)): what the
    /// balancer aims for and `balancer eval` scores against.
    pub fn replica_targets(&self, rule: &PoolRule, pgs: u64) -> Vec<(OsdId, f64)> {
        self.replica_shares(rule)
            .into_iter()
            .enumerate()
            .map(|(slot, share)| (self.ids[slot], share * pgs as f64))
            .collect()
    }

    /// The acting set of PG `pg_index` of the pool: distinct OSDs, at most
    /// one per failure domain, best draw (the primary) first. It has
    /// `rule.size` entries unless fewer failure domains can take data.
    pub fn place(&self, rule: &PoolRule, pg_index: u32) -> Result<Vec<OsdId>, PlacementError> {
        let mut out = Vec::with_capacity(rule.size.min(MAX_POOL_SIZE) as usize);
        self.place_into(rule, pg_index, &mut out)?;
        Ok(out)
    }

    /// [`place`](Self::place) into a caller's buffer (cleared first), to
    /// place many PGs without allocating.
    pub fn place_into(
        &self,
        rule: &PoolRule,
        pg_index: u32,
        out: &mut Vec<OsdId>,
    ) -> Result<(), PlacementError> {
        out.clear();
        let top = self.rank(rule, pg_index)?;
        out.extend(top.slots[..top.len].iter().map(|&s| self.ids[s as usize]));
        Ok(())
    }

    /// Acting sets of PGs `0..pg_count`: element `i` is PG `i`'s.
    pub fn place_pool(
        &self,
        rule: &PoolRule,
        pg_count: u32,
    ) -> Result<Vec<Vec<OsdId>>, PlacementError> {
        self.check_rule(rule)?;
        (0..pg_count).map(|pg| self.place(rule, pg)).collect()
    }

    /// Rejects rules no PG of the pool could be placed with.
    pub(crate) fn check_rule(&self, rule: &PoolRule) -> Result<(), PlacementError> {
        if rule.size == 0 {
            return Err(PlacementError::ZeroSize { pool: rule.pool });
        }
        if rule.size > MAX_POOL_SIZE {
            return Err(PlacementError::SizeTooLarge {
                pool: rule.pool,
                size: rule.size,
            });
        }
        if self.ids.is_empty() {
            return Err(PlacementError::NoEligibleOsd);
        }
        Ok(())
    }

    /// The straw2 ranking of one PG: the winning slots, best first.
    fn rank(&self, rule: &PoolRule, pg_index: u32) -> Result<TopK, PlacementError> {
        self.check_rule(rule)?;
        let want = (rule.size as usize).min(self.domain_count(rule.failure_domain));
        let mut top = TopK::new(want);
        let seed = pg_seed(rule.pool, pg_index);
        match rule.failure_domain {
            FailureDomain::Osd => {
                for slot in 0..self.ids.len() {
                    let k = unit_k(seed, self.salts[slot]);
                    let iw = self.inv_weights[slot];
                    if hopeless(ln_unit_upper_bound(k) * iw, top.threshold()) {
                        continue;
                    }
                    top.offer(ln_unit(k) * iw, self.ids[slot].0, to_u32(slot));
                }
            }
            FailureDomain::Host => {
                for host in &self.hosts {
                    // The host's draw is its best OSD's draw. Members are in
                    // ascending id order, so a strict `>` keeps the lower id
                    // on a tie.
                    let mut best: Option<(f64, u32)> = None;
                    for slot in host.start..host.end {
                        let s = slot as usize;
                        let k = unit_k(seed, self.salts[s]);
                        let iw = self.inv_weights[s];
                        let to_beat = match (best, top.threshold()) {
                            (Some((b, _)), Some(t)) => Some(b.max(t)),
                            (Some((b, _)), None) => Some(b),
                            (None, t) => t,
                        };
                        if hopeless(ln_unit_upper_bound(k) * iw, to_beat) {
                            continue;
                        }
                        let draw = ln_unit(k) * iw;
                        if best.is_none_or(|(b, _)| draw > b) {
                            best = Some((draw, slot));
                        }
                    }
                    if let Some((draw, slot)) = best {
                        top.offer(draw, self.ids[slot as usize].0, slot);
                    }
                }
            }
        }
        debug_assert_eq!(top.len, top.k);
        Ok(top)
    }

    // ---- slot-level accessors for the balancer and statistics ----

    /// Slot of an eligible OSD.
    pub(crate) fn slot_of(&self, id: OsdId) -> Option<u32> {
        self.slot_by_id.get(&id).copied()
    }

    /// OSD id in a slot.
    pub(crate) fn id_at(&self, slot: u32) -> OsdId {
        self.ids[slot as usize]
    }

    /// Host index of a slot.
    pub(crate) fn host_at(&self, slot: u32) -> u32 {
        self.host_of[slot as usize]
    }
}

/// Converts a slot or host count to `u32`. [`PlacementMap::new`] rejects
/// lists longer than `u32::MAX`, so every count fits.
fn to_u32(n: usize) -> u32 {
    debug_assert!(u32::try_from(n).is_ok());
    n as u32
}
