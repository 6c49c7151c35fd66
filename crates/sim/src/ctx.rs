//! What every part of one simulation shares: the executor, the seeded
//! generator, the fault rates, the fault counters and the event trace.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::executor::Executor;

/// A kind of fault the simulator injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A message dropped (the caller times out).
    Loss,
    /// A request delivered a second time, late.
    Duplicate,
    /// A message held up for up to 400 ms (reordering it past others).
    Delay,
    /// An OSD process killed; its disk keeps a random part of its cache.
    Crash,
    /// A crashed OSD started again.
    Restart,
    /// Two nodes cut apart, one way or both.
    Partition,
    /// An OSD cut from etcd: its liveness lease expires.
    LeaseExpiry,
    /// An OSD's disk answering slowly for a while.
    SlowDisk,
    /// A data block on one OSD's disk no longer matching its checksum.
    Corruption,
    /// An OSD destroyed for good and a new, empty one added.
    Replace,
    /// A map change reaching a process late.
    MapDelay,
    /// A client process killed with operations in flight, then started again.
    ClientCrash,
    /// An OSD process stopped for a while, as by SIGSTOP, then continued.
    Freeze,
    /// An OSD's drive failing every write: the OSD gives up and exits, and
    /// is replaced.
    DiskFailure,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Probabilities of the per-message faults, chosen by the seed.
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultRates {
    /// Per message leg.
    pub loss: f64,
    /// Per request.
    pub duplicate: f64,
    /// Per message leg.
    pub delay: f64,
    /// Per map delivery.
    pub map_delay: f64,
}

/// Longest trace kept (older events are dropped first).
const TRACE_CAP: usize = 200_000;

/// The shared state of one simulation.
pub struct Ctx {
    /// The executor and virtual clock.
    pub exec: Executor,
    rng: Rc<RefCell<StdRng>>,
    /// Per-message fault rates (zeroed when faults stop).
    pub faults: FaultRates,
    faults_on: Cell<bool>,
    counts: RefCell<BTreeMap<Fault, u64>>,
    trace: RefCell<std::collections::VecDeque<(Duration, String)>>,
    /// Print each event as it happens.
    pub echo: bool,
}

impl Ctx {
    /// A context for `seed`.
    pub fn new(seed: u64, faults: FaultRates, echo: bool) -> Rc<Self> {
        let rng = Rc::new(RefCell::new(StdRng::seed_from_u64(seed)));
        Rc::new(Self {
            exec: Executor::new(rng.clone()),
            rng,
            faults,
            faults_on: Cell::new(true),
            counts: RefCell::new(BTreeMap::new()),
            trace: RefCell::new(std::collections::VecDeque::new()),
            echo,
        })
    }

    /// True with probability `p` while faults are on.
    pub fn chance(&self, p: f64) -> bool {
        self.faults_on.get() && p > 0.0 && self.rng.borrow_mut().random_bool(p.min(1.0))
    }

    /// A uniform integer in `lo..hi` (`lo` if empty).
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        self.rng.borrow_mut().random_range(lo..hi)
    }

    /// A uniform index below `n` (`n` > 0).
    pub fn pick(&self, n: usize) -> usize {
        debug_assert!(n > 0);
        self.rng.borrow_mut().random_range(0..n.max(1))
    }

    /// Whether per-message faults still happen.
    pub fn faults_on(&self) -> bool {
        self.faults_on.get()
    }

    /// Stops per-message faults (the heal phase).
    pub fn stop_faults(&self) {
        self.faults_on.set(false);
    }

    /// Counts one injected fault.
    pub fn note(&self, f: Fault) {
        *self.counts.borrow_mut().entry(f).or_default() += 1;
    }

    /// Faults injected so far, by kind.
    pub fn counts(&self) -> BTreeMap<Fault, u64> {
        self.counts.borrow().clone()
    }

    /// Records an event at the current virtual time.
    pub fn log(&self, what: impl Into<String>) {
        let at = self.exec.elapsed();
        let what = what.into();
        if self.echo {
            println!("{} {what}", stamp(at));
        }
        let mut t = self.trace.borrow_mut();
        if t.len() == TRACE_CAP {
            t.pop_front();
        }
        t.push_back((at, what));
    }

    /// The last `n` events, one per line.
    pub fn trace_tail(&self, n: usize) -> String {
        let t = self.trace.borrow();
        let skip = t.len().saturating_sub(n);
        t.iter()
            .skip(skip)
            .map(|(at, w)| format!("{} {w}\n", stamp(*at)))
            .collect()
    }

    /// A digest of the whole trace, to prove a replay took the same path.
    pub fn trace_digest(&self) -> u32 {
        let mut crc = 0u32;
        for (at, w) in self.trace.borrow().iter() {
            crc = crc32c::crc32c_append(crc, &at.as_nanos().to_le_bytes());
            crc = crc32c::crc32c_append(crc, w.as_bytes());
        }
        crc
    }
}

/// Virtual time as seconds with microseconds.
pub fn stamp(at: Duration) -> String {
    format!("[{:>4}.{:06}]", at.as_secs(), at.subsec_micros())
}

thread_local! {
    static LOGGING_TO: RefCell<std::rc::Weak<Ctx>> = const { RefCell::new(std::rc::Weak::new()) };
}

/// Sends the real code's `tracing` events (info and above, or debug with
/// `PONTOON_SIM_LOG=debug`) into `ctx`'s trace, stamped with virtual time,
/// until the guard is dropped.
pub fn capture_logs(ctx: &Rc<Ctx>) -> tracing::subscriber::DefaultGuard {
    LOGGING_TO.with(|l| *l.borrow_mut() = Rc::downgrade(ctx));
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(match std::env::var("PONTOON_SIM_LOG").as_deref() {
            Ok("debug") => tracing::Level::DEBUG,
            _ => tracing::Level::INFO,
        })
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .with_writer(|| TraceWriter(Vec::new()))
        .finish();
    tracing::subscriber::set_default(subscriber)
}

/// Collects one formatted event and logs it when dropped.
struct TraceWriter(Vec<u8>);

impl std::io::Write for TraceWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0).trim_end().to_string();
        if line.is_empty() {
            return;
        }
        LOGGING_TO.with(|l| {
            if let Some(ctx) = l.borrow().upgrade() {
                ctx.log(format!("  | {line}"));
            }
        });
    }
}
