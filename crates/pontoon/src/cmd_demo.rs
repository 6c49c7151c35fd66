//! `pontoon demo`: Pontoon's main job in one command. Measures the raw
//! disk, starts a local cluster (3 OSDs, a size-3 pool) with an NBD
//! gateway, creates a volume, runs a workload through NBD with fio (the
//! same tool an operator would use), prints Pontoon's figures beside the
//! raw device's, shows `pontoon status`, and stops everything.

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::cpu;
use crate::fio::{self, Measured};

/// Arguments of `pontoon demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Directory for the cluster and the raw test file (default: a new
    /// temporary directory, removed afterwards unless --keep).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seconds per workload phase.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Leave the cluster running and print how to connect to it.
    #[arg(long)]
    pub keep: bool,
}

/// One workload phase, run on the raw file and on the volume.
struct Phase {
    name: &'static str,
    rw: &'static str,
    bs: &'static str,
    qd: u32,
    write: bool,
}

const PHASES: [Phase; 3] = [
    Phase {
        name: "64 KiB sequential write",
        rw: "write",
        bs: "64k",
        qd: 8,
        write: true,
    },
    Phase {
        name: "4 KiB random write",
        rw: "randwrite",
        bs: "4k",
        qd: 32,
        write: true,
    },
    Phase {
        name: "4 KiB random read",
        rw: "randread",
        bs: "4k",
        qd: 32,
        write: false,
    },
];

/// Size of the volume region and the raw file the workload covers.
const SPAN: &str = "1G";

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<()> {
    fio::ensure_tool("fio", "fio")?;
    let (dir, temp) = match &args.dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = std::env::temp_dir().join(format!("pontoon-demo-{}", std::process::id()));
            (t.clone(), Some(t))
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("cannot find the pontoon binary")?;
    let secs = args.seconds.max(2);

    say(
        "Pontoon demo: measure the raw disk, start a 3-OSD cluster, serve a 3-replica volume over NBD, load it with fio.",
    );
    say(&format!(
        "1/4 raw disk: fio on a {SPAN} file in {}",
        dir.display()
    ));
    let raw_file = dir.join("raw.fio");
    let raw: Vec<Measured> = PHASES
        .iter()
        .map(|p| {
            let mut a = vec![
                format!("--filename={}", raw_file.display()),
                "--ioengine=io_uring".into(),
                "--direct=1".into(),
            ];
            if p.write {
                a.push("--sync=dsync".into());
            }
            run_fio(p, &a, secs)
        })
        .collect::<Result<_>>()?;
    let _ = std::fs::remove_file(&raw_file);

    say("2/4 starting the cluster: etcd, a manager, 3 OSDs, an NBD gateway");
    let port = free_port()?;
    let nbd: SocketAddr = ([127, 0, 0, 1], port).into();
    let cluster_dir = dir.join("cluster");
    let mut up = start_cluster(&exe, &cluster_dir, nbd)?;
    let result = (|| -> Result<Vec<Measured>> {
        let cluster = cluster_dir.display().to_string();
        pontoon(
            &exe,
            &[
                "pool",
                "create",
                "demo",
                "--size",
                "3",
                "--pgs",
                "64",
                "--failure-domain",
                "osd",
                "--cluster",
                &cluster,
            ],
        )?;
        pontoon(
            &exe,
            &[
                "volume",
                "create",
                "demo",
                "--size",
                "2G",
                "--cluster",
                &cluster,
            ],
        )?;
        say(&format!(
            "3/4 workload on nbd://{nbd}/demo (3 replicas, each write durable on all three before it is acknowledged)"
        ));
        PHASES
            .iter()
            .map(|p| {
                let a = vec!["--ioengine=nbd".into(), format!("--uri=nbd://{nbd}/demo")];
                run_fio(p, &a, secs)
            })
            .collect()
    })();
    let pontoon_results = match result {
        Ok(r) => r,
        Err(e) => {
            stop_cluster(&mut up);
            return Err(e);
        }
    };

    println!();
    println!(
        "Results ({secs} s per phase; raw = fio io_uring direct=1 on the same filesystem, writes with --sync=dsync)"
    );
    println!(
        "{:<26} {:>12} {:>10} {:>14} {:>14} {:>8}",
        "", "Pontoon IOPS", "MB/s", "mean/p99 µs", "raw IOPS", "ratio"
    );
    for ((p, m), r) in PHASES.iter().zip(&pontoon_results).zip(&raw) {
        let bs = if p.bs == "64k" { 65536.0 } else { 4096.0 };
        println!(
            "{:<26} {:>12.0} {:>10.1} {:>14} {:>14.0} {:>8.2}",
            p.name,
            m.iops,
            m.iops * bs / 1e6,
            format!("{:.0}/{:.0}", m.mean_us, m.p99_us),
            r.iops,
            m.iops / r.iops.max(1.0)
        );
    }
    println!(
        "All three OSDs share this one disk: a 3-replica write costs three device writes, so 1/3 of raw is the disk's own limit for writes."
    );
    println!();
    let cluster = cluster_dir.display().to_string();
    say("4/4 pontoon status");
    let _ = Command::new(&exe)
        .args(["status", "--cluster", &cluster])
        .status();
    if args.keep {
        println!();
        println!(
            "The cluster keeps running (pid {}). Connect a host:",
            up.id()
        );
        println!("  qemu-io -f raw nbd://{nbd}/demo -c 'read -v 0 512'");
        println!("  nbdfuse /mnt/demo nbd://{nbd}/demo        # the volume as a file");
        println!("  nbd-client 127.0.0.1 {port} /dev/nbd0 -N demo   # a kernel block device");
        println!("  pontoon status --cluster {cluster}");
        println!("Stop it with: kill {}", up.id());
        return Ok(());
    }
    stop_cluster(&mut up);
    if let Some(t) = temp {
        let _ = std::fs::remove_dir_all(t);
    }
    Ok(())
}

fn say(s: &str) {
    eprintln!("\x1b[1m{s}\x1b[0m");
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// Runs one phase with fio, its progress line passed through, and parses
/// its JSON result.
fn run_fio(p: &Phase, target: &[String], secs: u64) -> Result<Measured> {
    let json = std::env::temp_dir().join(format!("pontoon-demo-fio-{}.json", std::process::id()));
    eprintln!("  {}", p.name);
    let mut args: Vec<String> = vec![
        "--name=demo".into(),
        format!("--rw={}", p.rw),
        format!("--bs={}", p.bs),
        format!("--iodepth={}", p.qd),
        format!("--size={SPAN}"),
        "--time_based".into(),
        format!("--runtime={secs}"),
        "--norandommap".into(),
        "--randrepeat=0".into(),
        "--output-format=json".into(),
        format!("--output={}", json.display()),
        "--percentile_list=50:99:99.9".into(),
        "--eta=always".into(),
        "--eta-newline=1".into(),
    ];
    args.extend(target.iter().cloned());
    let child = Command::new("fio")
        .args(&args)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting fio")?;
    let (code, cpu) = cpu::wait_child(child.id())?;
    let out = std::fs::read_to_string(&json).unwrap_or_default();
    let _ = std::fs::remove_file(&json);
    if code != 0 {
        bail!("fio failed ({code}) on {}", p.name);
    }
    fio::parse(&out, p.write, cpu)
}

/// Runs `pontoon args`, failing with its output.
fn pontoon(exe: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new(exe)
        .args(args)
        .output()
        .context("running pontoon")?;
    if !out.status.success() {
        bail!(
            "pontoon {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Starts `pontoon up` and waits until it wrote cluster.toml.
fn start_cluster(exe: &Path, dir: &Path, nbd: SocketAddr) -> Result<Child> {
    std::fs::create_dir_all(dir)?;
    let log =
        std::fs::File::create(dir.with_extension("log")).context("creating the cluster log")?;
    let mut up = Command::new(exe)
        .args([
            "up",
            "--osds",
            "3",
            "--osd-size",
            "2G",
            "--shards",
            "1",
            "--nbd",
            &nbd.to_string(),
            "--dir",
        ])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting pontoon up")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dir.join("cluster.toml").exists() {
        if let Ok(Some(st)) = up.try_wait() {
            bail!(
                "pontoon up exited ({st}); see {}",
                dir.with_extension("log").display()
            );
        }
        if Instant::now() > deadline {
            stop_cluster(&mut up);
            bail!(
                "the cluster did not start in 120 s; see {}",
                dir.with_extension("log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = std::io::stderr().flush();
    Ok(up)
}

/// Stops `pontoon up` (which stops its children) and waits for it.
fn stop_cluster(up: &mut Child) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = up.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = up.kill();
    let _ = up.wait();
}
