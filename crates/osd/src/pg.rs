//! A placement group's state on one shard: its interval, role, peering
//! phase, fencing promise and the objects some member still lacks.

use std::collections::BTreeMap;

use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::Shared;
use pontoon_types::{Epoch, ObjectId, OsdId, PgId, Version};

use crate::map::{PgEntry, PoolParams, RecoveryControl};

/// Where a PG is in its life on this shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Primary, gathering versions from current and past members.
    Peering,
    /// Primary, serving I/O (possibly degraded or recovering).
    Active,
    /// Primary, but some earlier interval has no reachable member: I/O is
    /// blocked rather than risk serving stale data.
    Incomplete(String),
    /// A non-primary member of the acting set.
    Replica,
    /// Not in the acting set: holds data only for peering queries.
    Stray,
}

/// An object the authoritative version of which some acting member lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// Authoritative version.
    pub version: Version,
    /// OSDs known to hold exactly that version.
    pub holders: Vec<OsdId>,
    /// Acting members that lack it.
    pub stale: Vec<OsdId>,
}

/// Resolves when a PG's life on a shard ends: its state is dropped
/// because a new interval began or the PG was removed. Work waiting on
/// other OSDs for an interval races it, so it stops as soon as its
/// interval is over instead of waiting out a timeout.
pub struct IntervalEnd {
    _alive: oneshot::Sender<()>,
    ended: Shared<oneshot::Receiver<()>>,
}

impl IntervalEnd {
    fn new() -> Self {
        let (tx, rx) = oneshot::channel();
        Self {
            _alive: tx,
            ended: rx.shared(),
        }
    }

    /// A future that completes when this life ends.
    pub fn ended(&self) -> Shared<oneshot::Receiver<()>> {
        self.ended.clone()
    }
}

impl std::fmt::Debug for IntervalEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IntervalEnd")
    }
}

/// One PG on one shard.
#[derive(Debug)]
pub struct Pg {
    /// Which PG.
    pub id: PgId,
    /// The map's entry at the interval this state belongs to.
    pub entry: PgEntry,
    /// The pool's parameters.
    pub params: PoolParams,
    /// This OSD.
    pub me: OsdId,
    /// Life phase.
    pub phase: Phase,
    /// Highest interval this OSD promised a primary (by answering its peering
    /// query); operations of earlier intervals are refused from then on.
    pub promised: Epoch,
    /// Last version counter handed out in this interval (primary).
    pub seq: u64,
    /// Objects to recover, by id.
    pub missing: BTreeMap<ObjectId, Missing>,
    /// Objects recovered in this interval.
    pub recovered: u64,
    /// Objects in the PG as the primary knows them: the authoritative set
    /// found by peering, plus the objects created since.
    pub objects: u64,
    /// A background recovery task runs for this interval.
    pub recovering: bool,
    /// Why recovery waits (an acting member is too full to take data).
    pub waiting: Option<String>,
    /// The flag background recovery is paused by, if it is.
    pub paused: Option<Paused>,
    /// Objects whose last recovery attempt in this interval failed, and
    /// why: noted only for missing objects, dropped with them (see
    /// [`Pg::no_longer_missing`]), and shown, for those still missing, in
    /// the PG's status so that a recovery that keeps failing says why.
    pub failing: BTreeMap<ObjectId, String>,
    /// Bumped whenever the interval changes, so tasks of an older one stop.
    pub generation: u64,
    /// Fires when this life of the PG ends.
    pub end: IntervalEnd,
}

impl Pg {
    /// `oid` no longer needs recovery (recovered, or its volume is gone):
    /// drops it from the missing set and its failure, if one was noted.
    pub fn no_longer_missing(&mut self, oid: &ObjectId) {
        self.missing.remove(oid);
        self.failing.remove(oid);
    }

    /// What keeps failing in recovery, in words, if anything does.
    pub fn failing_note(&self) -> Option<String> {
        let (oid, why) = self
            .failing
            .iter()
            .find(|(o, _)| self.missing.contains_key(o))?;
        let n = self
            .failing
            .keys()
            .filter(|o| self.missing.contains_key(o))
            .count();
        let more = match n {
            1 => String::new(),
            n => format!(" (and {} more objects)", n - 1),
        };
        Some(format!("recovery of {oid} fails: {why}{more}"))
    }

    /// A PG entering interval `entry.interval`.
    pub fn new(id: PgId, entry: PgEntry, params: PoolParams, me: OsdId, generation: u64) -> Self {
        let phase = phase_for(&entry, me);
        Self {
            id,
            entry,
            params,
            me,
            phase,
            promised: Epoch(0),
            seq: 0,
            missing: BTreeMap::new(),
            recovered: 0,
            objects: 0,
            recovering: false,
            waiting: None,
            paused: None,
            failing: BTreeMap::new(),
            generation,
            end: IntervalEnd::new(),
        }
    }

    /// The interval this shard treats as current: the map's, or a newer one
    /// a primary already peered with us in.
    pub fn known_interval(&self) -> Epoch {
        self.entry.interval.max(self.promised)
    }

    /// Whether scrub may compare the PG's copies now: this shard is its
    /// active primary and nothing is left to recover.
    pub fn scrubbable(&self) -> bool {
        self.is_primary() && self.phase == Phase::Active && self.missing.is_empty()
    }

    /// Whether this OSD promised a newer interval's primary to refuse
    /// operations of the map's interval (its map is behind).
    pub fn overtaken(&self) -> bool {
        self.promised > self.entry.interval
    }

    /// Whether this OSD is the primary.
    pub fn is_primary(&self) -> bool {
        self.entry.acting.first() == Some(&self.me)
    }

    /// Members other than this OSD.
    pub fn others(&self) -> impl Iterator<Item = OsdId> + '_ {
        self.entry.acting.iter().copied().filter(|o| *o != self.me)
    }

    /// Objects with fewer up-to-date copies than the pool's size: all of
    /// them while the acting set is short of members, else those some
    /// member still lacks.
    pub fn degraded(&self) -> u64 {
        let missing = self.missing.len() as u64;
        if self.undersized() {
            self.objects.max(missing)
        } else {
            missing
        }
    }

    /// What pauses this PG's background recovery under `rc`, if anything:
    /// `norecover` always; `norebalance` when the PG is only misplaced
    /// (full acting set, and every missing object held by at least `size`
    /// OSDs, the stale new members aside).
    pub fn pause_for(&self, rc: &RecoveryControl) -> Option<Paused> {
        if self.missing.is_empty() {
            return None;
        }
        if rc.norecover {
            return Some(Paused::Norecover);
        }
        let size = self.params.size as usize;
        let misplaced =
            !self.undersized() && self.missing.values().all(|m| m.holders.len() >= size);
        (rc.norebalance && misplaced).then_some(Paused::Norebalance)
    }

    /// Fewer acting members than the pool's size.
    fn undersized(&self) -> bool {
        (self.entry.acting.len() as u32) < self.params.size
    }

    /// A short state name in the operators' vocabulary.
    pub fn state_name(&self) -> String {
        match &self.phase {
            Phase::Peering => "peering".into(),
            Phase::Incomplete(_) => "incomplete".into(),
            Phase::Replica => "replica".into(),
            Phase::Stray => "stray".into(),
            Phase::Active if (self.entry.acting.len() as u32) < self.params.min_size => {
                "inactive+undersized+degraded".into()
            }
            Phase::Active => {
                let mut s = String::from("active");
                if self.undersized() {
                    s.push_str("+undersized+degraded");
                } else if !self.missing.is_empty() {
                    s.push_str("+degraded");
                }
                match self.paused {
                    _ if self.missing.is_empty() => {}
                    Some(Paused::Norecover) => s.push_str("+recovery_wait"),
                    Some(Paused::Norebalance) => s = "active+remapped+backfill_wait".into(),
                    None => s.push_str("+recovering"),
                }
                if !self.undersized() && self.missing.is_empty() {
                    s.push_str("+clean");
                }
                s
            }
        }
    }
}

/// A flag that pauses a PG's background recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paused {
    /// `norecover` is set.
    Norecover,
    /// `norebalance` is set and the PG is only misplaced.
    Norebalance,
}

impl Paused {
    /// Why, in words, for the PG's report.
    pub fn note(self) -> &'static str {
        match self {
            Paused::Norecover => "recovery paused: the norecover flag is set",
            Paused::Norebalance => {
                "backfill paused: the norebalance flag is set and every object still has all its copies"
            }
        }
    }
}

/// The phase a PG starts an interval in on `me`.
pub fn phase_for(entry: &PgEntry, me: OsdId) -> Phase {
    match entry.acting.iter().position(|o| *o == me) {
        Some(0) => Phase::Peering,
        Some(_) => Phase::Replica,
        None => Phase::Stray,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_types::PoolId;

    fn active(members: u32) -> Pg {
        let entry = PgEntry {
            interval: Epoch(5),
            acting: (0..members).map(OsdId).collect(),
            up: Vec::new(),
            past: Vec::new(),
        };
        let params = PoolParams {
            size: 3,
            min_size: 2,
            pgs: 8,
        };
        let mut pg = Pg::new(
            PgId {
                pool: PoolId(1),
                index: 0,
            },
            entry,
            params,
            OsdId(0),
            1,
        );
        pg.phase = Phase::Active;
        pg
    }

    #[test]
    fn state_names_say_whether_io_is_served() {
        assert_eq!(active(3).state_name(), "active+clean");
        assert_eq!(active(2).state_name(), "active+undersized+degraded");
        assert_eq!(active(1).state_name(), "inactive+undersized+degraded");
    }

    #[test]
    fn flags_pause_recovery_of_the_pgs_they_name() {
        let missing = |holders: &[u32]| Missing {
            version: Version::new(5, 1),
            holders: holders.iter().copied().map(OsdId).collect(),
            stale: vec![OsdId(2)],
        };
        let norecover = RecoveryControl {
            norecover: true,
            ..Default::default()
        };
        let norebalance = RecoveryControl {
            norebalance: true,
            ..Default::default()
        };
        let mut pg = active(3);
        assert_eq!(pg.pause_for(&norecover), None, "nothing to recover");
        // Every copy still exists (osd.3 held it before): only misplaced.
        pg.missing.insert(ObjectId::new(1, 4), missing(&[0, 1, 3]));
        assert_eq!(pg.pause_for(&RecoveryControl::default()), None);
        assert_eq!(pg.pause_for(&norecover), Some(Paused::Norecover));
        assert_eq!(pg.pause_for(&norebalance), Some(Paused::Norebalance));
        pg.paused = Some(Paused::Norebalance);
        assert_eq!(pg.state_name(), "active+remapped+backfill_wait");
        pg.paused = Some(Paused::Norecover);
        assert_eq!(pg.state_name(), "active+degraded+recovery_wait");
        pg.paused = None;
        assert_eq!(pg.state_name(), "active+degraded+recovering");
        // One object short of copies: degraded, norebalance does not hold it.
        pg.missing.insert(ObjectId::new(1, 5), missing(&[0, 1]));
        assert_eq!(pg.pause_for(&norebalance), None);
        // Nor an undersized PG.
        let mut short = active(2);
        short
            .missing
            .insert(ObjectId::new(1, 4), missing(&[0, 1, 3]));
        assert_eq!(short.pause_for(&norebalance), None);
        assert_eq!(short.pause_for(&norecover), Some(Paused::Norecover));
    }

    #[test]
    fn every_object_is_degraded_while_members_are_missing() {
        let mut full = active(3);
        full.objects = 10;
        assert_eq!(full.degraded(), 0);
        full.missing.insert(
            ObjectId::new(1, 4),
            Missing {
                version: Version::new(5, 1),
                holders: vec![OsdId(0)],
                stale: vec![OsdId(2)],
            },
        );
        assert_eq!(full.degraded(), 1);
        let mut short = active(2);
        short.objects = 10;
        assert_eq!(short.degraded(), 10);
    }
}
