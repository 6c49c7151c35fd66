//! A connection that finishes ICReq but never sends Connect is closed once
//! the handshake timeout passes (it must not hold a connection slot
//! forever); a bound I/O queue may stay idle longer than that.

mod common;

use std::time::Duration;

use common::*;
use pontoon_nvmf::TargetConfig;
use pontoon_nvmf::initiator::Queue;

#[test]
fn unbound_connections_are_closed_after_the_handshake_timeout() {
    let t = target_with(
        TargetConfig {
            handshake_timeout: Duration::from_millis(800),
            ..Default::default()
        },
        vec![default_subsystem()],
        &[("vol", VOL_SIZE)],
    );
    let mut idle = Queue::handshake(t.addr, NO_DIGESTS, Duration::from_secs(10)).unwrap();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    assert!(
        idle.wait_closed(Duration::from_secs(5)).unwrap(),
        "a connection without Connect stayed open"
    );
    // The bound queue outlived the timeout and still works.
    std::thread::sleep(Duration::from_millis(500));
    let q = c.io(0);
    q.write(1, 3, &pattern(3, BLOCK), false).unwrap();
    assert_eq!(q.read(1, 3, 1).unwrap(), pattern(3, BLOCK));
}
