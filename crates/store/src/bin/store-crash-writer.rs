//! Crash-test writer: opens a store file and writes, discards and deletes
//! as fast as it can from many concurrent tasks, logging each operation's
//! intent before issuing it and its acknowledgement after, until killed.
//!
//! Usage: store-crash-writer STORE LOG SEED EPOCH TASKS OBJECTS_PER_TASK
//! Each task owns its objects (volume = task, index = 0..OBJECTS_PER_TASK)
//! and issues one operation at a time, so every object has at most one
//! operation in flight when the process dies.

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::io::Write;
use std::rc::Rc;

use pontoon_buf::AlignedBuf;
use pontoon_store::testkit::{LogKind, LoggedOp, block_pattern, block_seed};
use pontoon_store::{FileDevice, Store};
use pontoon_types::{BLOCK_SIZE, ObjectId, Version, mix64};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 7 {
        eprintln!("usage: store-crash-writer STORE LOG SEED EPOCH TASKS OBJECTS_PER_TASK");
        std::process::exit(2);
    }
    let num = |i: usize| -> u64 {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!("argument {i} ({}) is not a number", args[i]);
            std::process::exit(2)
        })
    };
    let (seed, epoch, tasks, per_task) = (num(3), num(4), num(5), num(6));
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args[2])
        .unwrap_or_else(|e| {
            eprintln!("cannot open log {}: {e}", args[2]);
            std::process::exit(1)
        });
    let log = Rc::new(RefCell::new(log));
    let rt = compio::runtime::Runtime::new().expect("io_uring runtime");
    rt.block_on(async move {
        let dev = FileDevice::open(args[1].as_ref()).expect("open store file");
        let (store, bg) = Store::open(dev, None, 0).await.expect("open store");
        compio::runtime::spawn(bg).detach();
        let object_blocks = (store.object_size() / BLOCK_SIZE as u64) as u32;
        println!("ready");
        let _ = std::io::stdout().flush();
        let mut handles = Vec::new();
        for t in 0..tasks {
            let store = store.clone();
            let log = log.clone();
            handles.push(compio::runtime::spawn(async move {
                let mut x = mix64(seed ^ ((t + 1) * 0x1234_5678));
                for i in 0u64.. {
                    x = mix64(x);
                    let oid = ObjectId::new(t, x % per_task);
                    let start = ((x >> 8) % object_blocks as u64) as u32;
                    let nblk = if (x >> 20).is_multiple_of(4) {
                        ((x >> 24) as u32 % 48 + 1).min(object_blocks - start)
                    } else {
                        1
                    };
                    let kind = match (x >> 32) % 32 {
                        0 => LogKind::Delete,
                        1..=3 => LogKind::Discard,
                        _ => LogKind::Write,
                    };
                    let op = LoggedOp {
                        id: (t << 40) | i,
                        kind,
                        oid,
                        start,
                        nblk,
                        seed: mix64(x ^ epoch),
                        version: Version::new(epoch, (t << 40) | (i + 1)),
                    };
                    append(&log, op.intent_line().as_bytes());
                    let r = match kind {
                        LogKind::Write => {
                            let mut data = AlignedBuf::with_capacity(nblk as usize * BLOCK_SIZE);
                            for b in 0..nblk {
                                data.extend_from_slice(&block_pattern(block_seed(op.seed, b)));
                            }
                            store
                                .write(oid, start as u64 * 4096, data, op.version)
                                .await
                        }
                        LogKind::Discard => {
                            store
                                .discard(oid, start as u64 * 4096, nblk as u64 * 4096, op.version)
                                .await
                        }
                        LogKind::Delete => store.delete(oid, op.version).await,
                    };
                    if let Err(e) = r {
                        eprintln!("operation failed: {e}");
                        std::process::exit(1);
                    }
                    append(&log, format!("A {}\n", op.id).as_bytes());
                }
            }));
        }
        for h in handles {
            let _ = h.await;
        }
    });
}

/// One write(2) per line, so a SIGKILL leaves whole lines (the page cache
/// survives the process).
fn append(log: &Rc<RefCell<std::fs::File>>, line: &[u8]) {
    let f = log.borrow();
    if let Err(e) = (&*f).write_all(line) {
        eprintln!("log write failed: {e}");
        std::process::exit(1);
    }
}
