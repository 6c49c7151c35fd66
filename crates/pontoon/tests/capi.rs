//! libpontoon's C example (crates/capi/examples/c/example.c) built with
//! `cc -Wall -Werror` against the generated header and libpontoon.so, run
//! against a real local three-OSD cluster on a volume of a size-1 pool and
//! one of a size-3 pool: asynchronous writes and reads of 4 KiB-1 MiB
//! extents 64 in flight, verified; flush, discard, write-zeroes, synchronous
//! I/O, the event fd, fork(), and every documented error code. It must exit
//! 0 with its summary line. With PONTOON_LONG=1 it also runs under
//! valgrind's memcheck (errors and definite leaks fail it).
//!
//! The library is the one `cargo test --workspace` built (see
//! [`library`]), or built here when the sources are newer.
//!
//! Needs etcd (Debian's etcd-server) and a C compiler; valgrind for the
//! long mode.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use pontoon_testtools::run;

/// Longest building libpontoon may take (nothing to do in the suite).
const BUILD_LIMIT: Duration = Duration::from_secs(900);
/// Longest one run of the example may take.
const RUN_LIMIT: Duration = Duration::from_secs(180);
/// Longest the run under valgrind may take.
const VALGRIND_LIMIT: Duration = Duration::from_secs(900);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// This test's profile directory (target/<profile>) and the cargo
/// arguments that build into it.
fn profile() -> (PathBuf, Vec<String>) {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/capi-<hash>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf();
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let args = match name {
        "debug" => vec!["--profile".into(), "test".into()],
        "release" => vec!["--release".into()],
        p => vec!["--profile".into(), p.into()],
    };
    (dir, args)
}

/// The crate directories libpontoon is built from: crates/capi and the
/// workspace crates it depends on, directly or not (from the Cargo.toml
/// files: `pontoon-x` dependencies, located through the workspace's
/// `pontoon-x = { path = "crates/x" }` lines).
fn library_crates() -> Vec<PathBuf> {
    let root = repo();
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let path_of = |name: &str| -> Option<PathBuf> {
        workspace.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            if k.trim() != name {
                return None;
            }
            let rel = v.split("path").nth(1)?.split('"').nth(1)?;
            Some(root.join(rel))
        })
    };
    let mut todo = vec![root.join("crates/capi")];
    let mut seen: Vec<PathBuf> = Vec::new();
    while let Some(dir) = todo.pop() {
        if seen.contains(&dir) {
            continue;
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let mut section = String::new();
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
            } else if (section == "[dependencies]" || section == "[build-dependencies]")
                && line.starts_with("pontoon-")
                && let Some(name) = line.split(['=', '.']).next()
                && let Some(p) = path_of(name.trim())
            {
                todo.push(p);
            }
        }
        seen.push(dir);
    }
    seen
}

/// Newest modification time of libpontoon's sources (every file under
/// its crates' directories, and Cargo.lock).
fn newest_source() -> SystemTime {
    fn walk(dir: &Path, newest: &mut SystemTime) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, newest);
            } else if let Ok(t) = e.metadata().and_then(|m| m.modified()) {
                *newest = (*newest).max(t);
            }
        }
    }
    let mut newest = modified(&repo().join("Cargo.lock")).unwrap_or(SystemTime::UNIX_EPOCH);
    for dir in library_crates() {
        walk(&dir.join("src"), &mut newest);
        for f in ["Cargo.toml", "build.rs", "cbindgen.toml"] {
            if let Some(t) = modified(&dir.join(f)) {
                newest = newest.max(t);
            }
        }
    }
    newest
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// libpontoon.so and pontoon.h of the current sources, copied into
/// `out/lib` and `out/lib/include`; returns `out/lib`.
///
/// `cargo test --workspace` (the suite) builds this crate's cdylib as
/// target/<profile>/deps/libpontoon.so (it does not copy it up to
/// target/<profile>/, as `cargo build` does) and build.rs writes the
/// header to target/<profile>/include/. The newer of the two libraries is
/// used when none of its sources changed after it was built;
/// otherwise (a test run alone after an edit) `cargo build -p
/// pontoon-capi` makes it. That build is not the default because its
/// feature set differs from the workspace's: in the suite it would build
/// a second copy of many dependencies.
fn library(out: &Path) -> PathBuf {
    let (dir, args) = profile();
    let t0 = Instant::now();
    let newest = |cands: &[PathBuf]| {
        cands
            .iter()
            .filter_map(|p| Some((modified(p)?, p.clone())))
            .max()
    };
    let cands = [dir.join("deps/libpontoon.so"), dir.join("libpontoon.so")];
    let so = match newest(&cands) {
        Some((t, p)) if t >= newest_source() => p,
        _ => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            run(
                Command::new(cargo)
                    .arg("build")
                    .args(&args)
                    .args(["-p", "pontoon-capi"])
                    .current_dir(repo()),
                BUILD_LIMIT,
            )
            .ok();
            dir.join("libpontoon.so")
        }
    };
    let header = dir.join("include/pontoon.h");
    assert!(
        so.is_file() && header.is_file(),
        "no {} and {}",
        so.display(),
        header.display()
    );
    let lib = out.join("lib");
    std::fs::create_dir_all(lib.join("include")).expect("mkdir lib/include");
    std::fs::copy(&so, lib.join("libpontoon.so")).expect("copy libpontoon.so");
    std::fs::copy(&header, lib.join("include/pontoon.h")).expect("copy pontoon.h");
    eprintln!(
        "libpontoon: {} (from {} crates; {:?})",
        so.display(),
        library_crates().len(),
        t0.elapsed()
    );
    lib
}

/// Compiles the example (warnings are errors) into `out`.
fn compile_example(lib: &Path, out: &Path) -> PathBuf {
    let exe = out.join("example");
    let src = repo().join("crates/capi/examples/c/example.c");
    run(
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args([
                "-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread",
            ])
            .arg("-I")
            .arg(lib.join("include"))
            .arg(&src)
            .arg("-L")
            .arg(lib)
            .arg("-lpontoon")
            .arg("-o")
            .arg(&exe),
        Duration::from_secs(120),
    )
    .ok();
    // The header is valid C++ too.
    if Command::new("c++").arg("--version").output().is_ok() {
        run(
            Command::new("c++")
                .args(["-fsyntax-only", "-Wall", "-Werror", "-x", "c++"])
                .arg(lib.join("include/pontoon.h")),
            Duration::from_secs(60),
        )
        .ok();
    }
    exe
}

/// Runs the example (under `wrapper`, if any) on `volume`, the cluster
/// given as an argument or, with `via_env`, as $PONTOON_CLUSTER; checks
/// its exit status and summary; returns its stdout.
fn run_example(
    exe: &Path,
    lib: &Path,
    dir: &Path,
    volume: &str,
    via_env: bool,
    wrapper: &[&str],
    limit: Duration,
) -> String {
    let mut cmd = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.env("LD_LIBRARY_PATH", lib)
        .env_remove("PONTOON_ETCD")
        .env_remove("PONTOON_CLUSTER_NAME");
    if !wrapper.is_empty() {
        cmd.arg("--no-fork");
    }
    if via_env {
        cmd.env("PONTOON_CLUSTER", dir).arg(volume);
    } else {
        cmd.env_remove("PONTOON_CLUSTER").arg(dir).arg(volume);
    }
    let t0 = Instant::now();
    let r = run(&mut cmd, limit);
    let elapsed = t0.elapsed();
    assert!(r.success(), "example on {volume} failed\n{}", r.report());
    let summary = r
        .stdout
        .lines()
        .find(|l| l.starts_with("pontoon example: "))
        .unwrap_or_else(|| panic!("no summary line\n{}", r.report()));
    assert!(
        summary.contains(" 0 failed") && !summary.contains(" 0 checks passed"),
        "{summary}\n{}",
        r.report()
    );
    eprintln!(
        "{volume}{}: {summary} [{elapsed:?}]",
        if wrapper.is_empty() {
            ""
        } else {
            " (valgrind)"
        }
    );
    r.stdout
}

#[test]
fn c_example_passes_on_size_1_and_size_3_pools() {
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-capi-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let lib = library(&dir);
    let exe = compile_example(&lib, &dir);

    let started = Instant::now();
    // In authenticated mode: libpontoon proves client.admin's key, found
    // in the cluster directory's keys/ like the CLI finds it.
    let _up = Up::start_sized(&dir, 3, "1G", &["--ms-mode", "authenticated"]);
    assert_eq!(
        ok(&dir, &["config", "get", "ms_mode"]).trim(),
        "authenticated"
    );
    ok(
        &dir,
        &["pool", "create", "one", "--size", "1", "--pgs", "16"],
    );
    ok(
        &dir,
        &["pool", "create", "three", "--size", "3", "--pgs", "16"],
    );
    ok(
        &dir,
        &["volume", "create", "v1", "--size", "256M", "--pool", "one"],
    );
    ok(
        &dir,
        &[
            "volume", "create", "v3", "--size", "256M", "--pool", "three",
        ],
    );
    wait_status(&dir, "32 PGs active+clean", |s| {
        s["pgs"]["states"]["active+clean"].as_u64() == Some(32)
    });
    eprintln!("cluster ready after {:?}", started.elapsed());

    run_example(&exe, &lib, &dir, "v1", false, &[], RUN_LIMIT);
    run_example(&exe, &lib, &dir, "v3", true, &[], RUN_LIMIT);

    // Memcheck: invalid accesses, bad frees, definite leaks. Not
    // uninitialised values: memcheck does not see the kernel fill io_uring
    // receive buffers, so every byte read from an OSD looks undefined to it.
    // Nor fork(): valgrind 3.19 asserts in a child that maps a new io_uring.
    if std::env::var("PONTOON_LONG").is_ok_and(|v| v == "1") {
        run_example(
            &exe,
            &lib,
            &dir,
            "v3",
            false,
            &[
                "valgrind",
                "--tool=memcheck",
                "--error-exitcode=99",
                "--undef-value-errors=no",
                "--leak-check=full",
                "--show-leak-kinds=definite",
                "--errors-for-leak-kinds=definite",
            ],
            VALGRIND_LIMIT,
        );
    }
}
