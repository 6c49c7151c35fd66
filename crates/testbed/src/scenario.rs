//! The failure scenarios' common ground: a [`Rig`] (the cluster every
//! scenario runs on) and a [`Scenario`] (a rig under a [`Load`], faults
//! injected and healed with their moments noted, and the verdict once the
//! cluster is clean again).
//!
//! The rig: three etcd hosts `e1..e3`, three OSD hosts `o1..o3` with one
//! OSD each (`osd.0` on `o1`, ...), the manager on `m1` with a standby on
//! `m2`, a pool of size 3 (min_size 2, failure domain host, 16 PGs) and a
//! 128 MiB volume `v` in it (32 objects, every one written by the load).
//! OSD leases have the product's default TTL (7 s); OSDs go out only after
//! 60 s down, so no scenario re-replicates data unless it wants to.
//!
//! The verdict ([`Scenario::finish`]): the cluster gets active+clean again
//! (within the testbed's generous bound), the history passes the checker
//! (no acknowledged write lost, no stale or torn read; final reads of
//! every block included), every acting member of every PG holds the same
//! version and bytes of every object, and every process that should run
//! still runs. Timings are printed, never asserted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pontoon_cluster::ClusterMap;
use pontoon_types::{OsdId, PgId};

use crate::load::{self, Figures, Load, LoadShape};
use crate::testbed::lock;
use crate::{EtcdCluster, Host, MgrOpts, OsdOpts, Proc, Testbed};

/// OSD liveness lease TTL (the product's default).
pub const LEASE_TTL: Duration = Duration::from_secs(7);
/// How long an OSD may be down before it is marked out.
pub const OUT_AFTER: Duration = Duration::from_secs(60);
/// PGs of the pool.
pub const POOL_PGS: u32 = 16;
/// The volume the load runs on.
pub const VOLUME: &str = "v";
/// Its size: 32 objects of 4 MiB.
const VOLUME_SIZE: &str = "128M";
/// How long the load runs before the first fault.
pub const WARM_UP: Duration = Duration::from_secs(3);
/// Bound on waits for what a scenario expects of the cluster (a log line,
/// a map change, I/O resuming): generous, it is a liveness check, not a
/// timing.
pub const EXPECT: Duration = Duration::from_secs(60);
/// Between two looks at logs.
const POLL: Duration = Duration::from_millis(200);

/// The cluster of every scenario (see the module's description).
pub struct Rig {
    /// The testbed.
    pub tb: Testbed,
    /// etcd, one member on each of `e`.
    pub etcd: EtcdCluster,
    /// etcd hosts `e1..e3`.
    pub e: Vec<Host>,
    /// OSD hosts `o1..o3`: OSD `i` runs on `o[i]`.
    pub o: Vec<Host>,
    /// Manager hosts `m1`, `m2`: manager `m<i+1>` runs on `m[i]`.
    pub m: Vec<Host>,
    /// How OSDs are run.
    pub osd_opts: OsdOpts,
    osds: Mutex<Vec<Proc>>,
    mgrs: Vec<Proc>,
}

impl std::fmt::Debug for Rig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rig").field("tb", &self.tb).finish()
    }
}

impl Rig {
    /// Starts the rig and waits until its pool is clean.
    pub fn start(hint: &str) -> Rig {
        let tb = Testbed::new(hint);
        let e: Vec<Host> = ["e1", "e2", "e3"].iter().map(|n| tb.add_host(n)).collect();
        let o: Vec<Host> = ["o1", "o2", "o3"].iter().map(|n| tb.add_host(n)).collect();
        let m: Vec<Host> = ["m1", "m2"].iter().map(|n| tb.add_host(n)).collect();
        let etcd = tb.start_etcd(&[&e[0], &e[1], &e[2]]);
        etcd.wait_leader(Duration::from_secs(20));
        let osd_opts = OsdOpts {
            lease_ttl: LEASE_TTL,
            ..OsdOpts::default()
        };
        // In id order, each registered before the next.
        let osds = o
            .iter()
            .enumerate()
            .map(|(i, h)| tb.start_osd_alive(h, i as u32, &osd_opts, Duration::from_secs(60)))
            .collect();
        let mgr_opts = MgrOpts {
            out_after: OUT_AFTER,
        };
        let m1 = tb.start_mgr(&m[0], "m1", &mgr_opts);
        let mut rig = Rig {
            tb,
            etcd,
            e,
            o,
            m,
            osd_opts,
            osds: Mutex::new(osds),
            mgrs: vec![m1],
        };
        rig.wait_log(
            &["mgr.m1"],
            "became manager leader",
            1,
            Duration::from_secs(30),
        );
        let m2 = rig.tb.start_mgr(&rig.m[1], "m2", &mgr_opts);
        rig.mgrs.push(m2);
        rig.wait_log(
            &["mgr.m2"],
            "campaigning for manager leader",
            1,
            Duration::from_secs(30),
        );
        rig.tb.three_host_volume(POOL_PGS, VOLUME, VOLUME_SIZE);
        rig
    }

    /// The process of OSD `id` (its latest start).
    pub fn osd(&self, id: u32) -> Proc {
        lock(&self.osds)[id as usize].clone()
    }

    /// How many OSDs the rig has.
    pub fn osd_count(&self) -> u32 {
        lock(&self.osds).len() as u32
    }

    /// SIGKILLs OSD `id`.
    pub fn kill_osd(&self, id: u32) {
        self.osd(id).kill9();
    }

    /// Starts OSD `id` again on its device after it died; returns without
    /// waiting.
    pub fn restart_osd(&self, id: u32) -> Proc {
        let old = self.osd(id);
        assert!(
            !old.is_running(),
            "osd.{id} (pid {}) is still running",
            old.pid()
        );
        let p = self.tb.start_osd(&self.o[id as usize], id, &self.osd_opts);
        lock(&self.osds)[id as usize] = p.clone();
        p
    }

    /// The manager processes (`mgr.m1`, `mgr.m2`).
    pub fn mgrs(&self) -> &[Proc] {
        &self.mgrs
    }

    /// The name of the manager that holds the leader key, if etcd answers.
    pub fn active_mgr(&self) -> Option<String> {
        self.tb
            .with_store(|s| async move { s.leader().await.ok().flatten() })
    }

    /// The index in [`Rig::m`] of the active manager (waits up to
    /// [`EXPECT`] for one).
    pub fn active_mgr_index(&self) -> usize {
        let deadline = Instant::now() + EXPECT;
        loop {
            if let Some(name) = self.active_mgr()
                && let Some(i) = ["m1", "m2"].iter().position(|n| *n == name)
            {
                return i;
            }
            assert!(
                Instant::now() < deadline,
                "no active manager within {EXPECT:?}\n{}",
                self.tb.logs_tail()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Lines of the logs `names` (processes, e.g. `"osd.0"`) that contain
    /// `pattern`, summed.
    pub fn log_count(&self, names: &[&str], pattern: &str) -> usize {
        names.iter().map(|n| self.tb.log_count(n, pattern)).sum()
    }

    /// Lines of both managers' logs that contain `pattern`.
    pub fn mgr_log_count(&self, pattern: &str) -> usize {
        self.log_count(&["mgr.m1", "mgr.m2"], pattern)
    }

    /// Waits up to `timeout` until the logs `names` hold at least
    /// `at_least` lines with `pattern`; panics with every log's end if they
    /// do not.
    pub fn wait_log(&self, names: &[&str], pattern: &str, at_least: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.log_count(names, pattern);
            if n >= at_least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{names:?}: {n} lines with {pattern:?} after {timeout:?}, expected {at_least}\n{}",
                self.tb.logs_tail()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits (up to [`EXPECT`]) until either manager's log holds a line
    /// with `pattern`.
    pub fn wait_mgr_log(&self, pattern: &str) {
        self.wait_log(&["mgr.m1", "mgr.m2"], pattern, 1, EXPECT);
    }

    /// Per OSD, how many times it stopped serving (`fenced=true` lines).
    pub fn fences(&self) -> BTreeMap<u32, usize> {
        (0..self.osd_count())
            .map(|id| (id, self.tb.log_count(&format!("osd.{id}"), "fenced=true")))
            .collect()
    }

    /// Per OSD, how many times its etcd client moved to another member.
    pub fn etcd_moves(&self) -> BTreeMap<u32, usize> {
        (0..self.osd_count())
            .map(|id| {
                (
                    id,
                    self.tb
                        .log_count(&format!("osd.{id}"), "etcd: moving to another member"),
                )
            })
            .collect()
    }

    /// Waits (up to [`EXPECT`]) until OSD `id` is in no PG's acting set;
    /// returns that map.
    pub fn wait_out_of_acting(&self, id: u32) -> ClusterMap {
        self.tb
            .wait_for(&format!("osd.{id} in no acting set"), EXPECT, |m, _| {
                let holding: Vec<String> = m
                    .pgs
                    .iter()
                    .filter(|(_, r)| r.acting.contains(&OsdId(id)))
                    .map(|(pg, _)| pg.to_string())
                    .collect();
                if holding.is_empty() {
                    Ok(())
                } else {
                    Err(format!("still acting in {}", holding.join(", ")))
                }
            })
    }

    /// Waits up to `timeout` until the cluster is whole again: every etcd
    /// member healthy, every OSD alive and not held down, every PG
    /// active+clean with a full acting set. Panics with the logs if not.
    pub fn wait_settled(&self, what: &str, timeout: Duration) -> ClusterMap {
        let deadline = Instant::now() + timeout;
        self.etcd.wait_members_healthy(self.etcd.len(), timeout);
        let left = deadline.saturating_duration_since(Instant::now());
        let n = self.osd_count();
        self.tb.wait_for(what, left, |m, reports| {
            let gone = self.not_running();
            if !gone.is_empty() {
                return Err(format!("not running: {gone:?}"));
            }
            for id in 0..n {
                let osd = OsdId(id);
                if !m.is_alive(osd) {
                    return Err(format!("{osd} is not alive"));
                }
                if m.osds.get(&osd).is_some_and(|o| o.reported_down) {
                    return Err(format!("{osd} is held down"));
                }
            }
            crate::all_clean(m, reports)
        })
    }

    /// Processes that should run and do not: every etcd member, OSD and
    /// manager (their latest starts).
    pub fn not_running(&self) -> Vec<String> {
        let mut procs: Vec<Proc> = (0..self.etcd.len()).map(|i| self.etcd.member(i)).collect();
        procs.extend(lock(&self.osds).iter().cloned());
        procs.extend(self.mgrs.iter().cloned());
        procs
            .iter()
            .filter_map(|p| {
                p.exit_status()
                    .map(|st| format!("{} on {} exited ({st})", p.name(), p.host()))
            })
            .collect()
    }
}

/// A fault as the scenario noted it.
#[derive(Clone, Debug)]
struct Fault {
    what: String,
    at: Duration,
    affected: BTreeSet<PgId>,
}

/// A rig under a load, with the faults injected so far (see the module's
/// description).
pub struct Scenario {
    /// Its name, in the report.
    pub name: String,
    /// The cluster.
    pub rig: Rig,
    /// The load on it.
    pub load: Load,
    faults: Vec<Fault>,
    started: Instant,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .field("faults", &self.faults)
            .finish()
    }
}

impl Scenario {
    /// Starts the rig and the load ([`LoadShape::default`]), and lets the
    /// load run for [`WARM_UP`] (and until 100 operations succeeded).
    pub fn start(name: &str) -> Scenario {
        Self::start_with(name, LoadShape::default())
    }

    /// [`Scenario::start`] with a load of `shape`.
    pub fn start_with(name: &str, shape: LoadShape) -> Scenario {
        let started = Instant::now();
        let rig = Rig::start(name);
        let load = Load::start(
            &rig.etcd.endpoint_list(),
            rig.tb.cluster_name(),
            VOLUME,
            shape,
        );
        let map = rig.tb.map();
        let primaries: Vec<String> = load
            .primaries(&map)
            .iter()
            .map(|(o, n)| format!("{o}: {n}"))
            .collect();
        eprintln!(
            "scenario {name}: cluster ready in {:.1} s ({}); load on {} blocks of {} PGs, blocks per primary {{{}}}",
            started.elapsed().as_secs_f64(),
            rig.tb.dir().display(),
            shape.blocks,
            load.pgs().len(),
            primaries.join(", ")
        );
        load.mark("load started");
        if let Err(e) = load.wait_ok_ops(100, EXPECT) {
            panic!("the load does not run: {e}\n{}", rig.tb.logs_tail());
        }
        let left = WARM_UP.saturating_sub(load.elapsed());
        std::thread::sleep(left);
        Scenario {
            name: name.to_string(),
            rig,
            load,
            faults: Vec::new(),
            started,
        }
    }

    /// Injects a fault with `f` and notes its moment (just after `f`
    /// returns). `impaired`: the OSDs it takes away, whose PGs (in the map
    /// just before) are the affected ones; none means every PG of the
    /// load counts as affected. Returns the fault's moment (history clock).
    pub fn inject(&mut self, what: &str, impaired: &[u32], f: impl FnOnce(&Rig)) -> Duration {
        let affected = if impaired.is_empty() {
            self.load.pgs()
        } else {
            let ids: Vec<OsdId> = impaired.iter().map(|i| OsdId(*i)).collect();
            self.load.pgs_acting_on(&self.rig.tb.map(), &ids)
        };
        f(&self.rig);
        let at = self.load.mark(&format!(
            "fault: {what} ({} of the load's {} PGs affected)",
            affected.len(),
            self.load.pgs().len()
        ));
        self.faults.push(Fault {
            what: what.to_string(),
            at,
            affected,
        });
        at
    }

    /// Heals (or ends) a fault with `f` and notes the moment.
    pub fn heal(&mut self, what: &str, f: impl FnOnce(&Rig)) -> Duration {
        f(&self.rig);
        self.load.mark(&format!("heal: {what}"))
    }

    /// Notes a moment of the scenario.
    pub fn note(&self, what: &str) -> Duration {
        self.load.mark(what)
    }

    /// Sleeps until `total` has passed since `since` (history clock).
    pub fn hold(&self, since: Duration, total: Duration) {
        std::thread::sleep((since + total).saturating_sub(self.load.elapsed()));
    }

    /// The PGs the latest fault affected.
    pub fn affected(&self) -> BTreeSet<PgId> {
        self.faults
            .last()
            .map(|f| f.affected.clone())
            .unwrap_or_else(|| self.load.pgs())
    }

    /// Waits (up to [`EXPECT`]) until every PG of `pgs` acknowledged a
    /// write invoked at `since` or later; panics with the logs if not.
    /// Notes and returns when the last did.
    pub fn expect_writes(&self, pgs: &BTreeSet<PgId>, since: Duration, what: &str) -> Duration {
        match self.load.wait_writes_acked(pgs, since, EXPECT) {
            Ok(t) => {
                eprintln!(
                    "[{:7.2} s] {what}: writes acknowledged on all {} PGs (the last {:.1} s after {:.2} s)",
                    self.load.elapsed().as_secs_f64(),
                    pgs.len(),
                    t.saturating_sub(since).as_secs_f64(),
                    since.as_secs_f64()
                );
                t
            }
            Err(e) => panic!(
                "{what}: {e}\nfaults: {}\n{}",
                self.rig.tb.faults(),
                self.rig.tb.logs_tail()
            ),
        }
    }

    /// Waits until OSD `id` is in no acting set, then until every PG of
    /// `affected` acknowledged a write invoked at `since` or later; notes
    /// both. Returns when the last PG did.
    pub fn expect_routed_around(
        &self,
        id: u32,
        affected: &BTreeSet<PgId>,
        since: Duration,
        what: &str,
    ) -> Duration {
        self.rig.wait_out_of_acting(id);
        self.note(&format!("osd.{id} is in no acting set"));
        self.expect_writes(affected, since, what)
    }

    /// The verdict: waits until the cluster is clean, ends the load (final
    /// reads), prints the figures, then asserts the history, the replicas
    /// and the processes. Returns the figures of each fault.
    pub fn finish(self) -> Vec<Figures> {
        let Scenario {
            name,
            rig,
            load,
            faults,
            started,
        } = self;
        assert!(
            load.is_running(),
            "scenario {name}: the load's thread ended early"
        );
        let clean = rig
            .tb
            .wait_clean(&format!("scenario {name}: clean after healing"));
        let end = load.mark("active+clean");
        let block_pgs = load.block_pgs().to_vec();
        let ops = match load.finish() {
            Ok(ops) => ops,
            Err(e) => panic!(
                "scenario {name}: the load failed: {e}\n{}",
                rig.tb.logs_tail()
            ),
        };
        let (n, failed, first_failures) = load::summary(&ops);
        let mut figures = Vec::new();
        for (i, f) in faults.iter().enumerate() {
            let until = faults.get(i + 1).map_or(end, |g| g.at);
            let fig = Figures::of(&ops, &block_pgs, &f.affected, f.at, until);
            eprintln!(
                "scenario {name} [{}]: {} (window {:.1}..{:.1} s; longest stall from +{:.1} s; every affected PG wrote by {})",
                f.what,
                fig.line(),
                f.at.as_secs_f64(),
                until.as_secs_f64(),
                fig.stall_from.saturating_sub(f.at).as_secs_f64(),
                fig.all_pgs_written.map_or("never".to_string(), |d| format!(
                    "+{:.1} s",
                    d.as_secs_f64()
                ))
            );
            figures.push(fig);
        }
        match (faults.first(), figures.first()) {
            (Some(first), Some(fig)) => {
                let all = Figures::of(&ops, &block_pgs, &first.affected, first.at, end);
                eprintln!(
                    "scenario {name}: resumed after {:.1} s, longest stall {:.1} s, {n} ops, {failed} failed",
                    fig.resumed.as_secs_f64(),
                    all.longest_stall.as_secs_f64()
                );
            }
            _ => eprintln!("scenario {name}: no fault, {n} ops, {failed} failed"),
        }
        eprintln!(
            "scenario {name}: fences (fenced=true lines) per OSD {:?}, etcd member moves per OSD {:?}, held down {} times, released {} times; ran {:.1} s",
            rig.fences(),
            rig.etcd_moves(),
            rig.mgr_log_count("holding it down"),
            rig.mgr_log_count("released"),
            started.elapsed().as_secs_f64()
        );
        for f in &first_failures {
            eprintln!("scenario {name}: failed operation: {f}");
        }
        let violations = load::violations(&ops);
        assert!(
            violations.is_empty(),
            "scenario {name}: the history of {} operations has {} violations:\n{}\n{}",
            ops.len(),
            violations.len(),
            violations.join("\n"),
            rig.tb.logs_tail()
        );
        // The map of the clean cluster, fresh (nothing changes once clean).
        let map = rig.tb.map();
        if map.epoch != clean.epoch {
            eprintln!(
                "scenario {name}: the map moved from epoch {} to {} after getting clean",
                clean.epoch, map.epoch
            );
        }
        match load::replicas_identical(&map, VOLUME, None) {
            Ok(objects) => {
                eprintln!("scenario {name}: {objects} objects identical on every acting member")
            }
            Err(problems) => panic!(
                "scenario {name}: replicas differ:\n{}\n{}",
                problems.join("\n"),
                rig.tb.logs_tail()
            ),
        }
        let gone = rig.not_running();
        assert!(
            gone.is_empty(),
            "scenario {name}: processes that should run do not: {gone:?}\n{}",
            rig.tb.logs_tail()
        );
        figures
    }
}
