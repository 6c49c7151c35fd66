//! The clients' workload and its history: writers and readers on a small
//! set of 4 KiB blocks, every write a value never written before, every
//! operation recorded with its invocation and completion times.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use pontoon_client::Volume;

use crate::ctx::Ctx;

/// Bytes per block the workload addresses.
pub const BLOCK: usize = 4096;

/// What an operation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Wrote the value with this id.
    Write(u64),
    /// Read the block.
    Read,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still running.
    Pending,
    /// A write acknowledged, or a read that returned this value id (0: never written).
    Ok(Option<u64>),
    /// A read that returned bytes no write produced.
    Garbled(String),
    /// An error: a write's effect is unknown, a read returned nothing.
    Failed(String),
}

/// One client operation.
#[derive(Clone, Debug)]
pub struct Op {
    /// Which client process issued it.
    pub client: u32,
    /// Which block.
    pub block: u32,
    /// Write or read.
    pub kind: Kind,
    /// Virtual time of the call.
    pub invoke: Duration,
    /// Virtual time it returned.
    pub complete: Option<Duration>,
    /// Result.
    pub outcome: Outcome,
}

#[cfg(test)]
impl Op {
    /// A write made up for the checkers' tests: value `id` to `block` by
    /// `client`, called at `a` ms and returned at `b` ms (`None`: it
    /// failed).
    pub(crate) fn test_write(client: u32, block: u32, id: u64, a: u64, b: Option<u64>) -> Op {
        let ms = Duration::from_millis;
        Op {
            client,
            block,
            kind: Kind::Write(id),
            invoke: ms(a),
            complete: b.map(ms),
            outcome: match b {
                Some(_) => Outcome::Ok(None),
                None => Outcome::Failed("timeout".into()),
            },
        }
    }
}

/// Every operation of a run, in invocation order.
#[derive(Default)]
pub struct History {
    ops: RefCell<Vec<Op>>,
    next_value: Cell<u64>,
}

impl History {
    /// An empty history whose write values start after `first` (so two
    /// histories whose values may meet in one image never share one).
    pub fn starting_at(first: u64) -> Self {
        let h = Self::default();
        h.next_value.set(first);
        h
    }

    /// A fresh value id.
    pub fn next_value(&self) -> u64 {
        let v = self.next_value.get() + 1;
        self.next_value.set(v);
        v
    }

    pub(crate) fn invoke(&self, ctx: &Ctx, client: u32, block: u32, kind: Kind) -> usize {
        let mut ops = self.ops.borrow_mut();
        ops.push(Op {
            client,
            block,
            kind,
            invoke: ctx.exec.elapsed(),
            complete: None,
            outcome: Outcome::Pending,
        });
        ops.len() - 1
    }

    pub(crate) fn complete(&self, ctx: &Ctx, i: usize, outcome: Outcome) {
        let mut ops = self.ops.borrow_mut();
        let op = &mut ops[i];
        op.complete = Some(ctx.exec.elapsed());
        let took = ctx.exec.elapsed().saturating_sub(op.invoke);
        let what = match &op.kind {
            Kind::Write(id) => format!("write #{id}"),
            Kind::Read => "read".into(),
        };
        let result = match &outcome {
            Outcome::Ok(Some(0)) => "zeros".to_string(),
            Outcome::Ok(Some(v)) => format!("#{v}"),
            Outcome::Ok(None) => "ok".into(),
            Outcome::Garbled(e) => format!("GARBLED {e}"),
            Outcome::Failed(e) => format!("failed: {e}"),
            Outcome::Pending => "pending".into(),
        };
        ctx.log(format!(
            "client.{} {what} block {} -> {result} ({took:?})",
            op.client, op.block
        ));
        op.outcome = outcome;
    }

    /// Ends every pending operation of `client`, whose process died: a
    /// write's effect is then unknown, a read returned nothing.
    pub fn abandon(&self, ctx: &Ctx, client: u32) {
        let pending: Vec<usize> = self
            .ops
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, o)| o.client == client && o.outcome == Outcome::Pending)
            .map(|(i, _)| i)
            .collect();
        for i in pending {
            self.complete(ctx, i, Outcome::Failed("the client process crashed".into()));
        }
    }

    /// Operations not yet returned.
    pub fn pending(&self) -> usize {
        self.ops
            .borrow()
            .iter()
            .filter(|o| o.outcome == Outcome::Pending)
            .count()
    }

    /// A copy of every operation.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.borrow().clone()
    }
}

/// The 4 KiB a write of value `id` stores: the id, then words derived
/// from it, so a torn, stale-mixed or corrupt block cannot pass as a value.
pub fn encode(id: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    for (i, w) in b.chunks_exact_mut(8).enumerate() {
        let word = if i == 0 { id } else { word_of(id, i as u64) };
        w.copy_from_slice(&word.to_le_bytes());
    }
    b
}

fn word_of(id: u64, i: u64) -> u64 {
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
}

/// The value id a block holds: 0 for zeros, else the id if every word matches.
pub fn decode(b: &[u8]) -> Result<u64, String> {
    if b.len() != BLOCK {
        return Err(format!("{} bytes instead of {BLOCK}", b.len()));
    }
    if b.iter().all(|x| *x == 0) {
        return Ok(0);
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    let id = word(0);
    match (1..BLOCK / 8).find(|&i| word(i) != word_of(id, i as u64)) {
        None if id != 0 => Ok(id),
        _ => Err(format!(
            "block claims value #{id} but its words do not match"
        )),
    }
}

/// Where workload block `block` lives in the volume.
pub fn offset_of(block: u32, blocks_per_object: u32, object_size: u64) -> u64 {
    let (obj, within) = (block / blocks_per_object, block % blocks_per_object);
    u64::from(obj) * object_size + u64::from(within) * BLOCK as u64
}

/// Shape of the workload.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Blocks addressed.
    pub blocks: u32,
    /// Blocks used per object.
    pub blocks_per_object: u32,
    /// Bytes per object.
    pub object_size: u64,
    /// Longest pause between a worker's operations.
    pub max_think: Duration,
}

/// One worker: random writes and reads until virtual time `until`.
pub async fn worker(
    ctx: Rc<Ctx>,
    hist: Rc<History>,
    vol: Volume,
    client: u32,
    shape: Shape,
    until: Duration,
) {
    while ctx.exec.elapsed() < until {
        let block = ctx.pick(shape.blocks as usize) as u32;
        let at = offset_of(block, shape.blocks_per_object, shape.object_size);
        if ctx.range(0, 2) == 0 {
            let id = hist.next_value();
            let i = hist.invoke(&ctx, client, block, Kind::Write(id));
            let out = match vol.write_at(at, &encode(id)).await {
                Ok(()) => Outcome::Ok(None),
                Err(e) => Outcome::Failed(e.to_string()),
            };
            hist.complete(&ctx, i, out);
        } else {
            read_one(&ctx, &hist, &vol, client, block, at).await;
        }
        let think = ctx.range(0, shape.max_think.as_micros() as u64);
        pontoon_rt::sleep(Duration::from_micros(think)).await;
    }
}

/// Reads `block` once and records it.
pub async fn read_one(
    ctx: &Rc<Ctx>,
    hist: &History,
    vol: &Volume,
    client: u32,
    block: u32,
    at: u64,
) {
    let i = hist.invoke(ctx, client, block, Kind::Read);
    let out = match vol.read_at(at, BLOCK as u64).await {
        Ok(buf) => match decode(&buf) {
            Ok(v) => Outcome::Ok(Some(v)),
            Err(e) => Outcome::Garbled(e),
        },
        Err(e) => Outcome::Failed(e.to_string()),
    };
    hist.complete(ctx, i, out);
}

/// Which 4 KiB blocks of two copies of an object differ, with the
/// workload values they hold: ` (block 1: #26 vs zeros, ...)`, empty if
/// none does (at most 8 are named).
pub fn describe_difference(a: &[u8], b: &[u8]) -> String {
    let name = |blk: &[u8]| match decode(blk) {
        Ok(0) => "zeros".to_string(),
        Ok(v) => format!("#{v}"),
        Err(_) => "garbage".to_string(),
    };
    let diffs: Vec<String> = a
        .chunks(BLOCK)
        .zip(b.chunks(BLOCK))
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .take(8)
        .map(|(i, (x, y))| format!("block {i}: {} vs {}", name(x), name(y)))
        .collect();
    if diffs.is_empty() {
        String::new()
    } else {
        format!(" ({})", diffs.join(", "))
    }
}
