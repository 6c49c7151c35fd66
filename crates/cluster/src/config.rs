//! Cluster configuration kept in etcd beside the map but outside it: the
//! REST API token (`config/api_token`). These keys are not map keys: they
//! are not loaded with the map, do not bump its epoch and do not wake its
//! watchers.

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use crate::{ClusterError, MapStore};

/// Key of the REST API token (relative to the cluster prefix).
pub const API_TOKEN: &str = "config/api_token";

impl MapStore {
    /// The REST API token, if one was created.
    pub async fn api_token(&self) -> Result<Option<String>, ClusterError> {
        let key = self.key(API_TOKEN);
        let resp = self
            .run("read the API token", |c| {
                let key = key.clone();
                async move { c.kv_client().get(key, None).await }
            })
            .await?;
        resp.kvs().first().map(|kv| decode(kv.value())).transpose()
    }

    /// The REST API token: the stored one, or `candidate` stored as the
    /// token if there is none yet. Concurrent callers (two managers
    /// starting) all get the one token that was stored first.
    pub async fn ensure_api_token(&self, candidate: &str) -> Result<String, ClusterError> {
        if candidate.is_empty() || !candidate.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ClusterError::InvalidArgument(
                "an API token must be printable ASCII without spaces".into(),
            ));
        }
        let key = self.key(API_TOKEN);
        let resp = self
            .run("create the API token", |c| {
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key.clone(), candidate, None)])
                    .or_else([TxnOp::get(key.clone(), None)]);
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if resp.succeeded() {
            return Ok(candidate.to_string());
        }
        for op in resp.op_responses() {
            if let TxnOpResponse::Get(get) = op
                && let Some(kv) = get.kvs().first()
            {
                return decode(kv.value());
            }
        }
        Err(ClusterError::Corrupt {
            key: API_TOKEN.into(),
            reason: "exists but could not be read".into(),
        })
    }
}

fn decode(v: &[u8]) -> Result<String, ClusterError> {
    String::from_utf8(v.to_vec())
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ClusterError::Corrupt {
            key: API_TOKEN.into(),
            reason: "not a non-empty UTF-8 string".into(),
        })
}
