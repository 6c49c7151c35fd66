//! `pontoon osd smart` (and so `pontoon_osd::wear`, which the OSD uses
//! for its device) against a real NVMe controller: QEMU's emulated one,
//! seen by the Linux kernel's NVMe PCI driver in the vm-initiator guest.
//! The test-profile `pontoon` binary and its shared libraries go into the
//! guest as a tar on a read-only virtio disk (the guest's initramfs holds
//! only busybox), with the NVMe PCI driver module, which the harness's
//! initramfs lacks. The guest reads the wear, writes 64 MiB with O_DIRECT
//! and reads it again: Data Units Written must have grown by what was
//! written (units of 512,000 bytes). On the host, a regular file is refused
//! with a one-line error.
//!
//! Needs the vm-initiator harness (root, QEMU; one TCG boot).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pontoon_testtools::{run_ok, run_vm_env, vm_passed};
use serde_json::Value;

/// The guest script.
const GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nvme_smart_guest.sh");
/// MiB the guest writes between the two readings.
const WRITE_MB: u64 = 64;
/// Bytes in one NVMe data unit.
const UNIT: u64 = 512_000;
/// The emulated namespace's size.
const NVME_BYTES: u64 = 256 << 20;

/// `pontoon osd smart` with `args`, run on the host.
fn smart(args: &[&str]) -> std::process::Output {
    Command::new(PONTOON)
        .args(["osd", "smart"])
        .args(args)
        .output()
        .expect("run pontoon osd smart")
}

#[test]
fn a_regular_file_or_a_missing_path_is_refused_with_one_clear_line() {
    let f = tempfile::NamedTempFile::new().expect("temp file");
    let path = f.path().to_string_lossy().into_owned();
    for json in [false, true] {
        let mut args = vec!["--device", path.as_str()];
        if json {
            args.push("--json");
        }
        let out = smart(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
        assert!(
            err.starts_with("error: ")
                && err.contains(&path)
                && err.contains("is not an NVMe namespace"),
            "unclear refusal: {err}"
        );
    }
    let missing = f.path().with_extension("missing");
    let out = smart(&["--device", &missing.to_string_lossy()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains(&*missing.to_string_lossy()) && err.contains("No such file"),
        "{err}"
    );
}

/// The shared libraries `ldd` says `bin` loads, the dynamic loader first.
fn shared_libraries(bin: &Path) -> Vec<PathBuf> {
    let r = run_ok(Command::new("ldd").arg(bin));
    let mut libs: Vec<PathBuf> = r
        .stdout
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    libs.sort_by_key(|p| !p.to_string_lossy().contains("ld-linux"));
    assert!(
        libs.first()
            .is_some_and(|p| p.ends_with("ld-linux-x86-64.so.2")),
        "no ld-linux-x86-64.so.2 in `ldd {}`:\n{}",
        bin.display(),
        r.stdout
    );
    libs
}

/// Copies each kernel's NVMe PCI driver (decompressed) to
/// `dir/modules/<kver>/nvme.ko`, for the kernels the harness may boot
/// (`$KROOT/lib/modules/<kver>` with a `$KROOT/boot/vmlinuz-<kver>`).
/// Returns the kernel versions.
fn nvme_modules(dir: &Path) -> Vec<String> {
    let root = PathBuf::from(
        std::env::var("KROOT")
            .ok()
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "/".into()),
    );
    let mut kvers = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join("lib/modules")) else {
        return kvers;
    };
    for e in entries.flatten() {
        let kver = e.file_name().to_string_lossy().into_owned();
        if !root.join(format!("boot/vmlinuz-{kver}")).exists() {
            continue;
        }
        let host = e.path().join("kernel/drivers/nvme/host");
        let dst_dir = dir.join("modules").join(&kver);
        let dst = dst_dir.join("nvme.ko");
        for (ext, unpack) in [("", None), (".xz", Some("xz")), (".zst", Some("zstd"))] {
            let src = host.join(format!("nvme.ko{ext}"));
            if !src.is_file() {
                continue;
            }
            std::fs::create_dir_all(&dst_dir).expect("modules dir");
            match unpack {
                None => {
                    std::fs::copy(&src, &dst).expect("copy nvme.ko");
                }
                Some(tool) => {
                    let out = std::fs::File::create(&dst).expect("create nvme.ko");
                    let st = Command::new(tool)
                        .arg("-dc")
                        .arg(&src)
                        .stdout(out)
                        .status()
                        .unwrap_or_else(|e| panic!("run {tool} (to unpack nvme.ko{ext}): {e}"));
                    assert!(st.success(), "{tool} -dc {} failed", src.display());
                }
            }
            kvers.push(kver.clone());
            break;
        }
    }
    kvers
}

/// A tar of `pontoon`, its libraries and the NVMe driver, for the guest.
fn payload(dir: &Path) -> PathBuf {
    let stage = dir.join("stage");
    std::fs::create_dir_all(&stage).expect("stage dir");
    let bin = Path::new(PONTOON);
    std::fs::copy(bin, stage.join("pontoon")).expect("copy pontoon");
    for lib in shared_libraries(bin) {
        let name = lib.file_name().expect("library file name");
        // fs::copy follows symlinks: the guest gets the library itself.
        std::fs::copy(&lib, stage.join(name))
            .unwrap_or_else(|e| panic!("copy {}: {e}", lib.display()));
    }
    let kvers = nvme_modules(&stage);
    eprintln!("payload: pontoon, its libraries and nvme.ko for {kvers:?}");
    let tar = dir.join("payload.tar");
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&stage)
            .arg("-cf")
            .arg(&tar)
            .arg("."),
    );
    tar
}

/// The JSON the guest printed after `marker`.
fn reading(out: &str, marker: &str) -> Value {
    let key = format!("{marker} ");
    let line = out
        .lines()
        .find_map(|l| l.split_once(&key).map(|(_, j)| j.trim().to_string()))
        .unwrap_or_else(|| panic!("no `{marker}` line in:\n{out}"));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{marker} is not JSON ({e}): {line}"))
}

/// A reading's data units written, checked against its bytes.
fn units(v: &Value, what: &str) -> u64 {
    let u = v["data_units_written"]
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: no data_units_written in {v}"));
    assert_eq!(
        v["lifetime_written_bytes"].as_u64(),
        Some(u * UNIT),
        "{what}: bytes are not units x 512,000: {v}"
    );
    assert!(
        v["percentage_used"].as_u64().is_some(),
        "{what}: no percentage_used in {v}"
    );
    assert!(v.get("error").is_none(), "{what}: {v}");
    assert_eq!(v["device"], "/dev/nvme0n1", "{what}: {v}");
    u
}

#[test]
fn data_units_written_of_an_emulated_nvme_drive_grow_by_what_the_guest_writes() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-nvme-smart-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let tar = payload(&dir);
    let img = dir.join("nvme.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(NVME_BYTES))
        .expect("sparse NVMe image");
    for p in [&tar, &img] {
        let s = p.to_string_lossy();
        assert!(
            !s.contains(|c: char| c.is_whitespace() || c == ','),
            "VM_QEMU_ARGS cannot carry {s}"
        );
    }
    let qemu_args = format!(
        "-drive file={},if=none,id=nv0,format=raw \
         -device nvme,serial=pontoon0,drive=nv0 \
         -drive file={},if=virtio,format=raw,readonly=on",
        img.display(),
        tar.display()
    );
    eprintln!("payload ready after {:?}", started.elapsed());
    let vm_started = Instant::now();
    let r = run_vm_env(
        GUEST,
        &[
            "PAYLOAD=/dev/vda".into(),
            "NVME=/dev/nvme0n1".into(),
            format!("WRITE_MB={WRITE_MB}"),
        ],
        &[
            ("VM_QEMU_ARGS", &qemu_args),
            ("VM_MEM", "256"),
            ("VM_SMP", "1"),
        ],
        Duration::from_secs(240),
    );
    let vm_took = vm_started.elapsed();
    assert!(
        vm_passed(&r),
        "the guest could not read the NVMe SMART log with pontoon:\n{}",
        r.report()
    );
    let before = units(&reading(&r.stdout, "SMART-BEFORE"), "before");
    let after = units(&reading(&r.stdout, "SMART-AFTER"), "after");
    let written = WRITE_MB << 20;
    // The drive counts thousands of 512-byte sectors, rounded up; allow
    // 1 MiB of anything else the guest's kernel may write.
    let least = written / UNIT;
    let most = (written + (1 << 20)).div_ceil(UNIT) + 1;
    let grew = after
        .checked_sub(before)
        .unwrap_or_else(|| panic!("data units written went down: {before} -> {after}"));
    eprintln!(
        "data units written: {before} before, {after} after writing {WRITE_MB} MiB: +{grew} \
         (+{} bytes; expected {least}..={most}); VM {vm_took:?}, test {:?}",
        grew * UNIT,
        started.elapsed()
    );
    assert!(
        (least..=most).contains(&grew),
        "writing {WRITE_MB} MiB grew data units written by {grew} ({before} -> {after}), \
         expected {least}..={most}:\n{}",
        r.report()
    );
}
