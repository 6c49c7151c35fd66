//! Deterministic simulation of Pontoon's replication, peering and recovery.
//!
//! The real shard (`pontoon_osd::Shard`), the manager's decision function
//! (`pontoon_mgr::decide`) and the client library's retry loop run on one
//! thread, on a seeded executor with a virtual clock. Time comes through
//! `pontoon_rt`, the network through the OSD's `Peers` trait and the
//! client's `CustomWire`, disks through the store's `BlockDevice`, and the
//! cluster map is a value the simulated manager changes. A fault injector
//! crashes and restarts OSDs, cuts the network, lets leases lapse, slows
//! disks, corrupts blocks and replaces OSDs; a checker verifies every
//! client operation against a single order per block, and that the
//! cluster heals. Snapshots are taken and removed, and a clone is made and
//! written, under the same faults; every snapshot read must be one
//! consistent cut of its volume's history (`cuts`, `snaps`). A seed
//! replays exactly.
//!
//! See `docs/simulation.md` for the fault model and what the checker
//! proves.

pub mod checker;
pub mod ctx;
pub mod cuts;
pub mod disk;
pub mod executor;
pub mod nemesis;
pub mod net;
pub mod run;
pub mod snaps;
pub mod workload;
pub mod world;

pub use run::{Outcome, Profile, RunOptions, run_seed};
