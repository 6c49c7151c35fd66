//! The Linux kernel's own NVMe/TCP initiator against the target, in the
//! vm-initiator guest: discovery, the I/O controller with two I/O queues,
//! O_DIRECT and buffered write/verify with and without header and data
//! digests; then a host that is not on the allow-list, which must be
//! refused. Each boot takes 15–40 s under TCG, so this file holds the
//! only two boots and runs them one after the other.

use std::sync::Arc;
use std::time::Duration;

use pontoon_nvmf::{NamespaceConfig, SubsystemConfig, Subsystems, TargetConfig, start};
use pontoon_testtools::{run_vm, vm_passed};
use pontoon_volume::{MemCatalog, MemVolume};

const NQN: &str = "nqn.2026-11.io.pontoon:kernel-test";
/// The host NQN the harness presents by default.
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";

#[test]
fn linux_nvme_tcp_initiator_reads_writes_and_is_refused_when_not_allowed() {
    let subsystems = Subsystems::new(vec![SubsystemConfig {
        nqn: NQN.into(),
        namespaces: vec![NamespaceConfig {
            nsid: 1,
            volume: "vol".into(),
            uuid: *b"pontoon-kernel-1",
        }],
        allowed_hosts: vec![HOSTNQN.into()],
        auth: Default::default(),
    }]);
    let target = start(
        TargetConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        },
        subsystems,
        Arc::new(|| {
            let c = MemCatalog::default();
            c.insert("vol", MemVolume::new(128 << 20));
            c
        }),
    )
    .expect("target starts");
    let port = target.local_addr().port();

    let ok = run_vm(
        "tests/nvme-tcp.sh",
        &[
            format!("PORT={port}"),
            format!("NQN={NQN}"),
            format!("HOSTNQN={HOSTNQN}"),
            "DIGESTS=1".into(),
            "SIZE_MB=16".into(),
            "EXTRA=,nr_io_queues=2".into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        vm_passed(&ok),
        "the kernel's nvme-tcp initiator failed against the target:\n{}",
        ok.report()
    );
    // The guest saw our discovery log entry and our controller.
    assert!(ok.stdout.contains(NQN), "{}", ok.report());
    assert!(ok.stdout.contains("Pontoon"), "{}", ok.report());

    let refused = run_vm(
        "tests/nvme-tcp.sh",
        &[
            format!("PORT={port}"),
            format!("NQN={NQN}"),
            "HOSTNQN=nqn.2026-11.io.pontoon:host-not-allowed".into(),
            "DISCOVERY=0".into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        !vm_passed(&refused),
        "a host not on the allow-list connected:\n{}",
        refused.report()
    );
    // Linux logs the Connect status it got: Connect Invalid Host.
    assert!(
        refused.stdout.contains("is not allowed"),
        "the guest failed for another reason than the refusal:\n{}",
        refused.report()
    );
    target.stop().unwrap();
}
