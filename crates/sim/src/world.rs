//! The simulated cluster around the real code: "etcd" (the map, liveness
//! leases and reports as plain values), the manager's loop, and OSD
//! processes that start, crash with their disk's cache half lost, and
//! restart. Each OSD runs the daemon's own control loop
//! (`pontoon_osd::control::run`, with its life cycle) through a
//! [`MapSource`] and a [`ShardSet`] of the simulator's; the manager's
//! rules are the real `pontoon_mgr::Manager`; the shard is the real one.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc;
use pontoon_client::MapFeed;
use pontoon_cluster::lease::{RETRY_AFTER_FAILURE, margin, renew_period};
use pontoon_cluster::{
    ClusterMap, FailureDomain, NextIds, OsdRecord, OsdReport, PoolRecord, VolumeRecord, recompute,
};
use pontoon_mgr::Manager;
use pontoon_osd::control::{self, Exit, MapSource, ShardSet};
use pontoon_osd::view::shard_map;
use pontoon_osd::{LeaseDeadline, Shard, ShardReport};
use pontoon_store::{FormatOptions, MemDevice, Store};
use pontoon_types::{Epoch, OsdId, PoolId, VolumeId};

use crate::ctx::{Ctx, Fault};
use crate::disk::SimDisk;
use crate::executor::{ProcId, WORLD};
use crate::net::{Endpoint, Net, SimPeers, SimShard, osd_addr};

/// The simulated cluster's shape and timings.
#[derive(Clone, Debug)]
pub struct Config {
    /// OSDs at the start.
    pub osds: u32,
    /// Pool size and min_size.
    pub size: u32,
    /// Fewest members that accept writes.
    pub min_size: u32,
    /// PGs in the pool.
    pub pgs: u32,
    /// Objects in the volume.
    pub objects: u64,
    /// Objects in the single-writer volume [`SNAPVOL`].
    pub snap_objects: u64,
    /// Bytes per object (store and volume).
    pub object_size: u64,
    /// Bytes per OSD disk.
    pub disk_bytes: u64,
    /// Liveness lease time-to-live.
    pub lease_ttl: Duration,
    /// The OSD control loop's tick (the daemon's).
    pub tick: Duration,
    /// The manager's pass interval.
    pub mgr_interval: Duration,
    /// Down for this long ⇒ out.
    pub out_after: Duration,
    /// Every PG is deep-scrubbed this often.
    pub deep_scrub_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            osds: 4,
            size: 3,
            min_size: 2,
            pgs: 8,
            objects: 8,
            snap_objects: 4,
            object_size: 64 << 10,
            disk_bytes: 24 << 20,
            lease_ttl: Duration::from_secs(3),
            tick: Duration::from_millis(500),
            mgr_interval: Duration::from_secs(1),
            out_after: Duration::from_secs(10),
            deep_scrub_interval: Duration::from_secs(5),
        }
    }
}

/// Name of the simulated volume.
pub const VOLUME: &str = "simvol";
/// A second volume, written to and then removed under faults, whose
/// objects every OSD must end up deleting.
pub const SCRATCH: &str = "scratch";
/// A volume with one writer process, whose snapshots must each be one
/// consistent cut of its history (see `crate::snaps`).
pub const SNAPVOL: &str = "snapvol";
/// The clone of a protected snapshot of [`SNAPVOL`], made under the faults.
pub const CLONE: &str = "snapclone";
/// Unix time at virtual time zero (the manager works in Unix seconds).
const UNIX_BASE: u64 = 1_800_000_000;

/// One OSD's simulated hardware and process.
pub struct OsdState {
    /// Its disk (what survives a crash).
    pub mem: MemDevice,
    slow: Rc<Cell<Duration>>,
    /// The drive died (every write fails).
    dead_disk: Rc<Cell<bool>>,
    /// The running process is frozen (SIGSTOP).
    pub frozen: bool,
    /// The running process, if any.
    pub proc: Option<ProcId>,
    /// Its shard while running.
    pub shard: Option<Rc<SimShard>>,
    /// Where maps reach its control loop while running.
    maps: Option<mpsc::UnboundedSender<Arc<ClusterMap>>>,
    /// Gone for good (replaced).
    pub destroyed: bool,
    /// Cut from etcd until this virtual time: lease keep-alives fail.
    pub etcd_cut_until: Duration,
    /// The slow-disk fault lasts until this virtual time.
    slow_until: Duration,
}

/// The cluster.
pub struct World {
    /// Shared simulation state.
    pub ctx: Rc<Ctx>,
    /// The network.
    pub net: Rc<Net>,
    /// Shape and timings.
    pub cfg: Config,
    /// The map as etcd holds it.
    pub map: RefCell<ClusterMap>,
    /// Liveness leases as etcd holds them: OSD → (lease number, expiry).
    leases: RefCell<BTreeMap<OsdId, (u64, Duration)>>,
    next_lease: Cell<u64>,
    /// The manager's rules and timers.
    manager: RefCell<Manager>,
    reports: RefCell<BTreeMap<OsdId, OsdReport>>,
    /// The OSDs ever created.
    pub osds: RefCell<BTreeMap<OsdId, OsdState>>,
    feeds: RefCell<Vec<(ProcId, Arc<MapFeed>)>>,
    next_proc: Cell<u32>,
    /// Things that must never happen and did (a store that will not open).
    pub problems: RefCell<Vec<String>>,
    /// Run the deliberately broken replication (checker self-test).
    broken: bool,
    /// OSDs a block was corrupted on (their latent bad blocks are expected).
    pub corrupted: RefCell<BTreeSet<OsdId>>,
    /// OSDs that have run before (a first life has no predecessor to wait for).
    lived: RefCell<BTreeSet<OsdId>>,
    /// The clients' operations.
    pub history: RefCell<Option<Rc<crate::workload::History>>>,
    /// The operations of [`SNAPVOL`]'s one writer.
    pub snap_history: RefCell<Option<Rc<crate::workload::History>>>,
}

impl World {
    /// A formatted cluster at epoch 1 (nothing running yet).
    pub fn new(ctx: Rc<Ctx>, cfg: Config, broken: bool) -> Rc<Self> {
        let mut map = ClusterMap::new("sim");
        for i in 0..cfg.osds {
            map.osds.insert(OsdId(i), osd_record(OsdId(i), &cfg));
            map.alive.insert(OsdId(i));
        }
        map.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "simpool".into(),
                size: cfg.size,
                min_size: cfg.min_size,
                pgs: cfg.pgs,
                failure_domain: FailureDomain::Osd,
            },
        );
        map.volumes.insert(
            VolumeId(1),
            VolumeRecord {
                id: VolumeId(1),
                name: VOLUME.into(),
                pool: PoolId(1),
                size_bytes: cfg.objects * cfg.object_size,
                object_size: cfg.object_size,
                snap_seq: 0,
                snapshots: Vec::new(),
                parent: None,
            },
        );
        map.volumes.insert(
            VolumeId(2),
            VolumeRecord {
                id: VolumeId(2),
                name: SCRATCH.into(),
                pool: PoolId(1),
                size_bytes: cfg.objects * cfg.object_size,
                object_size: cfg.object_size,
                snap_seq: 0,
                snapshots: Vec::new(),
                parent: None,
            },
        );
        map.volumes.insert(
            VolumeId(3),
            VolumeRecord {
                id: VolumeId(3),
                name: SNAPVOL.into(),
                pool: PoolId(1),
                size_bytes: cfg.snap_objects * cfg.object_size,
                object_size: cfg.object_size,
                snap_seq: 0,
                snapshots: Vec::new(),
                parent: None,
            },
        );
        map.next = NextIds {
            osd: cfg.osds,
            pool: 2,
            volume: 4,
        };
        // Deep scrubs run all the time, under the faults; not in the
        // broken-replication self-test, whose evidence (replicas that
        // differ) scrub would repair before the checker compares them.
        map.settings.deep_scrub_interval_secs = if broken {
            0
        } else {
            cfg.deep_scrub_interval.as_secs()
        };
        map.epoch = Epoch(1);
        if let Err(e) = recompute(&mut map) {
            panic!("the simulated cluster's initial map does not place: {e}");
        }
        let world = Rc::new(Self {
            net: Net::new(ctx.clone()),
            ctx,
            map: RefCell::new(map),
            leases: RefCell::new(BTreeMap::new()),
            next_lease: Cell::new(1),
            manager: RefCell::new(Manager::new(cfg.out_after)),
            reports: RefCell::new(BTreeMap::new()),
            osds: RefCell::new(BTreeMap::new()),
            feeds: RefCell::new(Vec::new()),
            next_proc: Cell::new(1),
            problems: RefCell::new(Vec::new()),
            broken,
            corrupted: RefCell::new(BTreeSet::new()),
            history: RefCell::new(None),
            snap_history: RefCell::new(None),
            lived: RefCell::new(BTreeSet::new()),
            cfg,
        });
        for i in 0..world.cfg.osds {
            world.add_disk(OsdId(i));
            world
                .leases
                .borrow_mut()
                .insert(OsdId(i), (0, world.cfg.lease_ttl));
        }
        world
    }

    fn add_disk(&self, id: OsdId) {
        let mem = MemDevice::new(self.cfg.disk_bytes);
        let opts = FormatOptions {
            slices: 1,
            journal_blocks: Some(4096),
            object_size: self.cfg.object_size,
        };
        if let Err(e) = futures::executor::block_on(Store::format(&mem, None, &opts)) {
            panic!("formatting a simulated disk: {e}");
        }
        self.osds.borrow_mut().insert(
            id,
            OsdState {
                mem,
                slow: Rc::new(Cell::new(Duration::ZERO)),
                dead_disk: Rc::new(Cell::new(false)),
                frozen: false,
                proc: None,
                shard: None,
                maps: None,
                destroyed: false,
                etcd_cut_until: Duration::ZERO,
                slow_until: Duration::ZERO,
            },
        );
    }

    /// A fresh process id.
    pub fn new_proc(&self) -> ProcId {
        let p = self.next_proc.get();
        self.next_proc.set(p + 1);
        ProcId(p)
    }

    /// Starts every OSD and the manager.
    pub fn boot(self: &Rc<Self>) {
        {
            let map = self.map.borrow();
            if let Some(v) = map.volume_by_name(VOLUME) {
                let placed: Vec<String> = (0..v.object_count())
                    .map(|i| pontoon_types::ObjectId::new(v.id.0, i))
                    .filter_map(|o| Some(format!("{o}→pg {}", map.pg_of_object(&o)?)))
                    .collect();
                self.ctx.log(format!("objects: {}", placed.join(", ")));
            }
        }
        let ids: Vec<OsdId> = self.osds.borrow().keys().copied().collect();
        for id in ids {
            self.start_osd(id);
        }
        let w = self.clone();
        self.ctx
            .exec
            .spawn_on(WORLD, async move { w.mgr_loop().await });
    }

    /// A map feed for a client process, kept current by [`World::publish`].
    pub fn add_client(&self, proc: ProcId) -> Arc<MapFeed> {
        let feed = MapFeed::fixed(self.map.borrow().clone());
        self.feeds.borrow_mut().push((proc, feed.clone()));
        feed
    }

    /// Stops feeding maps to a client process that died.
    pub fn remove_client(&self, proc: ProcId) {
        self.feeds.borrow_mut().retain(|(p, _)| *p != proc);
    }

    /// OSDs running now.
    pub fn running(&self) -> Vec<OsdId> {
        self.osds
            .borrow()
            .iter()
            .filter(|(_, s)| s.proc.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// OSDs stopped or frozen: the ones a fault has taken away for now.
    pub fn impaired(&self) -> usize {
        self.osds
            .borrow()
            .values()
            .filter(|s| !s.destroyed && (s.proc.is_none() || s.frozen))
            .count()
    }

    /// OSDs that are down and may be started again.
    pub fn stopped(&self) -> Vec<OsdId> {
        self.osds
            .borrow()
            .iter()
            .filter(|(_, s)| s.proc.is_none() && !s.destroyed)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Starts OSD `id`'s process on its disk as it is.
    pub fn start_osd(self: &Rc<Self>, id: OsdId) {
        let proc = self.new_proc();
        let (mem, slow, dead) = {
            let mut osds = self.osds.borrow_mut();
            let Some(s) = osds.get_mut(&id) else { return };
            if s.proc.is_some() || s.destroyed {
                return;
            }
            s.proc = Some(proc);
            (s.mem.clone(), s.slow.clone(), s.dead_disk.clone())
        };
        let w = self.clone();
        self.ctx.exec.spawn_on(
            proc,
            async move { w.osd_main(id, proc, mem, slow, dead).await },
        );
    }

    /// The OSD process: open the store, serve, and run the daemon's control
    /// loop with its life cycle.
    async fn osd_main(
        self: Rc<Self>,
        id: OsdId,
        proc: ProcId,
        mem: MemDevice,
        slow: Rc<Cell<Duration>>,
        dead: Rc<Cell<bool>>,
    ) {
        let dev = SimDisk::new(mem, self.ctx.clone(), slow, dead);
        let (store, bg) = match Store::open(dev, None, 0).await {
            Ok(x) => x,
            Err(e @ pontoon_store::StoreError::Corrupt(_))
                if self.corrupted.borrow().contains(&id) =>
            {
                // What an operator does with a drive that lost data: take
                // it out and put a new one in; backfill rebuilds it.
                self.ctx.log(format!("{id} refuses to start: {e}"));
                let w = self.clone();
                self.ctx.exec.spawn_on(WORLD, async move {
                    w.retire_corrupt(id);
                });
                return;
            }
            Err(e) => {
                self.problem(format!("{id} cannot open its store: {e}"));
                return;
            }
        };
        pontoon_rt::spawn(bg);
        let peers = SimPeers {
            me: id,
            net: self.net.clone(),
        };
        let deadline = LeaseDeadline::fenced(pontoon_rt::now());
        let shard = Shard::new(id, 0, 1, store, peers, deadline);
        shard.break_replication_for_tests(self.broken);
        shard.start_heartbeats();
        self.net.endpoints.borrow_mut().insert(
            id,
            Endpoint {
                proc,
                shard: shard.clone(),
            },
        );
        let objects = shard.store().list().len();
        self.ctx
            .log(format!("{id} up: store open with {objects} objects"));
        let (tx, rx) = mpsc::unbounded();
        if let Some(s) = self.osds.borrow_mut().get_mut(&id) {
            s.shard = Some(shard.clone());
            s.maps = Some(tx);
        }
        // A first life has no predecessor (the simulated cluster boots
        // with every OSD in its acting sets before any holds a lease).
        let first_life = self.lived.borrow_mut().insert(id);
        let first = Arc::new(self.map.borrow().clone());
        let mut source = SimSource {
            world: self.clone(),
            id,
            maps: rx,
            lease: None,
        };
        let shards = SimShards { shard };
        let exit = control::run(id, !first_life, first, &mut source, &shards, || false).await;
        match exit {
            Exit::Stopped => {}
            Exit::Failed(why) | Exit::SourceLost(why) => {
                self.ctx.log(format!("{id} exits: {why}"));
                let w = self.clone();
                self.ctx.exec.spawn_on(WORLD, async move {
                    w.exit_osd(id);
                    // An operator replaces a drive that failed.
                    let failed = w.osds.borrow().get(&id).is_some_and(|s| s.dead_disk.get());
                    if failed {
                        let after = Duration::from_millis(w.ctx.range(1_000, 5_000));
                        pontoon_rt::sleep(after).await;
                        w.replace_osd(id);
                    }
                });
            }
        }
    }

    /// The OSD process ended by itself (after giving up its lease): its
    /// disk keeps everything, as on a clean exit.
    fn exit_osd(&self, id: OsdId) {
        let proc = {
            let mut osds = self.osds.borrow_mut();
            let Some(s) = osds.get_mut(&id) else { return };
            s.shard = None;
            s.maps = None;
            s.proc.take()
        };
        if let Some(proc) = proc {
            self.ctx.exec.thaw(proc);
            self.ctx.exec.kill(proc);
        }
        if let Some(s) = self.osds.borrow_mut().get_mut(&id) {
            s.frozen = false;
        }
        self.net.endpoints.borrow_mut().remove(&id);
    }

    /// Stops OSD `id`'s process as SIGSTOP does.
    pub fn freeze_osd(&self, id: OsdId) -> bool {
        let mut osds = self.osds.borrow_mut();
        let Some(s) = osds.get_mut(&id) else {
            return false;
        };
        let Some(proc) = s.proc.filter(|_| !s.frozen) else {
            return false;
        };
        s.frozen = true;
        self.ctx.exec.freeze(proc);
        true
    }

    /// Lets a frozen OSD process run again, as SIGCONT does.
    pub fn thaw_osd(&self, id: OsdId) {
        let mut osds = self.osds.borrow_mut();
        let Some(s) = osds.get_mut(&id) else { return };
        if !s.frozen {
            return;
        }
        s.frozen = false;
        if let Some(proc) = s.proc {
            self.ctx.exec.thaw(proc);
        }
    }

    /// Makes every write of OSD `id`'s drive fail from now on.
    pub fn kill_disk(&self, id: OsdId) {
        if let Some(s) = self.osds.borrow().get(&id) {
            s.dead_disk.set(true);
        }
    }

    /// Whether OSD `id` is cut from etcd now.
    fn etcd_cut(&self, id: OsdId) -> bool {
        let now = self.ctx.exec.elapsed();
        self.osds
            .borrow()
            .get(&id)
            .is_some_and(|s| now < s.etcd_cut_until)
    }

    /// Kills OSD `id`'s process; its disk keeps each unflushed sector with
    /// probability one half.
    pub fn crash_osd(&self, id: OsdId) {
        let proc = {
            let mut osds = self.osds.borrow_mut();
            let Some(s) = osds.get_mut(&id) else { return };
            s.shard = None;
            s.proc.take()
        };
        let Some(proc) = proc else { return };
        self.ctx.exec.thaw(proc);
        self.ctx.exec.kill(proc);
        self.net.endpoints.borrow_mut().remove(&id);
        if let Some(s) = self.osds.borrow_mut().get_mut(&id) {
            s.maps = None;
            s.frozen = false;
        }
        let mut osds = self.osds.borrow_mut();
        let Some(s) = osds.get_mut(&id) else { return };
        let cached = s.mem.cached_sectors();
        let mut kept = 0;
        s.mem.power_cycle(|_| {
            let keep = self.ctx.range(0, 2) == 1;
            kept += usize::from(keep);
            keep
        });
        self.ctx.note(Fault::Crash);
        self.ctx.log(format!(
            "CRASH {id}: {kept} of {cached} unflushed sectors reached the disk"
        ));
    }

    /// Destroys OSD `id` for good and registers a new, empty OSD in its place.
    pub fn replace_osd(self: &Rc<Self>, id: OsdId) -> OsdId {
        self.crash_osd(id);
        if let Some(s) = self.osds.borrow_mut().get_mut(&id) {
            s.destroyed = true;
        }
        let mut m = self.map.borrow().clone();
        let new = OsdId(m.next.osd);
        m.next.osd += 1;
        m.osds.insert(new, osd_record(new, &self.cfg));
        m.epoch = Epoch(m.epoch.0 + 1);
        self.add_disk(new);
        self.leases
            .borrow_mut()
            .insert(new, (0, self.ctx.exec.elapsed() + self.cfg.lease_ttl));
        self.ctx.note(Fault::Replace);
        self.ctx
            .log(format!("REPLACE {id} (destroyed) by new empty {new}"));
        self.publish(m);
        self.start_osd(new);
        new
    }

    /// Replaces OSD `id`, whose store found itself corrupt, by a new one.
    fn retire_corrupt(self: &Rc<Self>, id: OsdId) {
        if let Some(s) = self.osds.borrow_mut().get_mut(&id) {
            s.proc = None;
        }
        self.replace_osd(id);
    }

    /// Cuts OSD `id` from etcd for `dur` (zero: reconnects it now).
    pub fn cut_etcd(&self, id: OsdId, dur: Duration) {
        let until = self.ctx.exec.elapsed() + dur;
        if let Some(s) = self.osds.borrow_mut().get_mut(&id) {
            s.etcd_cut_until = if dur.is_zero() {
                until
            } else {
                s.etcd_cut_until.max(until)
            };
        }
    }

    /// Makes OSD `id`'s disk slower by `extra` per operation for `dur`
    /// (zero `extra`: normal speed now). Returns when it ends.
    pub fn slow_disk(&self, id: OsdId, extra: Duration, dur: Duration) -> Duration {
        let until = self.ctx.exec.elapsed() + dur;
        let mut osds = self.osds.borrow_mut();
        let Some(s) = osds.get_mut(&id) else {
            return until;
        };
        if extra.is_zero() {
            s.slow.set(Duration::ZERO);
            s.slow_until = until;
        } else {
            s.slow.set(s.slow.get().max(extra));
            s.slow_until = s.slow_until.max(until);
        }
        s.slow_until
    }

    /// Ends a slow-disk fault whose time is up.
    pub fn slow_disk_expire(&self, id: OsdId) {
        let now = self.ctx.exec.elapsed();
        if let Some(s) = self.osds.borrow_mut().get_mut(&id)
            && now >= s.slow_until
        {
            s.slow.set(Duration::ZERO);
        }
    }

    fn problem(&self, what: String) {
        self.ctx.log(format!("PROBLEM {what}"));
        self.problems.borrow_mut().push(what);
    }

    /// OSDs whose lease etcd holds now.
    fn alive(&self) -> BTreeSet<OsdId> {
        let now = self.ctx.exec.elapsed();
        self.leases
            .borrow()
            .iter()
            .filter(|(_, (_, until))| *until > now)
            .map(|(id, _)| *id)
            .collect()
    }

    async fn mgr_loop(self: Rc<Self>) {
        loop {
            pontoon_rt::sleep(self.cfg.mgr_interval).await;
            self.mgr_pass();
        }
    }

    /// One pass of the manager: the real decision function on the current
    /// map, reports and leases; a change is committed at the next epoch.
    pub fn mgr_pass(self: &Rc<Self>) {
        let alive = self.alive();
        let reports: Vec<OsdReport> = self.reports.borrow().values().cloned().collect();
        let mut m = self.map.borrow().clone();
        m.alive = alive.clone();
        m.epoch = Epoch(m.epoch.0 + 1);
        let unix = UNIX_BASE + self.ctx.exec.elapsed().as_secs();
        let now = pontoon_rt::now();
        let decided = self.manager.borrow_mut().pass(&mut m, &reports, now, unix);
        match decided {
            Ok(d) if !d.is_empty() => {
                for x in &d {
                    self.ctx.log(format!("mgr @{}: {x}", m.epoch));
                }
                self.publish(m);
            }
            Ok(_) => self.map.borrow_mut().alive = alive,
            Err(e) => self.problem(format!("manager: {e}")),
        }
    }

    /// Commits `m` and sends it to every running process, each after its
    /// own delay (maps arrive late and in different orders).
    pub fn publish(self: &Rc<Self>, m: ClusterMap) {
        let old = self.map.replace(m.clone());
        for (pg, rec) in &m.pgs {
            let before = old.pgs.get(pg).map(|r| r.acting.clone());
            if before.as_ref() != Some(&rec.acting) {
                self.ctx.log(format!(
                    "map @{}: pg {pg} acting {:?} -> {:?} (interval {})",
                    m.epoch,
                    before
                        .unwrap_or_default()
                        .iter()
                        .map(|o| o.0)
                        .collect::<Vec<_>>(),
                    rec.acting.iter().map(|o| o.0).collect::<Vec<_>>(),
                    rec.interval
                ));
            }
        }
        let m = Arc::new(m);
        let osds: Vec<(ProcId, mpsc::UnboundedSender<Arc<ClusterMap>>)> = self
            .osds
            .borrow()
            .values()
            .filter_map(|s| Some((s.proc?, s.maps.clone()?)))
            .collect();
        for (proc, tx) in osds {
            let (m, delay) = (m.clone(), self.map_delay());
            self.ctx.exec.spawn_on(proc, async move {
                pontoon_rt::sleep(delay).await;
                let _ = tx.unbounded_send(m);
            });
        }
        for (proc, feed) in self.feeds.borrow().iter() {
            let (m, feed, delay) = (m.clone(), feed.clone(), self.map_delay());
            self.ctx.exec.spawn_on(*proc, async move {
                pontoon_rt::sleep(delay).await;
                feed.publish((*m).clone());
            });
        }
    }

    /// Drops every process, disk and client feed: shards and the network
    /// refer to each other, so without this a finished run stays in memory.
    pub fn teardown(&self) {
        self.net.endpoints.borrow_mut().clear();
        self.osds.borrow_mut().clear();
        self.feeds.borrow_mut().clear();
        self.history.borrow_mut().take();
        self.snap_history.borrow_mut().take();
    }

    /// Whether every PG has a full acting set whose primary (running) holds
    /// it active+clean in the map's current interval.
    pub fn is_clean(&self) -> bool {
        self.unclean().is_empty()
    }

    /// PGs not clean, with why.
    fn unclean(&self) -> Vec<String> {
        let map = self.map.borrow();
        let osds = self.osds.borrow();
        let mut out = Vec::new();
        for (pg, rec) in &map.pgs {
            let size = map.pools.get(&pg.pool).map_or(0, |p| p.size as usize);
            if rec.acting.len() < size {
                out.push(format!("pg {pg}: acting {:?} is short", rec.acting));
                continue;
            }
            if let Some(o) = rec.acting.iter().find(|o| {
                osds.get(o)
                    .is_none_or(|s| s.shard.as_ref().is_none_or(|sh| sh.is_fenced()))
            }) {
                out.push(format!("pg {pg}: acting member {o} is not serving yet"));
                continue;
            }
            let Some(primary) = rec.acting.first() else {
                continue;
            };
            let Some(shard) = osds.get(primary).and_then(|s| s.shard.clone()) else {
                out.push(format!("pg {pg}: primary {primary} not running"));
                continue;
            };
            let st = shard.pg_status().into_iter().find(|s| s.pg == *pg);
            match st {
                Some(s) if s.interval == rec.interval && s.state == "active+clean" => {}
                Some(s) => out.push(format!(
                    "pg {pg}: {} at interval {} on {primary} (map interval {}){}",
                    s.state,
                    s.interval,
                    rec.interval,
                    s.detail.map(|d| format!(": {d}")).unwrap_or_default()
                )),
                None => out.push(format!("pg {pg}: unknown to its primary {primary}")),
            }
        }
        out
    }

    /// Removes volume `name` from the map (as `pontoon volume rm` does).
    pub fn remove_volume(self: &Rc<Self>, name: &str) {
        let mut m = self.map.borrow().clone();
        let Some(id) = m.volume_by_name(name).map(|v| v.id) else {
            return;
        };
        m.volumes.remove(&id);
        m.epoch = Epoch(m.epoch.0 + 1);
        self.ctx
            .log(format!("map @{}: volume {name} removed", m.epoch));
        self.publish(m);
    }

    /// Takes snapshot `snap` of each of `volumes` in one map change, as
    /// `pontoon snap create` does (the volume's `snap_seq` goes up by one
    /// and the snapshot's id is the new value). Returns each snapshot's id
    /// and the epoch of the map that holds them (`None`: no such volume).
    pub fn create_snapshots(
        self: &Rc<Self>,
        volumes: &[&str],
        snap: &str,
    ) -> Option<(Vec<u64>, Epoch)> {
        let mut m = self.map.borrow().clone();
        let created_unix = UNIX_BASE + self.ctx.exec.elapsed().as_secs();
        let mut ids = Vec::new();
        for name in volumes {
            let id = m.volume_by_name(name)?.id;
            let v = m.volumes.get_mut(&id)?;
            v.snap_seq += 1;
            v.snapshots.push(pontoon_cluster::SnapshotRecord {
                id: v.snap_seq,
                name: snap.to_string(),
                created_unix,
                size_bytes: v.size_bytes,
                protected: false,
            });
            ids.push(v.snap_seq);
        }
        m.epoch = Epoch(m.epoch.0 + 1);
        let epoch = m.epoch;
        self.ctx.log(format!(
            "map @{epoch}: snapshot {snap} of {volumes:?} (ids {ids:?})"
        ));
        self.publish(m);
        Some((ids, epoch))
    }

    /// Protects snapshot `snap` of `volume` and makes volume `name` a clone
    /// of it, in one map change (`pontoon snap protect` then `pontoon
    /// clone`, as `MapStore::clone_volume` records it). `false` if the
    /// snapshot is not in the map.
    pub fn clone_snapshot(self: &Rc<Self>, volume: &str, snap: &str, name: &str) -> bool {
        let mut m = self.map.borrow().clone();
        let Some(vid) = m.volume_by_name(volume).map(|v| v.id) else {
            return false;
        };
        let Some(s) = m
            .volumes
            .get_mut(&vid)
            .and_then(|v| v.snapshots.iter_mut().find(|s| s.name == snap))
        else {
            return false;
        };
        s.protected = true;
        let (sid, size) = (s.id, s.size_bytes);
        let Some(object_size) = m.volumes.get(&vid).map(|v| v.object_size) else {
            return false;
        };
        let id = m.alloc_volume_id();
        m.volumes.insert(
            id,
            VolumeRecord {
                id,
                name: name.into(),
                pool: PoolId(1),
                size_bytes: size,
                object_size,
                snap_seq: 0,
                snapshots: Vec::new(),
                parent: Some(pontoon_cluster::clones::ParentRecord {
                    volume: vid,
                    snap: sid,
                    overlap: size,
                }),
            },
        );
        m.epoch = Epoch(m.epoch.0 + 1);
        self.ctx.log(format!(
            "map @{}: {volume}@{snap} protected, cloned as {name} ({id})",
            m.epoch
        ));
        self.publish(m);
        true
    }

    /// Removes snapshot `snap` of `volume` from the map, as `pontoon snap
    /// rm` does: the OSDs then trim its clones.
    pub fn remove_snapshot(self: &Rc<Self>, volume: &str, snap: &str) {
        let mut m = self.map.borrow().clone();
        let Some(id) = m.volume_by_name(volume).map(|v| v.id) else {
            return;
        };
        let Some(v) = m.volumes.get_mut(&id) else {
            return;
        };
        v.snapshots.retain(|s| s.name != snap);
        m.epoch = Epoch(m.epoch.0 + 1);
        self.ctx.log(format!(
            "map @{}: snapshot {volume}@{snap} removed",
            m.epoch
        ));
        self.publish(m);
    }

    /// Whether every OSD etcd holds a lease of has reported a map of at
    /// least `epoch`: `pontoon snap create`'s confirmation
    /// (`MapStore::osds_behind`). From then on every serving primary
    /// refuses writes stamped with an older snapshot sequence (an OSD
    /// without a lease goes live again only with a map as new as its next
    /// lease's grant).
    pub fn all_alive_have(&self, epoch: Epoch) -> bool {
        let reports = self.reports.borrow();
        self.alive()
            .iter()
            .all(|o| reports.get(o).is_some_and(|r| r.epoch >= epoch))
    }

    /// Objects that running OSDs still hold although the current map says
    /// nobody needs them (removed volumes, stray PG copies).
    pub fn garbage(&self) -> Vec<String> {
        let map = shard_map(&self.map.borrow());
        let mut out = Vec::new();
        for (id, osd) in self.osds.borrow().iter() {
            let Some(shard) = &osd.shard else { continue };
            let held = shard
                .store()
                .list_where(|oid| pontoon_osd::reclaim::classify(&map, *id, oid).is_some());
            if let Some((oid, _)) = held.first() {
                out.push(format!(
                    "{id} still holds {} objects nobody needs (first {oid}: {:?})",
                    held.len(),
                    pontoon_osd::reclaim::classify(&map, *id, *oid)
                ));
            }
        }
        out
    }

    /// Objects on running OSDs that hold clones no snapshot of the map
    /// reads (snap trim has not freed them): per OSD, a line naming the
    /// count and the first, and the total count.
    pub fn untrimmed(&self) -> (Vec<String>, usize) {
        let mut out = Vec::new();
        let mut total = 0;
        for (id, osd) in self.osds.borrow().iter() {
            let Some(shard) = &osd.shard else { continue };
            let (view, store) = (shard.map(), shard.store());
            let untrimmed: Vec<_> = store
                .list()
                .into_iter()
                .map(|(oid, _)| oid)
                .filter(|oid| {
                    let v = oid.volume.0;
                    store.snaps(*oid)
                        != store.snaps_trimmed(*oid, view.live_snaps(v), view.snap_seq(v))
                })
                .collect();
            total += untrimmed.len();
            if let Some(oid) = untrimmed.first() {
                out.push(format!(
                    "{id} holds clones no live snapshot reads in {} objects (first {oid}: {:?}; live snapshots {:?})",
                    untrimmed.len(),
                    store.snaps(*oid),
                    view.live_snaps(oid.volume.0)
                ));
            }
        }
        (out, total)
    }

    /// A one-line account of what is not clean.
    pub fn unclean_summary(&self) -> String {
        let u = self.unclean();
        if u.is_empty() {
            "every PG is active+clean".into()
        } else {
            u.join("; ")
        }
    }

    fn map_delay(&self) -> Duration {
        if self.ctx.chance(self.ctx.faults.map_delay) {
            self.ctx.note(Fault::MapDelay);
            Duration::from_millis(self.ctx.range(50, 3_000))
        } else {
            Duration::from_micros(self.ctx.range(100, 20_000))
        }
    }
}

fn osd_record(id: OsdId, cfg: &Config) -> OsdRecord {
    OsdRecord {
        id,
        host: format!("simhost{}", id.0),
        addrs: vec![osd_addr(id)],
        weight: 1024,
        device_bytes: cfg.disk_bytes,
        in_cluster: true,
        down_since_unix: None,
        reported_down: false,
        full: Default::default(),
    }
}

/// A lease the simulated etcd granted, as its holder sees it: its number
/// and the end of its validity, kept up by a keepalive task in the OSD's
/// process (`None` once lost or given up, which also ends the task).
struct SimLease {
    number: u64,
    valid_until: Rc<Cell<Option<Instant>>>,
}

/// An OSD's [`MapSource`] in the simulated cluster: maps from its mailbox
/// (each after its own delay), leases and reports in [`World`], unreachable
/// while the OSD is cut from etcd.
struct SimSource {
    world: Rc<World>,
    id: OsdId,
    maps: mpsc::UnboundedReceiver<Arc<ClusterMap>>,
    lease: Option<SimLease>,
}

impl MapSource for SimSource {
    async fn next_map(&mut self, until: Instant) -> Result<Option<Arc<ClusterMap>>, String> {
        let wait = until.saturating_duration_since(pontoon_rt::now());
        match pontoon_rt::timeout(wait, self.maps.next()).await {
            None => Ok(None),
            Some(None) => Err("the map mailbox closed".into()),
            Some(Some(first)) => {
                // Maps arrive out of order: take the newest queued.
                let mut newest = first;
                while let Ok(m) = self.maps.try_recv() {
                    if m.epoch > newest.epoch {
                        newest = m;
                    }
                }
                Ok(Some(newest))
            }
        }
    }

    async fn clear_previous_life(&mut self) -> Result<bool, String> {
        if self.world.etcd_cut(self.id) {
            return Err("etcd unreachable".into());
        }
        let now = self.world.ctx.exec.elapsed();
        let old = self.world.leases.borrow_mut().remove(&self.id);
        Ok(old.is_some_and(|(_, until)| until > now))
    }

    async fn take_lease(&mut self) -> Result<(Epoch, Instant), String> {
        if self.world.etcd_cut(self.id) {
            return Err("etcd unreachable".into());
        }
        let w = &self.world;
        let ttl = w.cfg.lease_ttl;
        let number = w.next_lease.get();
        w.next_lease.set(number + 1);
        w.leases
            .borrow_mut()
            .insert(self.id, (number, w.ctx.exec.elapsed() + ttl));
        let valid_until = pontoon_rt::now() + ttl - margin(ttl);
        let cell = Rc::new(Cell::new(Some(valid_until)));
        if let Some(old) = self.lease.replace(SimLease {
            number,
            valid_until: cell.clone(),
        }) {
            old.valid_until.set(None);
        }
        pontoon_rt::spawn(keep_alive(w.clone(), self.id, number, cell));
        Ok((w.map.borrow().epoch, valid_until))
    }

    fn lease_valid_until(&self) -> Option<Instant> {
        let now = pontoon_rt::now();
        self.lease
            .as_ref()
            .and_then(|l| l.valid_until.get())
            .filter(|v| *v > now)
    }

    async fn give_up_lease(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        lease.valid_until.set(None);
        if self.world.etcd_cut(self.id) {
            return;
        }
        let mut leases = self.world.leases.borrow_mut();
        if leases
            .get(&self.id)
            .is_some_and(|(n, _)| *n == lease.number)
        {
            leases.remove(&self.id);
        }
    }

    async fn put_report(&mut self, report: &OsdReport) -> Result<(), String> {
        if self.world.etcd_cut(self.id) {
            return Err("etcd unreachable".into());
        }
        self.world
            .reports
            .borrow_mut()
            .insert(self.id, report.clone());
        Ok(())
    }

    fn now(&self) -> Instant {
        pontoon_rt::now()
    }
}

/// Renews lease `number` of `id` as the daemon's keepalive task does: every
/// tenth of the TTL, and 200 ms after a failure (etcd cut off); gives up
/// when etcd no longer holds the lease.
async fn keep_alive(world: Rc<World>, id: OsdId, number: u64, valid: Rc<Cell<Option<Instant>>>) {
    let ttl = world.cfg.lease_ttl;
    let mut pause = renew_period(ttl);
    loop {
        pontoon_rt::sleep(pause).await;
        if valid.get().is_none() {
            return;
        }
        if world.etcd_cut(id) {
            pause = RETRY_AFTER_FAILURE;
            continue;
        }
        pause = renew_period(ttl);
        let now = world.ctx.exec.elapsed();
        let mut leases = world.leases.borrow_mut();
        match leases.get_mut(&id) {
            Some((n, until)) if *n == number && *until > now => {
                *until = now + ttl;
                valid.set(Some(pontoon_rt::now() + ttl - margin(ttl)));
            }
            _ => {
                valid.set(None);
                return;
            }
        }
    }
}

/// An OSD's one shard as its control loop drives it.
struct SimShards {
    shard: Rc<SimShard>,
}

impl ShardSet for SimShards {
    fn apply_map(&self, map: &Arc<ClusterMap>) {
        self.shard.apply_map(Rc::new(shard_map(map)));
    }

    fn set_deadline(&self, until: Option<Instant>) {
        self.shard.deadline().set(until);
    }

    async fn reports(&self) -> Result<Vec<ShardReport>, String> {
        let r = self.shard.report();
        match control::trouble(0, &r) {
            Some(why) => Err(why),
            None => Ok(vec![r]),
        }
    }
}
