//! The OSD's life cycle: one state machine that does no I/O.
//!
//! It takes what happened ([`Input`]: a map, a lease granted or lapsed, a
//! tick, a shard in trouble, a stop) and says what to do ([`Action`]:
//! take or give up the lease, hand the map to the shards, move the shards'
//! serving deadline, report, exit). The daemon runs it against etcd and the
//! simulator against its own map and leases, both through the same driver
//! ([`crate::control`]), so the rules below exist once.
//!
//! The rules, each a guard against serving data a newer interval has
//! overtaken:
//! - a life that may follow another one still counted in some PG's
//!   current interval waits, without a lease, until the map shows it in
//!   no acting set: the primaries of those intervals peered with the old
//!   life and would not notice what this one lost. It never falls back to
//!   its old intervals, however long that takes;
//! - shards serve only until the lease's validity by the local clock ends
//!   (the deadline travels with the lease, so no wait on etcd or on a
//!   report can delay fencing);
//! - a (new) lease makes the OSD serve again only once the shards hold a
//!   map at least as new as etcd's epoch when the lease was granted: a map
//!   the manager changed while the OSD was fenced is seen first;
//! - held down by the manager on its peers' reports, the OSD fences at
//!   once and gives its lease up, so the manager can move its PGs without
//!   waiting out the lease; it takes no new one while held down;
//! - a failed store or a shard that stopped answering ends the process:
//!   the OSD fences, gives its lease up and exits with the reason.

use std::time::Instant;

use pontoon_types::Epoch;

/// Where an OSD is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// No lease, not serving, maps not applied. A previous life of this
    /// OSD may still be a member of some PG's current interval. Moves on
    /// (to [`State::Fenced`], taking a lease) when a map shows the OSD in
    /// no acting set.
    WaitingSeenDown,
    /// Not serving. Either no valid lease (one is asked for on every tick,
    /// unless `held_down`), or a lease granted at map epoch `awaiting`
    /// that the shards' map has not reached yet. Moves to
    /// [`State::Live`] once both hold.
    Fenced {
        /// The lease's grant epoch, while the map lags behind it.
        awaiting: Option<Epoch>,
        /// Why the OSD is not serving, for the log.
        why: String,
    },
    /// Serving until `valid_until` (the lease's validity by the local
    /// clock, also the shards' deadline), with a map at least as new as
    /// the lease's grant epoch.
    Live {
        /// End of the lease's validity.
        valid_until: Instant,
    },
    /// A shard failed; the lease is given up and the process exits.
    Failed {
        /// What failed.
        why: String,
    },
    /// Stopping on request; the lease is given up and the process exits.
    Stopping,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The newest map: its epoch, whether this OSD is in some PG's acting
    /// set, and whether the manager holds it down on its peers' reports.
    Map {
        /// Map epoch.
        epoch: Epoch,
        /// A member of some current interval.
        in_acting: bool,
        /// Held down by the manager.
        held_down: bool,
    },
    /// A lease was granted; `epoch` is etcd's map epoch read after it.
    LeaseGranted {
        /// etcd's epoch after the grant.
        epoch: Epoch,
        /// Validity of the new lease.
        valid_until: Instant,
    },
    /// Asking for a lease failed.
    LeaseRefused {
        /// Why.
        why: String,
    },
    /// The held lease's validity now (`None`: none held, or it was lost).
    Lease {
        /// End of validity.
        valid_until: Option<Instant>,
    },
    /// Time passes.
    Tick {
        /// Now.
        now: Instant,
    },
    /// A shard's store failed or the shard stopped answering.
    ShardTrouble {
        /// What is wrong, naming the shard.
        why: String,
    },
    /// The operator asked the OSD to stop.
    Stop,
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Revoke the lease a previous life of this OSD left behind, so the
    /// manager sees that life down at once (it is dead: this process holds
    /// the device).
    ClearPreviousLife,
    /// Ask for a new lease (dropping any held) and answer with
    /// [`Input::LeaseGranted`] or [`Input::LeaseRefused`].
    TakeLease,
    /// Revoke the lease now.
    GiveUpLease,
    /// Hand the newest map to the shards.
    ApplyMap,
    /// Shards serve until this instant; `None`: refuse everything now.
    Deadline(Option<Instant>),
    /// Collect the shards' states and report them.
    Report,
    /// End the process.
    Exit {
        /// Why, in one line.
        why: String,
    },
}

/// The life cycle of one OSD process.
#[derive(Debug)]
pub struct Life {
    state: State,
    /// Newest map epoch seen, and what it said of this OSD.
    map: Option<(Epoch, bool, bool)>,
    /// Newest epoch handed to the shards.
    applied: Option<Epoch>,
    /// Validity of the held lease.
    lease: Option<Instant>,
}

impl Life {
    /// A new process. `may_follow_a_life` is false only for an OSD that
    /// has never run anywhere (nothing can count it as a member yet, or
    /// the simulator's first boot).
    pub fn new(may_follow_a_life: bool) -> Self {
        let state = if may_follow_a_life {
            State::WaitingSeenDown
        } else {
            State::Fenced {
                awaiting: None,
                why: "starting".into(),
            }
        };
        Life {
            state,
            map: None,
            applied: None,
            lease: None,
        }
    }

    /// The current state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Whether the shards serve I/O now.
    pub fn is_live(&self) -> bool {
        matches!(self.state, State::Live { .. })
    }

    /// What to do first.
    pub fn start(&self) -> Vec<Action> {
        match self.state {
            State::WaitingSeenDown => vec![Action::ClearPreviousLife],
            _ => vec![Action::TakeLease],
        }
    }

    /// Takes one input; returns what to do, in order.
    pub fn step(&mut self, input: Input) -> Vec<Action> {
        if matches!(self.state, State::Failed { .. } | State::Stopping) {
            return Vec::new();
        }
        match input {
            Input::Map {
                epoch,
                in_acting,
                held_down,
            } => self.on_map(epoch, in_acting, held_down),
            Input::LeaseGranted { epoch, valid_until } => {
                self.lease = Some(valid_until);
                if self.held_down() {
                    return vec![Action::GiveUpLease];
                }
                self.state = State::Fenced {
                    awaiting: Some(epoch),
                    why: format!("lease granted at epoch {epoch}"),
                };
                self.try_go_live()
            }
            Input::LeaseRefused { why } => {
                self.lease = None;
                if let State::Fenced { why: w, .. } = &mut self.state {
                    *w = format!("no lease: {why}");
                }
                Vec::new()
            }
            Input::Lease { valid_until } => {
                self.lease = valid_until;
                match (&self.state, valid_until) {
                    (State::Live { .. }, Some(v)) => {
                        self.state = State::Live { valid_until: v };
                        vec![Action::Deadline(Some(v))]
                    }
                    (State::Live { .. }, None) => self.fence("the lease was lost".into()),
                    _ => Vec::new(),
                }
            }
            Input::Tick { now } => match &self.state {
                State::Live { valid_until } if *valid_until <= now => {
                    self.fence("the lease's validity ran out".into())
                }
                State::Live { .. } => vec![Action::Report],
                State::Fenced { awaiting: None, .. } if !self.held_down() => {
                    vec![Action::TakeLease]
                }
                State::Fenced {
                    awaiting: Some(_), ..
                } if self.lease.is_none_or(|v| v <= now) => {
                    // Granted, but it lapsed before the map caught up.
                    self.state = State::Fenced {
                        awaiting: None,
                        why: "the lease lapsed before the map caught up".into(),
                    };
                    vec![Action::TakeLease]
                }
                _ => Vec::new(),
            },
            Input::ShardTrouble { why } => {
                self.state = State::Failed { why: why.clone() };
                vec![
                    Action::Deadline(None),
                    Action::GiveUpLease,
                    Action::Exit { why },
                ]
            }
            Input::Stop => {
                self.state = State::Stopping;
                vec![
                    Action::Deadline(None),
                    Action::GiveUpLease,
                    Action::Exit {
                        why: "stopped".into(),
                    },
                ]
            }
        }
    }

    fn held_down(&self) -> bool {
        self.map.is_some_and(|m| m.2)
    }

    fn on_map(&mut self, epoch: Epoch, in_acting: bool, held_down: bool) -> Vec<Action> {
        if self.map.is_some_and(|m| m.0 > epoch) {
            return Vec::new();
        }
        self.map = Some((epoch, in_acting, held_down));
        match &self.state {
            State::WaitingSeenDown if in_acting => Vec::new(),
            State::WaitingSeenDown => {
                self.state = State::Fenced {
                    awaiting: None,
                    why: "taking a lease: no PG counts a previous life of this OSD".into(),
                };
                if held_down {
                    Vec::new()
                } else {
                    vec![Action::TakeLease]
                }
            }
            State::Live { .. } if held_down => {
                let mut a = self.fence("held down by the manager on its peers' reports".into());
                a.retain(|x| *x != Action::TakeLease);
                a.push(Action::GiveUpLease);
                a
            }
            State::Live { .. } => self.apply(),
            State::Fenced { .. } => {
                let mut a = self.apply();
                a.extend(self.try_go_live());
                a
            }
            State::Failed { .. } | State::Stopping => Vec::new(),
        }
    }

    /// Hands a newer map to the shards (never before the OSD left
    /// [`State::WaitingSeenDown`]).
    fn apply(&mut self) -> Vec<Action> {
        let Some((epoch, ..)) = self.map else {
            return Vec::new();
        };
        if self.applied.is_some_and(|a| a >= epoch) {
            return Vec::new();
        }
        self.applied = Some(epoch);
        vec![Action::ApplyMap]
    }

    /// Fenced with a granted lease: live once the map has caught up.
    fn try_go_live(&mut self) -> Vec<Action> {
        let State::Fenced {
            awaiting: Some(want),
            ..
        } = self.state
        else {
            return Vec::new();
        };
        let Some(valid_until) = self.lease else {
            return Vec::new();
        };
        let mut actions = self.apply();
        if self.applied.is_none_or(|a| a < want) {
            return actions;
        }
        self.state = State::Live { valid_until };
        actions.push(Action::Deadline(Some(valid_until)));
        actions
    }

    fn fence(&mut self, why: String) -> Vec<Action> {
        self.state = State::Fenced {
            awaiting: None,
            why,
        };
        self.lease = None;
        if self.held_down() {
            vec![Action::Deadline(None)]
        } else {
            vec![Action::Deadline(None), Action::TakeLease]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn map(epoch: u64, in_acting: bool) -> Input {
        Input::Map {
            epoch: Epoch(epoch),
            in_acting,
            held_down: false,
        }
    }

    /// A lease granted at `epoch`, valid `secs` from `now`.
    fn granted(epoch: u64, now: Instant, secs: u64) -> Input {
        Input::LeaseGranted {
            epoch: Epoch(epoch),
            valid_until: now + Duration::from_secs(secs),
        }
    }

    /// What going live does: apply the map, serve until `secs` from `now`.
    fn serve_until(now: Instant, secs: u64) -> Vec<Action> {
        vec![
            Action::ApplyMap,
            Action::Deadline(Some(now + Duration::from_secs(secs))),
        ]
    }

    fn t0() -> Instant {
        Instant::now()
    }

    /// A first life that took its lease at epoch 5 with the map at 5.
    fn live(now: Instant) -> Life {
        let mut l = Life::new(false);
        assert_eq!(l.start(), vec![Action::TakeLease]);
        l.step(map(5, true));
        l.step(granted(5, now, 6));
        assert!(l.is_live(), "{:?}", l.state());
        l
    }

    #[test]
    fn a_restarted_life_waits_until_no_pg_counts_it_however_long() {
        let now = t0();
        let mut l = Life::new(true);
        assert_eq!(l.start(), vec![Action::ClearPreviousLife]);
        // Still a member: nothing happens, on any tick, ever.
        assert!(l.step(map(3, true)).is_empty());
        for s in 0..1000 {
            assert!(
                l.step(Input::Tick {
                    now: now + Duration::from_secs(s)
                })
                .is_empty()
            );
        }
        assert_eq!(*l.state(), State::WaitingSeenDown);
        // The manager moved every PG away from the old life.
        assert_eq!(l.step(map(4, false)), vec![Action::TakeLease]);
        let a = l.step(granted(4, now, 6));
        assert_eq!(a, serve_until(now, 6));
        assert!(l.is_live());
    }

    #[test]
    fn a_lease_serves_only_once_the_map_is_as_new_as_etcds() {
        let now = t0();
        let mut l = Life::new(false);
        assert_eq!(l.step(map(7, true)), vec![Action::ApplyMap]);
        let a = l.step(granted(9, now, 6));
        assert!(a.is_empty(), "{a:?}");
        assert!(!l.is_live());
        assert_eq!(l.step(map(8, true)), vec![Action::ApplyMap]);
        assert!(!l.is_live());
        let a = l.step(map(9, true));
        assert_eq!(a, serve_until(now, 6));
        assert!(l.is_live());
    }

    #[test]
    fn validity_running_out_fences_and_asks_for_a_new_lease() {
        let now = t0();
        let mut l = live(now);
        assert_eq!(
            l.step(Input::Tick {
                now: now + Duration::from_secs(1)
            }),
            vec![Action::Report]
        );
        let a = l.step(Input::Tick {
            now: now + Duration::from_secs(6),
        });
        assert_eq!(a, vec![Action::Deadline(None), Action::TakeLease]);
        assert!(!l.is_live());
        // A new lease, with the map already at etcd's epoch: live again.
        let a = l.step(granted(5, now, 12));
        assert_eq!(
            a,
            vec![Action::Deadline(Some(now + Duration::from_secs(12)))]
        );
    }

    #[test]
    fn a_lost_lease_fences_at_once_and_renewals_move_the_deadline() {
        let now = t0();
        let mut l = live(now);
        let later = now + Duration::from_secs(7);
        assert_eq!(
            l.step(Input::Lease {
                valid_until: Some(later)
            }),
            vec![Action::Deadline(Some(later))]
        );
        assert_eq!(
            l.step(Input::Lease { valid_until: None }),
            vec![Action::Deadline(None), Action::TakeLease]
        );
    }

    #[test]
    fn held_down_by_the_manager_fences_gives_the_lease_up_and_waits() {
        let now = t0();
        let mut l = live(now);
        let a = l.step(Input::Map {
            epoch: Epoch(6),
            in_acting: true,
            held_down: true,
        });
        assert_eq!(a, vec![Action::Deadline(None), Action::GiveUpLease]);
        for s in 0..10 {
            assert!(
                l.step(Input::Tick {
                    now: now + Duration::from_secs(s)
                })
                .is_empty(),
                "no lease is taken while held down"
            );
        }
        // Released: a lease again, and live with the map at its epoch.
        assert_eq!(
            l.step(Input::Map {
                epoch: Epoch(8),
                in_acting: false,
                held_down: false,
            }),
            vec![Action::ApplyMap]
        );
        assert_eq!(
            l.step(Input::Tick {
                now: now + Duration::from_secs(11)
            }),
            vec![Action::TakeLease]
        );
        let v = now + Duration::from_secs(20);
        assert_eq!(
            l.step(Input::LeaseGranted {
                epoch: Epoch(8),
                valid_until: v
            }),
            vec![Action::Deadline(Some(v))]
        );
    }

    #[test]
    fn shard_trouble_fences_gives_up_the_lease_and_exits_once() {
        let now = t0();
        let mut l = live(now);
        let why = "shard 1: store failed: write error".to_string();
        assert_eq!(
            l.step(Input::ShardTrouble { why: why.clone() }),
            vec![
                Action::Deadline(None),
                Action::GiveUpLease,
                Action::Exit { why }
            ]
        );
        assert!(l.step(map(9, true)).is_empty());
        assert!(
            l.step(Input::ShardTrouble {
                why: "again".into()
            })
            .is_empty()
        );
    }

    #[test]
    fn an_older_map_changes_nothing() {
        let now = t0();
        let mut l = live(now);
        assert!(l.step(map(4, true)).is_empty());
        assert_eq!(l.step(map(6, true)), vec![Action::ApplyMap]);
        assert!(l.step(map(6, true)).is_empty());
    }
}
