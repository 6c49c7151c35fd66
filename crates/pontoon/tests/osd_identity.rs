//! OSD identity and device safety, with real processes against a `pontoon
//! up` cluster: `pontoon osd create` refuses a file holding an ext4
//! filesystem (made by mkfs.ext4) or a GPT partition table, and a device
//! of another cluster, unless `--force`; `osd run` never formats any of
//! them; a second `osd run` on a device in use is refused while the first
//! keeps running; an OSD killed and restarted without `--id` comes back
//! as the same OSD with the same PGs and nothing recovered. As root with
//! loop devices: the size comes from the block device (BLKGETSIZE64) and
//! sets the weight, and a device held open exclusively (O_EXCL) elsewhere
//! is refused.
//!
//! Needs etcd (Debian's etcd-server) and mkfs.ext4 (e2fsprogs).

mod common;

use common::*;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `pontoon osd run` started by the test; killed (SIGKILL) on drop.
struct Osd {
    child: Child,
    log: PathBuf,
}

impl Osd {
    /// Starts `pontoon osd run --device DEV EXTRA` against the cluster in
    /// `dir`, logging to `DIR/<log>`.
    fn start(dir: &Path, device: &Path, log: &str, extra: &[&str]) -> Osd {
        let log = dir.join(log);
        let out = File::create(&log).expect("osd log");
        let child = Command::new(PONTOON)
            .args(["osd", "run", "--etcd", &etcd_of(dir), "--cluster-name"])
            .arg(cluster_name_of(dir))
            .arg("--device")
            .arg(device)
            .args(["--lease-ttl", "3s"])
            .args(etcd_flags(dir, "osd"))
            .args(extra)
            .env_remove("PONTOON_CLUSTER")
            .env_remove("PONTOON_ETCD")
            .env("PONTOON_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("run pontoon osd run");
        Osd { child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// Waits (at most 30 s) for it to exit; returns its exit code and log.
    fn exit(mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return (
                    st.code(),
                    std::fs::read_to_string(&self.log).unwrap_or_default(),
                );
            }
            assert!(
                Instant::now() < deadline,
                "osd run did not exit: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Osd {
    fn drop(&mut self) {
        self.kill();
    }
}

fn cluster_toml(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("cluster.toml")).expect("cluster.toml")
}

fn toml_str(dir: &Path, key: &str) -> String {
    let text = cluster_toml(dir);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{key} not in cluster.toml:\n{text}"))
        .to_string()
}

fn etcd_of(dir: &Path) -> String {
    toml_str(dir, "etcd")
}

fn cluster_name_of(dir: &Path) -> String {
    toml_str(dir, "cluster_name")
}

/// `pontoon osd create --device DEV EXTRA --json` against the cluster in `dir`.
fn create(dir: &Path, device: &Path, extra: &[&str]) -> Value {
    let dev = device.to_string_lossy();
    let mut args = vec!["osd", "create", "--device", &dev, "--json"];
    args.extend_from_slice(extra);
    json(dir, &args)
}

fn create_fails(dir: &Path, device: &Path, extra: &[&str]) -> String {
    let dev = device.to_string_lossy();
    let mut args = vec!["osd", "create", "--device", &dev];
    args.extend_from_slice(extra);
    fails(dir, &args, 1)
}

/// A file of `size` bytes of zeros.
fn zero_file(path: &Path, size: u64) {
    File::create(path)
        .and_then(|f| f.set_len(size))
        .expect("create image");
}

fn head(path: &Path, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("read image");
    b
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run_tool(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// CRC-32 (IEEE), as GPT uses.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Writes a GPT by hand (what `sgdisk -n 1:2048:0` writes): a protective
/// MBR, the primary header and entries, and the backup at the end, with
/// one Linux-filesystem partition over the rest of the image.
fn write_gpt(path: &Path, size: u64) {
    zero_file(path, size);
    let sectors = size / 512;
    let last = sectors - 1;
    let mut f = OpenOptions::new().write(true).open(path).expect("open");
    let mut mbr = [0u8; 512];
    mbr[446 + 4] = 0xEE;
    mbr[446 + 8..446 + 12].copy_from_slice(&1u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&(last.min(0xFFFF_FFFF) as u32).to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xAA;
    let mut entries = vec![0u8; 128 * 128];
    // Linux filesystem data: 0FC63DAF-8483-4772-8E79-3D69D8477DE4.
    entries[..16].copy_from_slice(&[
        0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D,
        0xE4,
    ]);
    entries[16..32].copy_from_slice(&[0x5a; 16]);
    entries[32..40].copy_from_slice(&2048u64.to_le_bytes());
    entries[40..48].copy_from_slice(&(last - 34).to_le_bytes());
    let header = |current: u64, backup: u64, entries_lba: u64| {
        let mut h = [0u8; 512];
        h[..8].copy_from_slice(b"EFI PART");
        h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
        h[12..16].copy_from_slice(&92u32.to_le_bytes());
        h[24..32].copy_from_slice(&current.to_le_bytes());
        h[32..40].copy_from_slice(&backup.to_le_bytes());
        h[40..48].copy_from_slice(&34u64.to_le_bytes());
        h[48..56].copy_from_slice(&(last - 33).to_le_bytes());
        h[56..72].copy_from_slice(&[0xa7; 16]);
        h[72..80].copy_from_slice(&entries_lba.to_le_bytes());
        h[80..84].copy_from_slice(&128u32.to_le_bytes());
        h[84..88].copy_from_slice(&128u32.to_le_bytes());
        h[88..92].copy_from_slice(&crc32(&entries).to_le_bytes());
        let crc = crc32(&h[..92]);
        h[16..20].copy_from_slice(&crc.to_le_bytes());
        h
    };
    let mut write_at = |lba: u64, data: &[u8]| {
        f.seek(SeekFrom::Start(lba * 512)).expect("seek");
        f.write_all(data).expect("write");
    };
    write_at(0, &mbr);
    write_at(1, &header(1, last, 2));
    write_at(2, &entries);
    write_at(last - 32, &entries);
    write_at(last, &header(last, 1, last - 32));
}

fn status(dir: &Path) -> Value {
    json(dir, &["status", "--json"])
}

fn osd_view(s: &Value, id: u64) -> Option<&Value> {
    s["osds"]["list"]
        .as_array()
        .and_then(|l| l.iter().find(|o| o["id"] == id))
}

fn osd_up(s: &Value, id: u64) -> bool {
    osd_view(s, id).is_some_and(|o| o["up"] == true)
}

fn pgs_clean(s: &Value, n: u64) -> bool {
    s["pgs"]["states"]["active+clean"].as_u64() == Some(n)
}

/// Each PG's acting set, from `pg ls --json`.
fn acting_sets(dir: &Path) -> Vec<(String, Value)> {
    let pgs = json(dir, &["pg", "ls", "--json"]);
    pgs.as_array()
        .expect("pg list")
        .iter()
        .map(|p| (p["pgid"].to_string(), p["acting"].clone()))
        .collect()
}

#[test]
fn devices_are_refused_unless_forced_and_an_osd_keeps_its_id_across_restarts() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-osdid-");
    // etcd without users: the test formats a device for a second cluster
    // on the same etcd, which a user confined to one cluster's prefix may
    // not (etcd_security.rs tests that confinement).
    let _up = Up::start_with(&dir, 2, &["--etcd-insecure"]);
    let name = cluster_name_of(&dir);

    // A file holding ext4: refused by create and by run, left untouched.
    let ext4 = dir.join("ext4.img");
    zero_file(&ext4, 256 << 20);
    assert!(have("mkfs.ext4"), "mkfs.ext4 (e2fsprogs) is needed");
    run_tool("mkfs.ext4", &["-F", "-q", &ext4.to_string_lossy()]);
    let before = head(&ext4, 128 << 10);
    let e = create_fails(&dir, &ext4, &[]);
    assert!(
        e.contains("holds ext4 filesystem") && e.contains("--force"),
        "{e}"
    );
    let (code, log) = Osd::start(&dir, &ext4, "run-ext4.log", &["--size", "256M"]).exit();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("ext4 filesystem") && log.contains("never formats"),
        "{log}"
    );
    assert!(
        head(&ext4, 128 << 10) == before,
        "a refused device was written to"
    );

    // A GPT-partitioned image: refused, naming the partition table.
    let gpt = dir.join("gpt.img");
    write_gpt(&gpt, 64 << 20);
    if have("blkid") {
        let out = Command::new("blkid")
            .args(["-p", "-o", "value", "-s", "PTTYPE"])
            .arg(&gpt)
            .output()
            .expect("blkid");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "gpt",
            "the hand-made GPT is a real one"
        );
    }
    let e = create_fails(&dir, &gpt, &[]);
    assert!(e.contains("holds GPT partition table"), "{e}");
    let (code, log) = Osd::start(&dir, &gpt, "run-gpt.log", &[]).exit();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("GPT partition table"), "{log}");

    // --force destroys the filesystem and makes the file osd.2.
    let t = Instant::now();
    let c = create(&dir, &ext4, &["--force"]);
    eprintln!("osd create --force took {:?}", t.elapsed());
    assert_eq!(c["id"], 2, "{c:#}");
    assert_eq!(c["device_bytes"], 256u64 << 20, "{c:#}");
    assert_eq!(c["weight"], 256, "{c:#}");
    assert_eq!(c["cluster"], name.as_str(), "{c:#}");
    let fsid = c["fsid"].as_str().expect("fsid").to_string();
    assert_eq!(status(&dir)["fsid"], fsid.as_str(), "status shows the fsid");
    let now = head(&ext4, 128 << 10);
    assert_eq!(&now[..8], b"PNTNSTOR");
    assert_eq!(&now[1080..1082], &[0, 0], "the ext4 magic is wiped");
    if have("blkid") {
        // Nothing of the old filesystem is left for blkid to find.
        let out = Command::new("blkid")
            .arg("-p")
            .arg(&ext4)
            .output()
            .expect("blkid");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("ext4"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let e = create_fails(&dir, &ext4, &[]);
    assert!(e.contains("already osd.2 of this cluster"), "{e}");

    // A device of another cluster (another name on the same etcd).
    let other = dir.join("other.img");
    let c = create(
        &dir,
        &other,
        &["--size", "256M", "--cluster-name", "other-cluster"],
    );
    assert_eq!(c["id"], 0, "{c:#}");
    assert_ne!(c["fsid"], fsid.as_str(), "each cluster has its own fsid");
    let e = create_fails(&dir, &other, &[]);
    assert!(
        e.contains("holds Pontoon OSD 0 of cluster \"other-cluster\"") && e.contains("--force"),
        "{e}"
    );
    let (code, log) = Osd::start(&dir, &other, "run-other.log", &["--size", "256M"]).exit();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("Pontoon OSD 0 of cluster \"other-cluster\"")
            && log.contains(&format!("not an OSD of this cluster \"{name}\"")),
        "{log}"
    );
    // An --id that disagrees with the device is refused.
    let (code, log) = Osd::start(&dir, &ext4, "run-wrong-id.log", &["--id", "1"]).exit();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("is osd.2, not osd.1"), "{log}");

    // osd.2 runs from its device alone (no --id) and joins.
    let mut osd = Osd::start(&dir, &ext4, "osd.2.log", &[]);
    wait_status(&dir, "osd.2 up", |s| osd_up(s, 2));
    let s = status(&dir);
    assert_eq!(s["osds"]["total"], 3, "{s:#}");
    let v = osd_view(&s, 2).expect("osd.2");
    assert_eq!(v["device_bytes"], 256u64 << 20, "{v}");
    assert_eq!(v["weight"], 256, "{v}");

    // A second OSD on the device in use is refused at once, naming the
    // holder; the first keeps running; create --force does not touch it.
    let t = Instant::now();
    let (code, log) = Osd::start(&dir, &ext4, "osd.2-again.log", &[]).exit();
    eprintln!("second osd run refused after {:?}", t.elapsed());
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("in use") && log.contains(&format!("(pid {})", osd.pid())),
        "{log}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "refused only after {:?}",
        t.elapsed()
    );
    let e = create_fails(&dir, &ext4, &["--force"]);
    assert!(e.contains("in use"), "{e}");
    assert!(osd.running(), "the first OSD stopped");
    assert!(osd_up(&status(&dir), 2));

    // Data on all three OSDs, every PG clean.
    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    ok(&dir, &["volume", "create", "v", "--size", "256M"]);
    ok(
        &dir,
        &[
            "bench", "--volume", "v", "--fill", "--span", "40M", "--bs", "1M",
        ],
    );
    wait_status(&dir, "16 PGs clean with 10 objects", |s| {
        pgs_clean(s, 16) && s["objects"]["total"] == 10
    });
    let acting = acting_sets(&dir);
    assert!(
        acting
            .iter()
            .all(|(_, a)| a.as_array().is_some_and(|a| a.contains(&Value::from(2)))),
        "{acting:?}"
    );

    // Killed and restarted without --id: the same OSD, the same PGs, and
    // nothing recovered (a new OSD would have been backfilled).
    osd.kill();
    wait_status(&dir, "osd.2 down", |s| !osd_up(s, 2));
    let t = Instant::now();
    let _osd = Osd::start(&dir, &ext4, "osd.2-restart.log", &[]);
    let s = wait_status(&dir, "osd.2 back and 16 PGs clean", |s| {
        osd_up(s, 2) && s["osds"]["up"] == 3 && pgs_clean(s, 16)
    });
    eprintln!("osd.2 back and clean {:?} after its restart", t.elapsed());
    assert_eq!(s["osds"]["total"], 3, "no new OSD registered: {s:#}");
    assert_eq!(s["objects"]["total"], 10, "{s:#}");
    assert_eq!(s["objects"]["recovered"], 0, "nothing recovered: {s:#}");
    assert_eq!(acting_sets(&dir), acting, "the same PGs");
    eprintln!("identity test took {:?}", started.elapsed());
}

/// A loop device, detached by name on drop.
struct Loop(String);

impl Loop {
    fn attach(file: &Path) -> Option<Loop> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file)
            .output()
            .ok()?;
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && dev.starts_with("/dev/loop")).then_some(Loop(dev))
    }

    fn path(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn a_block_device_is_sized_by_the_kernel_and_opened_exclusively() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("losetup") {
        eprintln!("skipped: needs root and losetup for a loop device");
        return;
    }
    let (_tmp, dir) = tempdir("pontoon-osdloop-");
    let img = dir.join("loop.img");
    zero_file(&img, 300 << 20);
    let Some(lo) = Loop::attach(&img) else {
        eprintln!("skipped: no loop device could be attached here");
        return;
    };
    let _up = Up::start_with(&dir, 1, &[]);

    // A filesystem on the block device is refused as on a file.
    run_tool("mkfs.ext4", &["-F", "-q", &lo.0]);
    let e = create_fails(&dir, lo.path(), &[]);
    assert!(e.contains("holds ext4 filesystem"), "{e}");
    let e = create_fails(&dir, lo.path(), &["--force", "--size", "1G"]);
    assert!(e.contains("--size is for files"), "{e}");

    // Held open exclusively by another program (as mount or mkfs do): in
    // use, even with --force.
    let excl = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(lo.path())
        .expect("open the loop device O_EXCL");
    let e = create_fails(&dir, lo.path(), &["--force"]);
    assert!(e.contains("in use") && e.contains("O_EXCL"), "{e}");
    drop(excl);

    // The size is the kernel's (BLKGETSIZE64), and the weight follows it.
    let c = create(&dir, lo.path(), &["--force"]);
    assert_eq!(c["id"], 1, "{c:#}");
    assert_eq!(c["device_bytes"], 300u64 << 20, "{c:#}");
    assert_eq!(c["weight"], 300, "{c:#}");
    let mut osd = Osd::start(&dir, lo.path(), "osd.1.log", &[]);
    let s = wait_status(&dir, "osd.1 up", |s| osd_up(s, 1));
    let v = osd_view(&s, 1).expect("osd.1");
    assert_eq!(v["device_bytes"], 300u64 << 20, "{v}");
    assert_eq!(v["weight"], 300, "{v}");

    // While it runs, the device is exclusively its own.
    let busy = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(lo.path());
    assert!(
        busy.is_err(),
        "O_EXCL open of a running OSD's device succeeded"
    );
    let (code, log) = Osd::start(&dir, lo.path(), "osd.1-again.log", &[]).exit();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("in use"), "{log}");
    assert!(osd.running(), "the first OSD stopped");
    osd.kill();
}
