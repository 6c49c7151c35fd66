//! docs/operator-guide.md, walked through as a new user would: every `$ `
//! line of its ```console blocks, in order, in ONE bash session (so
//! `export` and the backgrounded `pontoon up ... &` carry over), stopping
//! at the first command that fails. `DIR` is a fresh directory, `NBD_PORT`
//! and `NVMF_PORT` free ports, and the built `pontoon` is first on `PATH`.
//!
//! After a `pontoon up ... &` line the script waits (at most 60 s) for
//! `$DIR/cluster.toml`, which `up` writes once the cluster is ready. Each
//! command is echoed as `>>> cmd` before its output. A few outputs a user
//! would look at are checked, and after the guide's final `kill %1` every
//! process the cluster ran must be gone within 30 s. Whatever is left (on a
//! panic too) is killed by pid.
//!
//! Needs etcd-server, fio, qemu-utils and libnbd-bin (scripts/deps.sh).

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const GUIDE: &str = include_str!("../../../docs/operator-guide.md");
/// Longest `pontoon up` may take to write cluster.toml.
const UP_READY_SECS: u32 = 60;
/// Longest the whole guide may take (it normally takes about 30 s).
const GUIDE_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest the cluster's processes may take to exit after `kill %1`.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Marks the start of a command in the script's output.
const MARK: &str = ">>> ";
/// Marks the script's own failure reports.
const FAIL: &str = "!!! ";

/// The `$ ` lines of the guide's ```console blocks, in order.
fn guide_commands(md: &str) -> Vec<String> {
    let mut cmds = Vec::new();
    // None outside a fence; Some(is_console) inside one.
    let mut fence: Option<bool> = None;
    for (n, line) in md.lines().enumerate() {
        let t = line.trim_start();
        if let Some(info) = t.strip_prefix("```") {
            fence = match fence {
                None => Some(info.trim() == "console"),
                Some(_) => None,
            };
            continue;
        }
        if fence == Some(true)
            && let Some(cmd) = t.strip_prefix("$ ")
        {
            let cmd = cmd.trim_end();
            assert!(
                !cmd.ends_with('\\'),
                "docs/operator-guide.md line {}: continuation lines are not supported in console blocks",
                n + 1
            );
            cmds.push(cmd.to_string());
        }
    }
    assert!(
        fence.is_none(),
        "docs/operator-guide.md: unclosed ``` fence"
    );
    cmds
}

/// `s` as one single-quoted shell word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Whether a guide line starts `pontoon up` in the background.
fn is_background_up(cmd: &str) -> bool {
    cmd.ends_with('&') && cmd.split_whitespace().take(2).eq(["pontoon", "up"])
}

/// The bash script running `cmds`: each echoed, run, and checked; the pid
/// files under `$DIR/run` collected into `aux/pids` after every command.
fn script(cmds: &[String], aux: &Path) -> String {
    let aux = sh_quote(&aux.to_string_lossy());
    let mut s = String::new();
    s.push_str("exec 2>&1\n");
    s.push_str(&format!(
        "__snap() {{ cat \"$DIR\"/run/*.pid >> {aux}/pids 2>/dev/null; return 0; }}\n"
    ));
    for cmd in cmds {
        let q = sh_quote(cmd);
        s.push_str(&format!("printf '%s%s\\n' '{MARK}' {q}\n"));
        s.push_str(cmd);
        s.push_str("\n__rc=$?\n");
        if is_background_up(cmd) {
            s.push_str(&format!(
                r#"__up=$!
echo "$__up" > {aux}/up.bgpid
__t=0
until [ -f "$DIR/cluster.toml" ]; do
  if ! kill -0 "$__up" 2>/dev/null; then
    wait "$__up"; echo "{FAIL}pontoon up exited (status $?) before $DIR/cluster.toml appeared"; exit 1
  fi
  __t=$((__t + 1))
  if [ "$__t" -ge {ticks} ]; then
    echo "{FAIL}$DIR/cluster.toml did not appear within {UP_READY_SECS} s"; exit 1
  fi
  sleep 0.1
done
"#,
                ticks = UP_READY_SECS * 10
            ));
        }
        s.push_str("__snap\n");
        s.push_str(&format!(
            "if [ \"$__rc\" -ne 0 ]; then printf '%sexit %s: %s\\n' '{FAIL}' \"$__rc\" {q}; exit 1; fi\n"
        ));
    }
    s
}

/// The output split by command: (command, its output), in order.
fn by_command(out: &[String]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    for line in out {
        if let Some(cmd) = line.strip_prefix(MARK) {
            v.push((cmd.to_string(), String::new()));
        } else if let Some((_, text)) = v.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    v
}

/// Pids, one a line.
fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The guide's run: its directories, the bash session, and on drop (also
/// on a panic) SIGKILL, by pid, of whatever the cluster left running.
struct Run {
    /// DIR, the cluster directory.
    dir: PathBuf,
    /// Beside DIR: the script, the collected pids.
    aux: PathBuf,
    nbd_port: u16,
    nvmf_port: u16,
    bash: Option<Child>,
    /// bash's process group (its pid), which `up` and every command share.
    pgid: Option<libc::pid_t>,
    _tmp: tempfile::TempDir,
}

impl Run {
    /// Whether `pid` is a process of this run (not a reused pid): its
    /// command line names DIR (`up`, etcd, OSDs) or a gateway's address.
    fn is_ours(&self, pid: u32) -> bool {
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        let cmdline = String::from_utf8_lossy(&raw);
        cmdline.contains(&*self.dir.to_string_lossy())
            || cmdline.contains(&format!("127.0.0.1:{}", self.nbd_port))
            || cmdline.contains(&format!("127.0.0.1:{}", self.nvmf_port))
    }

    /// Every pid the cluster's pid files ever held, `up`'s too.
    fn pids(&self) -> Vec<u32> {
        let mut pids = read_pids(&self.aux.join("pids"));
        pids.extend(read_pid(&self.aux.join("up.bgpid")));
        if let Ok(entries) = std::fs::read_dir(self.dir.join("run")) {
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "pid") {
                    pids.extend(read_pid(&e.path()));
                }
            }
        }
        let toml = std::fs::read_to_string(self.dir.join("cluster.toml")).unwrap_or_default();
        pids.extend(toml.lines().find_map(|l| {
            l.strip_prefix("pid = ")
                .and_then(|v| v.trim().trim_matches('"').parse::<u32>().ok())
        }));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Processes whose command line names DIR (`up`, etcd, the OSDs, an
    /// OSD whose pid file was never written).
    fn naming_dir(&self) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| *p != std::process::id() && alive(*p) && self.is_ours(*p))
            .collect()
    }

    /// The processes of this run still alive: from the pid files, and any
    /// other whose command line names DIR.
    fn alive_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .pids()
            .into_iter()
            .filter(|p| alive(*p) && self.is_ours(*p))
            .collect();
        pids.extend(self.naming_dir());
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

fn kill(pid: libc::pid_t, sig: libc::c_int) -> bool {
    // SAFETY: kill on one pid (or, negative, one process group) we started.
    unsafe { libc::kill(pid, sig) == 0 }
}

impl Drop for Run {
    fn drop(&mut self) {
        // bash has a process group of its own, holding `up` and whatever
        // command was running (`pontoon osd start`, fio, ...): kill it all,
        // then what left it (the OSDs, etcd, an OSD restarted detached).
        if let Some(pgid) = self.pgid {
            kill(-pgid, libc::SIGKILL);
            if let Some(mut bash) = self.bash.take() {
                let _ = bash.wait();
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while kill(-pgid, 0) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for _ in 0..2 {
            for pid in self.alive_pids() {
                eprintln!("killing pid {pid}, left running by the guide");
                kill(libc::pid_t::try_from(pid).expect("pid fits"), libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Prints a line of the guide's output and keeps it.
fn take(out: &mut Vec<String>, line: String) {
    println!("{line}");
    out.push(line);
}

/// The guide's output so far, with what to say if it failed: the command
/// that failed and its output.
fn failure(out: &[String], why: &str) -> String {
    let cmds = by_command(out);
    match cmds.last() {
        Some((cmd, text)) => format!(
            "{why}\nfailed at: $ {cmd}\n--- its output ---\n{text}--- whole output above (>>> marks each command) ---"
        ),
        None => format!("{why} before the first command:\n{}", out.join("\n")),
    }
}

#[test]
fn the_operator_guide_works_as_written() {
    let cmds = guide_commands(GUIDE);
    assert!(
        cmds.iter().any(|c| is_background_up(c)),
        "the guide has no `pontoon up ... &` line: {cmds:#?}"
    );
    assert_eq!(
        cmds.last().map(String::as_str),
        Some("kill %1"),
        "the guide should end by stopping `pontoon up` with `kill %1`"
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().canonicalize().expect("canonical tempdir");
    let aux = root.join("guide");
    std::fs::create_dir(&aux).expect("create aux dir");
    let mut run = Run {
        dir: root.join("cluster"),
        aux: aux.clone(),
        nbd_port: free_port(),
        nvmf_port: free_port(),
        bash: None,
        pgid: None,
        _tmp: tmp,
    };
    let script_path = aux.join("guide.sh");
    std::fs::write(&script_path, script(&cmds, &aux)).expect("write the script");

    let bin_dir = Path::new(PONTOON).parent().expect("pontoon's directory");
    let path = match std::env::var_os("PATH") {
        Some(p) => {
            let mut dirs = vec![bin_dir.to_path_buf()];
            dirs.extend(std::env::split_paths(&p));
            std::env::join_paths(dirs).expect("join PATH")
        }
        None => bin_dir.as_os_str().to_owned(),
    };
    let mut bash = Command::new("bash")
        .arg(&script_path)
        .env("DIR", &run.dir)
        .env("NBD_PORT", run.nbd_port.to_string())
        .env("NVMF_PORT", run.nvmf_port.to_string())
        .env("PATH", path)
        // A new user's shell knows no cluster yet.
        .env_remove("PONTOON_CLUSTER")
        .env_remove("PONTOON_ETCD")
        .env_remove("PONTOON_CLUSTER_NAME")
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .expect("run bash");
    let stdout = bash.stdout.take().expect("bash stdout");
    run.pgid = Some(libc::pid_t::try_from(bash.id()).expect("pid fits"));
    run.bash = Some(bash);
    // The pipe stays open until `pontoon up` (which inherits it) exits.
    // Drained to the end, so no writer ever gets EPIPE.
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut out: Vec<String> = Vec::new();

    let start = Instant::now();
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => take(&mut out, line),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(status) = run
            .bash
            .as_mut()
            .expect("bash")
            .try_wait()
            .expect("wait for bash")
        {
            break status;
        }
        if start.elapsed() > GUIDE_TIMEOUT {
            panic!(
                "{}",
                failure(
                    &out,
                    &format!("the guide did not finish within {GUIDE_TIMEOUT:?}")
                )
            );
        }
    };
    run.bash = None;
    // What bash wrote before exiting.
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
        take(&mut out, line);
    }
    let guide_took = start.elapsed();
    assert!(
        status.success(),
        "{}",
        failure(&out, &format!("the guide stopped ({status})"))
    );

    // After `kill %1`, everything the cluster ran exits.
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let left = run.alive_pids();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running {STOP_TIMEOUT:?} after `kill %1`: pids {left:?} (of {:?})",
            run.pids()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for line in rx.try_iter() {
        take(&mut out, line);
    }
    println!(
        "guide ran in {guide_took:?}, cluster stopped {:?} later",
        start.elapsed() - guide_took
    );

    let outputs = by_command(&out);
    let ran: Vec<&str> = outputs.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(ran, cmds, "not every command of the guide ran");
    let output_of = |prefix: &str| -> &str {
        outputs
            .iter()
            .find(|(c, _)| c.starts_with(prefix))
            .map(|(_, o)| o.as_str())
            .unwrap_or_else(|| panic!("the guide has no `{prefix}` command"))
    };

    let ls = output_of("pontoon volume ls");
    assert!(
        ls.lines()
            .any(|l| l.split_whitespace().next() == Some("vm1")),
        "`pontoon volume ls` does not list vm1:\n{ls}"
    );

    let rolled = output_of("pontoon snap rollback");
    assert!(
        rolled.contains("volume vm2 rolled back to snapshot before"),
        "`pontoon snap rollback`:\n{rolled}"
    );
    let before = output_of("qemu-io -f raw -r -c \"read -P 0x11");
    assert!(
        before.contains("read 8388608/8388608 bytes at offset 0")
            && !before.contains("verification failed"),
        "after the rollback vm2 does not read what it held before:\n{before}"
    );

    let list = output_of("nbdinfo --list");
    assert!(
        list.contains("export=\"vm1\""),
        "`nbdinfo --list` does not show export \"vm1\":\n{list}"
    );

    let qemu_io = output_of("qemu-io ");
    assert!(
        qemu_io.contains("read 1048576/1048576 bytes at offset 0")
            && !qemu_io.contains("verification failed"),
        "qemu-io did not read back the pattern it wrote:\n{qemu_io}"
    );

    let fio = output_of("fio ");
    let errs: Vec<&str> = fio
        .split("err=")
        .skip(1)
        .map(|rest| {
            let rest = rest.trim_start();
            &rest[..rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len())]
        })
        .collect();
    assert!(
        !errs.is_empty() && errs.iter().all(|e| *e == "0"),
        "fio reported errors (err= {errs:?}):\n{fio}"
    );

    let restarted = outputs
        .iter()
        .position(|(c, _)| c.starts_with("pontoon osd start 1"))
        .expect("the guide restarts osd.1");
    let (_, status_after) = outputs[restarted + 1..]
        .iter()
        .find(|(c, _)| c.starts_with("pontoon status"))
        .expect("the guide runs `pontoon status` after `pontoon osd start 1`");
    let up_osds = status_after
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 2 && w[0].starts_with("osd.") && w[1] == "up"
        })
        .count();
    assert!(
        status_after.contains("osds: 3 total, 3 up") && up_osds == 3,
        "`pontoon status` after `pontoon osd start 1` does not show 3 OSDs up:\n{status_after}"
    );
}
