#!/usr/bin/env python3
"""Runs the workspace's test binaries, several at a time.

Most of the suite's time is spent waiting (for leases to expire, clusters
to settle, guests to boot), not computing, so on a 2-core machine running
two test binaries at once takes far less time than running them one after
another as `cargo test` does. This script builds every test binary once
(`cargo test --no-run`), then runs them in PONTOON_TEST_JOBS lanes
(default 2), each with `--test-threads PONTOON_TEST_THREADS` (default 1),
the longest first (durations from the last full run on this machine,
$CARGO_TARGET_DIR/test-durations.json, else scripts/test-durations.txt), then the
doc tests. Each binary runs as `cargo test` would run it: in its package's
directory, with the CARGO_* variables cargo sets. Its output goes to
target/test-logs/<name>.log and is printed in full when it fails.
Every binary runs even after a failure; the exit status is 1 if any failed.

Usage: scripts/run-tests.py [--profile ci] [cargo test filter args after --]
"""

import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))


def build(profile):
    """Builds the test binaries; [(name, executable, package dir, package id, crate)]."""
    cmd = ["cargo", "test", "--profile", profile, "--workspace", "--no-run",
           "--message-format=json-render-diagnostics"]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(p.returncode)
    tests = []
    for line in p.stdout.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m["profile"].get("test"):
            continue
        t = m["target"]
        pkg_dir = os.path.dirname(m["manifest_path"])
        pkg = m["package_id"]
        kind = t["kind"][0]
        if kind == "test":
            rel = os.path.relpath(t["src_path"], pkg_dir)
            name = f"{os.path.basename(pkg_dir)}/{rel}"
        else:
            name = f"{os.path.basename(pkg_dir)}/{kind}:{t['name']}"
        tests.append((name, m["executable"], pkg_dir, pkg, t["name"]))
    return tests


def package_env(pkg_dir, pkg_id, crate, profile):
    """The variables cargo sets for a test process."""
    env = dict(os.environ)
    # package_id: "path+file:///work/main/crates/x#pontoon-x@0.1.0" (newer
    # cargo) or "pontoon-x 0.1.0 (path+file://...)" (older).
    name, version = "", ""
    if "#" in pkg_id:
        frag = pkg_id.rsplit("#", 1)[1]
        if "@" in frag:
            name, version = frag.split("@", 1)
        else:
            name, version = os.path.basename(pkg_dir), frag
    else:
        parts = pkg_id.split()
        name, version = parts[0], parts[1] if len(parts) > 1 else ""
    env.update({
        "CARGO_MANIFEST_DIR": pkg_dir,
        "CARGO_PKG_NAME": name,
        "CARGO_PKG_VERSION": version,
        "CARGO_CRATE_NAME": crate.replace("-", "_"),
    })
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], stdout=subprocess.PIPE,
                             text=True).stdout.strip()
    libs = [os.path.join(TARGET, profile, "deps"), os.path.join(TARGET, profile),
            os.path.join(sysroot, "lib")]
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    return env


def load_durations():
    """Seconds per test binary name from the last run, else the checked-in hints."""
    last = os.path.join(TARGET, "test-durations.json")
    try:
        with open(last) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    hints = {}
    try:
        with open(os.path.join(ROOT, "scripts", "test-durations.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and not line.startswith("#"):
                    hints[parts[1]] = float(parts[0])
    except OSError:
        pass
    return hints


def main():
    args = sys.argv[1:]
    profile = "ci"
    if args[:1] == ["--profile"]:
        profile, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    jobs = max(1, int(os.environ.get("PONTOON_TEST_JOBS", "2")))
    threads = os.environ.get("PONTOON_TEST_THREADS", "1")
    tests = build(profile)
    durations = load_durations()
    tests.sort(key=lambda t: -durations.get(t[0], 5.0))
    logs = os.path.join(TARGET, "test-logs")
    os.makedirs(logs, exist_ok=True)
    print(f"running {len(tests)} test binaries in {jobs} lanes, "
          f"--test-threads {threads}; logs in {logs}", flush=True)

    lock = threading.Lock()
    todo = list(tests)
    results = {}
    started = time.monotonic()

    def lane():
        while True:
            with lock:
                if not todo:
                    return
                name, exe, pkg_dir, pkg_id, crate = todo.pop(0)
            log = os.path.join(logs, name.replace("/", "__").replace(":", "_") + ".log")
            t0 = time.monotonic()
            with open(log, "w") as out:
                rc = subprocess.run([exe, "--test-threads", threads] + args, cwd=pkg_dir,
                                    env=package_env(pkg_dir, pkg_id, crate, profile),
                                    stdout=out, stderr=subprocess.STDOUT).returncode
            secs = time.monotonic() - t0
            with open(log) as f:
                text = f.read()
            summary = [l for l in text.splitlines() if l.startswith("test result:")]
            with lock:
                results[name] = (rc, secs)
                status = "ok  " if rc == 0 else "FAIL"
                print(f"{status} {secs:7.1f}s  {name}  "
                      f"{summary[-1][len('test result: '):] if summary else ''}", flush=True)
                if rc != 0:
                    print(f"---- {name} (exit {rc}) ----\n{text}\n---- end of {name} ----",
                          flush=True)

    lanes = [threading.Thread(target=lane) for _ in range(jobs)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()

    doc = subprocess.run(["cargo", "test", "--profile", profile, "--workspace", "--doc", "--"]
                         + args, cwd=ROOT).returncode
    results["doc tests"] = (doc, 0.0)

    if not args:  # a filtered run's times say nothing of the next full one
        with open(os.path.join(TARGET, "test-durations.json"), "w") as f:
            json.dump({n: round(s, 1) for n, (rc, s) in results.items() if rc == 0 and s}, f,
                      indent=1, sort_keys=True)
    failed = sorted(n for n, (rc, _) in results.items() if rc != 0)
    total = time.monotonic() - started
    print(f"\n{len(results) - len(failed)} of {len(results)} passed in {total:.0f} s", flush=True)
    if failed:
        print("FAILED: " + ", ".join(failed), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
