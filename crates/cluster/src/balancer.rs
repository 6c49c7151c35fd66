//! What the upmap balancer keeps in etcd: its exceptions to straw2 (one
//! list per PG, in [`PgRecord::upmap_items`](crate::PgRecord::upmap_items)),
//! its settings (in the map's [`ClusterSettings`](crate::ClusterSettings))
//! and the outcome of its latest round (`mgr/balancer`, beside the map but
//! not part of it: written by the active manager, read by `pontoon
//! balancer status`; it does not bump the epoch or wake watchers).
//!
//! The exceptions are applied in one place, [`recompute`](crate::recompute),
//! so every up set the map holds already has them.

use pontoon_types::OsdId;
use serde::{Deserialize, Serialize};

use crate::model::ids;
use crate::{ClusterError, MapStore};

/// Key of the latest round's outcome (relative to the cluster prefix).
pub const BALANCER_STATUS: &str = "mgr/balancer";

/// One exception to straw2 for a PG (Ceph's `pg-upmap-items` entry): the
/// replica straw2 places on `from` lives on `to` instead, in the same
/// position of the up set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UpmapItem {
    /// The OSD straw2 chose.
    #[serde(with = "ids::osd_id")]
    pub from: OsdId,
    /// The OSD that holds the replica instead.
    #[serde(with = "ids::osd_id")]
    pub to: OsdId,
}

/// The balancer's cluster-wide settings (map key `settings`, field
/// `balancer`). Absent from an older map: the defaults.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct BalancerSettings {
    /// Whether the manager balances at all (`pontoon balancer on|off`);
    /// on by default, as in Ceph.
    #[serde(default = "default_active")]
    pub active: bool,
    /// Most PG replicas one round may move, as a fraction of all PG
    /// replicas (Ceph's `target_max_misplaced_ratio`); at least one.
    #[serde(default = "default_max_misplaced")]
    pub max_misplaced: f64,
    /// Seconds between rounds (Ceph's `mgr/balancer/sleep_interval`).
    #[serde(default = "default_interval_secs")]
    pub interval_secs: u64,
}

/// Default of [`BalancerSettings::max_misplaced`]: 5%, as Ceph.
pub const DEFAULT_MAX_MISPLACED: f64 = 0.05;
/// Default of [`BalancerSettings::interval_secs`]: a minute, as Ceph.
pub const DEFAULT_INTERVAL_SECS: u64 = 60;

fn default_active() -> bool {
    true
}

fn default_max_misplaced() -> f64 {
    DEFAULT_MAX_MISPLACED
}

fn default_interval_secs() -> u64 {
    DEFAULT_INTERVAL_SECS
}

impl Default for BalancerSettings {
    fn default() -> Self {
        Self {
            active: default_active(),
            max_misplaced: DEFAULT_MAX_MISPLACED,
            interval_secs: DEFAULT_INTERVAL_SECS,
        }
    }
}

impl PartialEq for BalancerSettings {
    fn eq(&self, o: &Self) -> bool {
        self.active == o.active
            && self.max_misplaced.to_bits() == o.max_misplaced.to_bits()
            && self.interval_secs == o.interval_secs
    }
}

impl Eq for BalancerSettings {}

impl BalancerSettings {
    /// Checks the settings are usable: a fraction in (0, 1] and an
    /// interval of at least a second.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.max_misplaced > 0.0 && self.max_misplaced <= 1.0) {
            return Err(format!(
                "max misplaced ratio {} must be in (0, 1]",
                self.max_misplaced
            ));
        }
        if self.interval_secs == 0 {
            return Err("the balancer interval must be at least 1s".into());
        }
        Ok(())
    }
}

/// The outcome of the balancer's latest round, as the active manager
/// stores it (`mgr/balancer`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BalancerStatus {
    /// The manager that ran it.
    #[serde(default)]
    pub manager: String,
    /// When the round ran, Unix seconds.
    pub last_run_unix: u64,
    /// How long it took to compute, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// One word for the outcome: `moved`, `balanced`, `not-clean`,
    /// `norebalance`, `off` or `error`.
    pub result: String,
    /// The outcome in words.
    pub message: String,
    /// PG replicas the round moved.
    #[serde(default)]
    pub moved: u64,
    /// PG replicas moved by every round since this manager took over.
    #[serde(default)]
    pub moved_total: u64,
    /// When this manager last moved replicas, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_move_unix: Option<u64>,
}

impl MapStore {
    /// The outcome of the balancer's latest round, if a manager ran one.
    pub async fn balancer_status(&self) -> Result<Option<BalancerStatus>, ClusterError> {
        let key = self.key(BALANCER_STATUS);
        let resp = self
            .run("read the balancer status", |c| {
                let key = key.clone();
                async move { c.kv_client().get(key, None).await }
            })
            .await?;
        resp.kvs()
            .first()
            .map(|kv| {
                serde_json::from_slice(kv.value()).map_err(|e| ClusterError::Corrupt {
                    key: BALANCER_STATUS.into(),
                    reason: e.to_string(),
                })
            })
            .transpose()
    }

    /// Stores the outcome of a balancer round (replacing the previous).
    pub async fn put_balancer_status(&self, status: &BalancerStatus) -> Result<(), ClusterError> {
        let key = self.key(BALANCER_STATUS);
        let value = serde_json::to_vec(status).map_err(|e| ClusterError::Corrupt {
            key: BALANCER_STATUS.into(),
            reason: format!("cannot encode: {e}"),
        })?;
        self.run("store the balancer status", |c| {
            let (key, value) = (key.clone(), value.clone());
            async move { c.kv_client().put(key, value, None).await }
        })
        .await?;
        Ok(())
    }

    /// Changes the balancer settings with `f`; refuses unusable ones.
    /// Returns the settings now in force.
    pub async fn set_balancer(
        &self,
        f: impl Fn(&mut BalancerSettings),
    ) -> Result<BalancerSettings, ClusterError> {
        let updated = self
            .update::<_, ClusterError>(|m| {
                let mut b = m.settings.balancer;
                f(&mut b);
                b.validate().map_err(ClusterError::InvalidArgument)?;
                if b == m.settings.balancer {
                    return Ok(false);
                }
                m.settings.balancer = b;
                Ok(true)
            })
            .await?;
        Ok(updated.map.settings.balancer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_absent_from_an_old_map_are_the_defaults() {
        let s: crate::ClusterSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(s.balancer, BalancerSettings::default());
        assert!(s.balancer.active);
        let b: BalancerSettings = serde_json::from_str(r#"{"active":false}"#).unwrap();
        assert!(!b.active);
        assert_eq!(b.interval_secs, DEFAULT_INTERVAL_SECS);
        assert!(b.validate().is_ok());
        let bad = BalancerSettings {
            max_misplaced: 0.0,
            ..b
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn upmap_items_encode_with_bare_ids() {
        let u = UpmapItem {
            from: OsdId(1),
            to: OsdId(4),
        };
        let json = serde_json::to_string(&u).unwrap();
        assert_eq!(json, r#"{"from":1,"to":4}"#);
        assert_eq!(serde_json::from_str::<UpmapItem>(&json).unwrap(), u);
    }
}
