//! What the target exports: subsystems, their namespaces (each a volume)
//! and the hosts allowed to connect. The cluster map holds it; the
//! gateway copies every change into a [`Subsystems`] handle, which every
//! worker thread and connection reads (a lock taken on connect and on admin
//! commands, never per I/O).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::auth::HostAuth;

/// The NQN of the discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Longest NQN the protocol allows, in bytes.
pub const MAX_NQN_LEN: usize = 223;

/// One namespace: a volume exported under a namespace id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Namespace id (1-based).
    pub nsid: u32,
    /// The volume's name.
    pub volume: String,
    /// Stable identity, reported as the namespace's NGUID and UUID, so a
    /// host recognises the namespace across reconnects and gateways.
    pub uuid: [u8; 16],
}

/// One NVM subsystem.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubsystemConfig {
    /// The subsystem's NQN.
    pub nqn: String,
    /// Namespaces, by namespace id.
    pub namespaces: Vec<NamespaceConfig>,
    /// Host NQNs allowed to connect; empty means none (unless the target
    /// runs with `allow_any_host`).
    pub allowed_hosts: Vec<String>,
    /// DH-HMAC-CHAP by host NQN: a host listed here must authenticate on
    /// every queue before it may do anything else (with `allow_any_host`
    /// too). Hosts not listed connect without authentication.
    pub auth: BTreeMap<String, HostAuth>,
}

impl SubsystemConfig {
    /// Whether `host` may connect, given the target's `allow_any_host`.
    pub fn allows(&self, host: &str, allow_any_host: bool) -> bool {
        allow_any_host || self.allowed_hosts.iter().any(|h| h == host)
    }

    /// What `host` must authenticate with, if anything.
    pub fn auth_for(&self, host: &str) -> Option<&HostAuth> {
        self.auth.get(host)
    }

    /// The namespace with id `nsid`.
    pub fn namespace(&self, nsid: u32) -> Option<&NamespaceConfig> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }
}

/// Checks an NQN's form: `nqn.` followed by something, at most 223 bytes,
/// printable ASCII.
pub fn check_nqn(nqn: &str) -> Result<(), String> {
    if nqn.len() > MAX_NQN_LEN {
        return Err(format!("NQN longer than {MAX_NQN_LEN} bytes"));
    }
    if !nqn.starts_with("nqn.") || nqn.len() < 5 {
        return Err(format!("{nqn:?} is not an NQN (must start with \"nqn.\")"));
    }
    if !nqn.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("{nqn:?} has characters other than printable ASCII"));
    }
    Ok(())
}

/// A snapshot of every subsystem and a generation that grows on every
/// change.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Bumped by every [`Subsystems::set`].
    pub generation: u64,
    /// The subsystems, sorted by NQN.
    pub subsystems: Arc<Vec<SubsystemConfig>>,
}

impl Snapshot {
    /// The subsystem named `nqn`.
    pub fn subsystem(&self, nqn: &str) -> Option<&SubsystemConfig> {
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }
}

/// The target's live configuration, shared by every thread.
#[derive(Debug, Clone, Default)]
pub struct Subsystems {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The snapshot's generation, readable without the lock (the I/O path
    /// checks it per command to notice a change).
    generation: AtomicU64,
    snapshot: Mutex<Snapshot>,
}

impl Subsystems {
    /// A handle holding `list`.
    pub fn new(list: Vec<SubsystemConfig>) -> Self {
        let s = Self::default();
        s.set(list);
        s
    }

    /// Replaces the configuration (connected hosts see namespaces come and
    /// go; an asynchronous event tells them).
    pub fn set(&self, mut list: Vec<SubsystemConfig>) {
        list.sort_by(|a, b| a.nqn.cmp(&b.nqn));
        for s in &mut list {
            s.namespaces.sort_by_key(|n| n.nsid);
        }
        let mut g = self
            .inner
            .snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *g.subsystems == list {
            return;
        }
        g.generation += 1;
        g.subsystems = Arc::new(list);
        self.inner.generation.store(g.generation, Ordering::Release);
    }

    /// The current configuration.
    pub fn snapshot(&self) -> Snapshot {
        self.inner
            .snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The current generation, without taking the lock.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nqn_rules() {
        assert!(check_nqn("nqn.2024-01.io.pontoon:vol1").is_ok());
        assert!(check_nqn("iqn.2024-01.io.pontoon:vol1").is_err());
        assert!(check_nqn("nqn.").is_err());
        assert!(check_nqn(&format!("nqn.{}", "a".repeat(220))).is_err());
        assert!(check_nqn("nqn.a b").is_err());
    }

    #[test]
    fn generation_moves_only_on_change() {
        let s = Subsystems::default();
        let a = SubsystemConfig {
            nqn: "nqn.x".into(),
            ..Default::default()
        };
        s.set(vec![a.clone()]);
        let g = s.snapshot().generation;
        s.set(vec![a.clone()]);
        assert_eq!(s.snapshot().generation, g);
        s.set(vec![]);
        assert_eq!(s.snapshot().generation, g + 1);
    }
}
