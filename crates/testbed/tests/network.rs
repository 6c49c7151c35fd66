//! The testbed's network: hosts reach each other and the test process;
//! cuts drop packets (silence, not refusal) both ways, one way, on
//! established connections too, and heal; isolation cuts a host from
//! everyone; processes run inside their host's namespace; drop removes
//! everything.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use pontoon_testbed::{Host, Testbed};

const PORT: u16 = 7000;
/// How long a test waits for what a cut should block.
const SHORT: Duration = Duration::from_millis(700);
/// How long a test waits for what must get through (generous: loaded CI).
const LONG: Duration = Duration::from_secs(5);

/// A TCP listener on `host`'s address that answers every connection with
/// the host's name, on a background thread.
fn serve_name(host: &Host) {
    let ip = host.ip();
    let listener = host.in_netns(|| TcpListener::bind((ip, PORT)).expect("bind in host"));
    let name = host.name().to_string();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            let _ = s.write_all(name.as_bytes());
        }
    });
}

/// Connects from `from` (a host, or the test process if `None`) to `to`'s
/// listener and reads what it says, waiting up to `wait` for each step.
fn ask(from: Option<&Host>, to: Ipv4Addr, wait: Duration) -> std::io::Result<String> {
    let go = move || {
        let mut s = TcpStream::connect_timeout(&SocketAddr::from((to, PORT)), wait)?;
        s.set_read_timeout(Some(wait))?;
        let mut got = String::new();
        s.read_to_string(&mut got)?;
        Ok(got)
    };
    match from {
        Some(h) => h.in_netns(go),
        None => go(),
    }
}

/// Like [`ask`], but the answer must come.
fn must_reach(from: Option<&Host>, to: &Host) {
    let got = ask(from, to.ip(), LONG).unwrap_or_else(|e| {
        panic!(
            "{} cannot reach {}: {e}",
            from.map_or("test", |h| h.name()),
            to.name()
        )
    });
    assert_eq!(got, to.name());
}

/// Like [`ask`], but it must time out (a dropped SYN or SYN-ACK), not be refused.
fn must_time_out(from: Option<&Host>, to: &Host) {
    match ask(from, to.ip(), SHORT) {
        Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => {}
        other => panic!(
            "{} -> {}: expected a timeout, got {other:?}",
            from.map_or("test", |h| h.name()),
            to.name()
        ),
    }
}

fn three_hosts(hint: &str) -> (Testbed, [Host; 3]) {
    let tb = Testbed::new(hint);
    let hosts = [tb.add_host("a"), tb.add_host("b"), tb.add_host("c")];
    for h in &hosts {
        serve_name(h);
    }
    (tb, hosts)
}

#[test]
fn three_hosts_and_the_test_process_reach_each_other_over_tcp() {
    let (tb, hosts) = three_hosts("reach");
    for to in &hosts {
        must_reach(None, to);
        for from in &hosts {
            must_reach(Some(from), to);
        }
    }
    // The test process is reachable from the hosts too.
    let l = TcpListener::bind((tb.test_ip(), PORT)).expect("bind on the test address");
    let t = std::thread::spawn(move || l.accept().map(|_| ()));
    hosts[0].in_netns(|| {
        TcpStream::connect_timeout(&SocketAddr::from((tb.test_ip(), PORT)), LONG)
            .expect("host to test process")
    });
    t.join().expect("accept thread").expect("accept");
    // Nothing listens there: refused, not a timeout (that is what cuts change).
    let e = ask(Some(&hosts[0]), tb.test_ip(), LONG).expect_err("nothing listens");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
}

#[test]
fn a_two_way_cut_times_out_connections_and_heal_restores_them() {
    let (tb, [a, b, c]) = three_hosts("cut");
    tb.cut(&a, &b);
    must_time_out(Some(&a), &b);
    must_time_out(Some(&b), &a);
    // Other links are untouched.
    must_reach(Some(&a), &c);
    must_reach(Some(&c), &b);
    must_reach(None, &a);
    assert!(tb.dropped_packets() > 0, "the rules counted the drops");
    tb.heal(&a, &b);
    must_reach(Some(&a), &b);
    must_reach(Some(&b), &a);

    // The test process as one end.
    tb.cut_from_test(&c);
    must_time_out(None, &c);
    must_reach(Some(&a), &c);
    tb.heal_from_test(&c);
    must_reach(None, &c);

    // Partitions and heal_all.
    tb.partition(&[&a], &[&b, &c, &tb.test_node()]);
    must_time_out(Some(&b), &a);
    must_time_out(None, &a);
    must_reach(Some(&b), &c);
    tb.heal_all();
    must_reach(Some(&b), &a);
    must_reach(None, &a);
}

#[test]
fn a_one_way_cut_drops_datagrams_in_one_direction_only() {
    let tb = Testbed::new("oneway");
    let a = tb.add_host("a");
    let b = tb.add_host("b");
    let udp = |h: &Host| {
        let ip = h.ip();
        h.in_netns(|| UdpSocket::bind((ip, 7001)).expect("bind udp"))
    };
    let (ua, ub) = (udp(&a), udp(&b));
    let send = |s: &UdpSocket, to: &Host, msg: &[u8]| {
        s.send_to(msg, (to.ip(), 7001)).expect("send");
    };
    let recv = |s: &UdpSocket, wait: Duration| {
        s.set_read_timeout(Some(wait)).expect("timeout");
        let mut buf = [0u8; 64];
        s.recv_from(&mut buf).map(|(n, _)| buf[..n].to_vec())
    };
    send(&ua, &b, b"a1");
    assert_eq!(recv(&ub, LONG).expect("a to b before the cut"), b"a1");

    tb.cut_one_way(&a, &b);
    send(&ua, &b, b"a2");
    send(&ub, &a, b"b2");
    assert_eq!(recv(&ua, LONG).expect("b to a still arrives"), b"b2");
    let lost = recv(&ub, SHORT);
    assert!(
        matches!(&lost, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
        "a to b must be dropped: {lost:?}\n{}",
        tb.faults()
    );

    // TCP needs both ways: b's SYN reaches a, a's SYN-ACK is dropped.
    serve_name(&a);
    must_time_out(Some(&b), &a);

    tb.heal_one_way(&a, &b);
    send(&ua, &b, b"a3");
    assert_eq!(recv(&ub, LONG).expect("a to b after heal"), b"a3");
    must_reach(Some(&b), &a);
}

#[test]
fn a_cut_stalls_an_established_tcp_connection_until_healed() {
    let tb = Testbed::new("stall");
    let a = tb.add_host("a");
    let b = tb.add_host("b");
    let ip = a.ip();
    let listener = a.in_netns(|| TcpListener::bind((ip, PORT)).expect("bind"));
    let mut client = b.in_netns(|| {
        TcpStream::connect_timeout(&SocketAddr::from((ip, PORT)), LONG).expect("connect")
    });
    let (mut server, _) = listener.accept().expect("accept");
    server.set_read_timeout(Some(LONG)).expect("timeout");
    let mut buf = [0u8; 5];
    client.write_all(b"hello").expect("write");
    server.read_exact(&mut buf).expect("read before the cut");

    tb.cut(&a, &b);
    server.set_read_timeout(Some(SHORT)).expect("timeout");
    client
        .write_all(b"again")
        .expect("write goes to the send buffer");
    let e = server
        .read(&mut buf)
        .expect_err("nothing arrives across the cut");
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e}"
    );

    tb.heal(&a, &b);
    // TCP retransmits with backoff; the data comes through after the heal.
    server
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let t = Instant::now();
    server.read_exact(&mut buf).expect("read after heal");
    assert_eq!(&buf, b"again");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn isolate_cuts_a_host_from_every_host_and_the_test_process() {
    let (tb, [a, b, c]) = three_hosts("isolate");
    tb.cut(&b, &c);
    tb.isolate(&a);
    must_time_out(None, &a);
    must_time_out(Some(&b), &a);
    must_time_out(Some(&a), &c);
    tb.unisolate(&a);
    must_reach(None, &a);
    must_reach(Some(&b), &a);
    must_reach(Some(&a), &c);
    // Unisolate leaves other cuts alone.
    must_time_out(Some(&b), &c);
    tb.heal_all();
    must_reach(Some(&b), &c);
}

/// The network namespace inode of a process.
fn netns_of(pid: u32) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).expect("ns link")
}

#[test]
fn processes_run_in_their_host_log_and_take_signals() {
    let tb = Testbed::new("procs");
    let a = tb.add_host("a");
    let p = a.spawn(
        "looper",
        "/bin/sh",
        [
            "-c",
            "echo started; while true; do echo tick; sleep 0.1; done",
        ],
    );
    let other = a.spawn("sleeper", "/bin/sleep", ["600"]);
    assert_eq!(netns_of(p.pid()), netns_of(other.pid()));
    assert_ne!(netns_of(p.pid()), netns_of(std::process::id()));
    // The pid is the program's own: /bin/sleep, not `ip` or a shell.
    let exe = std::fs::read_link(format!("/proc/{}/exe", other.pid())).expect("exe");
    assert!(exe.ends_with("sleep"), "{}", exe.display());

    let deadline = Instant::now() + Duration::from_secs(10);
    while tb.log_count("looper", "tick") < 3 {
        assert!(Instant::now() < deadline, "{}", tb.logs_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The testbed's own line (with the command) opens the log.
    assert_eq!(p.log_count("=== testbed: starting on a:"), 1);
    p.sigstop();
    std::thread::sleep(Duration::from_millis(300));
    let stopped = p.log_count("tick");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        p.log_count("tick"),
        stopped,
        "a stopped process logs nothing"
    );
    assert!(p.is_running(), "a stopped process has not exited");
    p.sigcont();
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.log_count("tick") <= stopped {
        assert!(Instant::now() < deadline, "{}", tb.logs_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = other.sigterm_and_wait(Duration::from_secs(5));
    assert!(!st.success());
    assert!(!other.is_running());
    p.kill9();
    assert!(!p.is_running());
    assert!(tb.logs_tail().contains("tick"));
    assert_eq!(tb.logs().len(), 2);
}

#[test]
fn testbeds_get_distinct_subnets_and_drop_removes_everything() {
    let one = Testbed::new("one");
    let two = Testbed::new("two");
    assert_ne!(one.subnet(), two.subnet());
    let h1 = one.add_host("a");
    let h2 = two.add_host("a");
    serve_name(&h1);
    serve_name(&h2);
    must_reach(None, &h1);
    must_reach(None, &h2);
    let p = h1.spawn("sleeper", "/bin/sleep", ["600"]);
    let (ns1, sw1, dir1) = (
        h1.netns().to_string(),
        one.switch_netns(),
        one.dir().to_path_buf(),
    );
    drop(one);
    assert!(!Path::new("/run/netns").join(&ns1).exists());
    assert!(!Path::new("/run/netns").join(&sw1).exists());
    assert!(!dir1.exists());
    assert!(!p.is_running(), "drop killed the testbed's processes");
    // The other testbed is untouched.
    must_reach(None, &h2);
    assert!(Path::new("/run/netns").join(h2.netns()).exists());
}
