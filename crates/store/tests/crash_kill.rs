//! Crash consistency by SIGKILL: a writer process hammers a store file with
//! concurrent writes, discards and deletes, logging intent and
//! acknowledgements; it is killed at a random moment, the store is reopened
//! and every object must hold exactly its acknowledged history, or that
//! plus its one in-flight operation applied whole (never torn). Repeated
//! for 50 rounds (500 with PONTOON_LONG=1), each round continuing from the
//! state the previous one left.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use pontoon_store::testkit::{LogKind, LoggedOp, block_pattern, block_seed, parse_log};
use pontoon_store::{FileDevice, FormatOptions, Store};
use pontoon_types::{BLOCK_SIZE, ObjectId, Version, mix64};

const TASKS: u64 = 12;
const PER_TASK: u64 = 3;
const OBJECT_BLOCKS: u32 = 64;

/// Expected contents of one object: version and block seeds.
#[derive(Clone, Debug, PartialEq, Default)]
struct Obj {
    version: Version,
    blocks: HashMap<u32, u64>,
}

fn apply(state: &mut HashMap<ObjectId, Obj>, op: &LoggedOp) {
    match op.kind {
        LogKind::Write => {
            let o = state.entry(op.oid).or_default();
            o.version = op.version;
            for i in 0..op.nblk {
                o.blocks.insert(op.start + i, block_seed(op.seed, i));
            }
        }
        LogKind::Discard => {
            if let Some(o) = state.get_mut(&op.oid) {
                o.version = op.version;
                o.blocks
                    .retain(|b, _| *b < op.start || *b >= op.start + op.nblk);
            }
        }
        LogKind::Delete => {
            state.remove(&op.oid);
        }
    }
}

fn image(o: Option<&Obj>) -> Vec<u8> {
    let mut v = vec![0u8; OBJECT_BLOCKS as usize * BLOCK_SIZE];
    if let Some(o) = o {
        for (b, s) in &o.blocks {
            let at = *b as usize * BLOCK_SIZE;
            v[at..at + BLOCK_SIZE].copy_from_slice(&block_pattern(*s));
        }
    }
    v
}

#[test]
fn sigkill_at_random_moments_never_loses_or_tears_acknowledged_writes() {
    let rounds: u64 = if std::env::var_os("PONTOON_LONG").is_some() {
        500
    } else {
        50
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    FileDevice::create_file(&path, 160 << 20).unwrap();
    let rt = compio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dev = FileDevice::open(&path).unwrap();
        let opts = FormatOptions {
            object_size: OBJECT_BLOCKS as u64 * 4096,
            journal_blocks: Some(4096),
            ..Default::default()
        };
        Store::format(&dev, None, &opts).await.unwrap();
    });
    let mut state: HashMap<ObjectId, Obj> = HashMap::new();
    let mut total_acked = 0usize;
    let mut total_inflight_applied = 0usize;
    for round in 1..=rounds {
        let log_path = dir.path().join(format!("log.{round}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_store-crash-writer"))
            .args([
                path.to_str().unwrap(),
                log_path.to_str().unwrap(),
                &mix64(round).to_string(),
                &round.to_string(),
                &TASKS.to_string(),
                &PER_TASK.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the writer");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "round {round}: writer did not start");
        std::thread::sleep(Duration::from_millis(20 + mix64(round ^ 77) % 400));
        // SIGKILL, no chance to clean up.
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "round {round}: writer exited by itself: {status}"
        );

        let log = parse_log(&std::fs::read_to_string(&log_path).unwrap());
        let mut pending: HashMap<ObjectId, LoggedOp> = HashMap::new();
        for (op, acked) in &log {
            if *acked {
                apply(&mut state, op);
                total_acked += 1;
            } else {
                assert!(
                    pending.insert(op.oid, *op).is_none(),
                    "two ops in flight on one object"
                );
            }
        }
        let found: HashMap<ObjectId, Option<Obj>> = rt.block_on(async {
            let dev = FileDevice::open(&path).unwrap();
            let (store, bg) = Store::open(dev, None, 0).await.unwrap();
            compio::runtime::spawn(bg).detach();
            let mut found = HashMap::new();
            for t in 0..TASKS {
                for i in 0..PER_TASK {
                    let oid = ObjectId::new(t, i);
                    let r = store.read(oid, 0, OBJECT_BLOCKS as u64 * 4096).await.unwrap();
                    let acked = state.get(&oid);
                    let mut ok = r.data[..] == image(acked)[..]
                        && store.version(oid) == acked.map(|o| o.version);
                    let mut outcome = acked.cloned();
                    if !ok && let Some(p) = pending.get(&oid) {
                        let mut s2 = state.clone();
                        apply(&mut s2, p);
                        let with = s2.get(&oid);
                        ok = r.data[..] == image(with)[..] && store.version(oid) == with.map(|o| o.version);
                        outcome = with.cloned();
                    }
                    assert!(
                        ok,
                        "round {round}: object {oid} matches neither its acknowledged state nor that plus its in-flight op ({:?})",
                        pending.get(&oid)
                    );
                    found.insert(oid, outcome);
                }
            }
            store.close().await.unwrap();
            found
        });
        // The in-flight ops that did land become part of the history.
        for (oid, o) in found {
            if state.get(&oid) != o.as_ref() {
                total_inflight_applied += 1;
            }
            match o {
                Some(o) => state.insert(oid, o),
                None => state.remove(&oid),
            };
        }
    }
    println!(
        "{rounds} SIGKILL rounds: {total_acked} acknowledged ops verified, {total_inflight_applied} in-flight ops found applied whole"
    );
    assert!(
        total_acked > rounds as usize * 10,
        "the writer made progress"
    );
}
