//! The capacity history's storage in etcd, and the rated endurance of
//! each OSD. Neither is part of the map: writing them bumps no epoch and
//! wakes no watcher.
//!
//! The history itself (its tiers, downsampling and binary encoding) is the
//! manager's (`pontoon_mgr::history`); here it is opaque chunks under
//!
//! | key | value |
//! |---|---|
//! | `history/<tier>/<start>/<group>` | one chunk: the points of one group of series in one tier from `start` (Unix seconds, 12 digits, so keys sort by time) |
//! | `endurance/<osd>` | [`RatedEndurance`], JSON |
//!
//! Only the active manager writes history, in transactions that commit
//! only while it holds the leader key ([`MapStore::history_write`]), so a
//! deposed manager cannot overwrite its successor's chunks. A chunk being
//! filled is rewritten in place; a finished one is never written again
//! and is deleted, with a range delete, once older than its tier keeps.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};
use pontoon_types::OsdId;
use serde::{Deserialize, Serialize};

use crate::ClusterError;
use crate::etcd::MapStore;
use crate::keys::LEADER;

/// Prefix of the history chunks.
pub const HISTORY: &str = "history/";
/// Prefix of the rated-endurance records.
pub const ENDURANCE: &str = "endurance/";
/// Largest chunk accepted: well under etcd's default request limit
/// (1.5 MiB), which a transaction of several puts shares.
pub const MAX_CHUNK_BYTES: usize = 1 << 20;
/// Operations per history transaction (etcd accepts 128 by default).
const OPS_PER_TXN: usize = 64;
/// Keys per range read while loading.
const PAGE: i64 = 512;
/// Largest etcd response accepted while loading.
const MAX_MESSAGE: usize = 64 << 20;

/// The key of a chunk: `history/<tier>/<start:012>/<group>`.
pub fn chunk_key(tier: &str, start: u64, group: &str) -> String {
    format!("{HISTORY}{tier}/{start:012}/{group}")
}

/// The tier, start and group a chunk key names.
pub fn parse_chunk_key(rel: &str) -> Option<(&str, u64, &str)> {
    let rest = rel.strip_prefix(HISTORY)?;
    let mut parts = rest.splitn(3, '/');
    let tier = parts.next()?;
    let start = parts.next()?;
    let group = parts.next()?;
    if tier.is_empty() || group.is_empty() || start.len() != 12 {
        return None;
    }
    Some((tier, start.parse().ok()?, group))
}

/// The key that ends the range of `prefix` (its last byte plus one).
fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// A drive's endurance rating, as an operator sets it per OSD
/// (`pontoon osd set-rated-dwpd`). Key `endurance/<osd>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatedEndurance {
    /// Rated drive writes per day over the warranty period.
    pub rated_dwpd: f64,
    /// The capacity the rating refers to; the OSD's device size if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// The warranty period the rating holds for, in years.
    #[serde(default = "default_warranty_years")]
    pub warranty_years: f64,
}

/// Five years, the usual warranty of data-centre SSDs.
pub fn default_warranty_years() -> f64 {
    5.0
}

impl RatedEndurance {
    /// Checks that the numbers make sense.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let ok = |x: f64| x.is_finite() && x > 0.0 && x <= 1e6;
        if !ok(self.rated_dwpd) || !ok(self.warranty_years) {
            return Err(ClusterError::InvalidArgument(format!(
                "rated DWPD {} and warranty {} years must be positive",
                self.rated_dwpd, self.warranty_years
            )));
        }
        if self.capacity_bytes == Some(0) {
            return Err(ClusterError::InvalidArgument(
                "a rated capacity must be positive".into(),
            ));
        }
        Ok(())
    }
}

impl MapStore {
    /// Every history chunk of `tier` that starts at or after `from`, in
    /// key order (time, then group), as relative key and value. Read in
    /// pages, so not at one revision: the history is written by one
    /// manager at a time and a chunk is replaced whole.
    pub async fn history_chunks(
        &self,
        tier: &str,
        from: u64,
    ) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        let prefix = self.key(&format!("{HISTORY}{tier}/"));
        let end = range_end(&prefix);
        let mut start = self
            .key(&format!("{HISTORY}{tier}/{from:012}"))
            .into_bytes();
        let mut out = Vec::new();
        loop {
            let opts = GetOptions::new()
                .with_range(end.clone())
                .with_limit(PAGE)
                .with_sort(etcd_client::SortTarget::Key, etcd_client::SortOrder::Ascend);
            let key = start.clone();
            let resp = self
                .run("read the capacity history", |c| {
                    let (key, opts) = (key.clone(), opts.clone());
                    async move {
                        c.kv_client()
                            .max_decoding_message_size(MAX_MESSAGE)
                            .get(key, Some(opts))
                            .await
                    }
                })
                .await?;
            for kv in resp.kvs() {
                let rel = kv
                    .key()
                    .strip_prefix(self.prefix().as_bytes())
                    .and_then(|k| std::str::from_utf8(k).ok())
                    .ok_or_else(|| ClusterError::Corrupt {
                        key: String::from_utf8_lossy(kv.key()).into_owned(),
                        reason: "not a history key".into(),
                    })?;
                out.push((rel.to_string(), kv.value().to_vec()));
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Writes history chunks (`puts`: relative key and value) and deletes,
    /// for each `(tier, before)` in `expire`, the chunks of that tier that
    /// start before `before` — only while `leader_lease` still holds the
    /// leader key ([`ClusterError::NotLeader`] otherwise). Several
    /// transactions when there are many operations; each is fenced.
    pub async fn history_write(
        &self,
        leader_lease: i64,
        puts: &[(String, Vec<u8>)],
        expire: &[(String, u64)],
    ) -> Result<(), ClusterError> {
        let mut ops = Vec::with_capacity(puts.len() + expire.len());
        for (k, v) in puts {
            if !k.starts_with(HISTORY) {
                return Err(ClusterError::InvalidArgument(format!(
                    "{k} is not a history key"
                )));
            }
            if v.len() > MAX_CHUNK_BYTES {
                return Err(ClusterError::InvalidArgument(format!(
                    "history chunk {k} is {} bytes, more than {MAX_CHUNK_BYTES}",
                    v.len()
                )));
            }
            ops.push(TxnOp::put(self.key(k), v.clone(), None));
        }
        for (tier, before) in expire {
            let from = self.key(&format!("{HISTORY}{tier}/"));
            let to = self.key(&format!("{HISTORY}{tier}/{before:012}"));
            ops.push(TxnOp::delete(
                from,
                Some(DeleteOptions::new().with_range(to)),
            ));
        }
        let fence = Compare::lease(self.key(LEADER), CompareOp::Equal, leader_lease);
        for batch in ops.chunks(OPS_PER_TXN) {
            let resp = self
                .run("write the capacity history", |c| {
                    let txn = Txn::new().when([fence.clone()]).and_then(batch.to_vec());
                    async move { c.kv_client().txn(txn).await }
                })
                .await?;
            if !resp.succeeded() {
                return Err(ClusterError::NotLeader);
            }
        }
        Ok(())
    }

    /// Every OSD's rated endurance that an operator set.
    pub async fn rated_endurance(&self) -> Result<BTreeMap<OsdId, RatedEndurance>, ClusterError> {
        let key = self.key(ENDURANCE);
        let resp = self
            .run("read the rated endurance", |c| {
                let key = key.clone();
                async move {
                    c.kv_client()
                        .get(key, Some(GetOptions::new().with_prefix()))
                        .await
                }
            })
            .await?;
        let mut out = BTreeMap::new();
        for kv in resp.kvs() {
            let name = String::from_utf8_lossy(kv.key()).into_owned();
            let id = name
                .rsplit('/')
                .next()
                .and_then(|s| s.parse::<u32>().ok())
                .ok_or_else(|| ClusterError::Corrupt {
                    key: name.clone(),
                    reason: "not an OSD id".into(),
                })?;
            let rec: RatedEndurance =
                serde_json::from_slice(kv.value()).map_err(|e| ClusterError::Corrupt {
                    key: name.clone(),
                    reason: e.to_string(),
                })?;
            out.insert(OsdId(id), rec);
        }
        Ok(out)
    }

    /// Sets (or with `None` clears) an OSD's rated endurance. The OSD must
    /// be registered.
    pub async fn set_rated_endurance(
        &self,
        osd: OsdId,
        rated: Option<&RatedEndurance>,
    ) -> Result<(), ClusterError> {
        if !self.load().await?.osds.contains_key(&osd) {
            return Err(ClusterError::NotFound {
                kind: "osd",
                name: osd.to_string(),
            });
        }
        let key = self.key(&format!("{ENDURANCE}{}", osd.0));
        match rated {
            Some(r) => {
                r.validate()?;
                let value = serde_json::to_vec(r).map_err(|e| ClusterError::Corrupt {
                    key: key.clone(),
                    reason: format!("cannot encode: {e}"),
                })?;
                self.run("set the rated endurance", |c| {
                    let (key, value) = (key.clone(), value.clone());
                    async move { c.kv_client().put(key, value, None).await }
                })
                .await?;
            }
            None => {
                self.run("clear the rated endurance", |c| {
                    let key = key.clone();
                    async move { c.kv_client().delete(key, None).await }
                })
                .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_keys_sort_by_time_and_parse_back() {
        let a = chunk_key("m", 1_700_000_000, "o0");
        let b = chunk_key("m", 1_700_000_900, "c");
        assert_eq!(a, "history/m/001700000000/o0");
        assert!(a < b);
        assert_eq!(parse_chunk_key(&a), Some(("m", 1_700_000_000, "o0")));
        assert_eq!(parse_chunk_key("history/m/17/o0"), None);
        assert_eq!(parse_chunk_key("pools/1"), None);
        assert_eq!(range_end("history/m/"), b"history/m0".to_vec());
    }

    #[test]
    fn ratings_are_checked() {
        let mut r = RatedEndurance {
            rated_dwpd: 3.0,
            capacity_bytes: None,
            warranty_years: 5.0,
        };
        assert!(r.validate().is_ok());
        r.rated_dwpd = 0.0;
        assert!(r.validate().is_err());
        r.rated_dwpd = 1.0;
        r.capacity_bytes = Some(0);
        assert!(r.validate().is_err());
        let back: RatedEndurance = serde_json::from_str(r#"{"rated_dwpd":1}"#).unwrap();
        assert_eq!(back.warranty_years, 5.0);
    }
}
