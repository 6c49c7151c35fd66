//! The administrative operations `pontoon pool|volume` and the REST API
//! share: the same defaults and the same checks in front of the same
//! [`MapStore`] calls, so both refuse the same things with the same words.

use std::collections::BTreeSet;

use pontoon_cluster::{
    ClusterError, ClusterMap, FailureDomain, MapStore, PoolRecord, VolumeRecord,
};
use pontoon_types::format_size;

/// Default PG count of a new pool.
pub const DEFAULT_PGS: u32 = 64;

/// The default min_size of a pool of `size` replicas: a majority.
pub fn default_min_size(size: u32) -> u32 {
    (size / 2 + 1).min(size)
}

/// The failure domain of a new pool of `size` replicas when none is given:
/// `host` when the cluster's in OSDs span at least `size` hosts, else
/// `osd`, with a note saying so.
pub fn default_failure_domain(map: &ClusterMap, size: u32) -> (FailureDomain, Option<String>) {
    let hosts: BTreeSet<&str> = map
        .osds
        .values()
        .filter(|o| o.in_cluster)
        .map(|o| o.host.as_str())
        .collect();
    if hosts.len() >= size as usize {
        (FailureDomain::Host, None)
    } else {
        (
            FailureDomain::Osd,
            Some(format!(
                "{} host(s) for {size} replicas: replicas go on distinct OSDs \
                 (ask for failure domain host to require distinct hosts)",
                hosts.len()
            )),
        )
    }
}

/// What a new pool should be; `None` fields take the defaults.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    /// Pool name.
    pub name: String,
    /// Replicas.
    pub size: u32,
    /// Default: [`default_min_size`].
    pub min_size: Option<u32>,
    /// Default: [`DEFAULT_PGS`].
    pub pgs: Option<u32>,
    /// Default: [`default_failure_domain`].
    pub failure_domain: Option<FailureDomain>,
}

/// Creates a pool with the defaults filled in. Returns the pool and, when
/// the failure domain was chosen for the caller, a note on the choice.
pub async fn create_pool(
    store: &MapStore,
    spec: PoolSpec,
) -> Result<(PoolRecord, Option<String>), ClusterError> {
    let min_size = spec.min_size.unwrap_or_else(|| default_min_size(spec.size));
    let (domain, note) = match spec.failure_domain {
        Some(d) => (d, None),
        None => default_failure_domain(&store.load().await?, spec.size),
    };
    let pool = store
        .create_pool(
            &spec.name,
            spec.size,
            min_size,
            spec.pgs.unwrap_or(DEFAULT_PGS),
            domain,
        )
        .await?;
    Ok((pool, note))
}

/// The pool a new volume goes to: the one named, else the only one.
/// `flag` is how the caller names the pool argument in the error
/// (`--pool`, `"pool"`).
pub fn choose_pool(
    map: &ClusterMap,
    pool: Option<&str>,
    flag: &str,
) -> Result<String, ClusterError> {
    if let Some(p) = pool {
        return Ok(p.to_string());
    }
    let mut pools = map.pools.values();
    match (pools.next(), pools.next()) {
        (Some(only), None) => Ok(only.name.clone()),
        (None, _) => Err(ClusterError::InvalidArgument(
            "there is no pool: create one first (`pontoon pool create`)".into(),
        )),
        (Some(_), Some(_)) => Err(ClusterError::InvalidArgument(format!(
            "there are {} pools: pass {flag} to choose one",
            map.pools.len()
        ))),
    }
}

/// Creates a volume of `size` bytes in `pool` (or the only pool); returns
/// it and its pool's name.
pub async fn create_volume(
    store: &MapStore,
    name: &str,
    size: u64,
    pool: Option<&str>,
    flag: &str,
) -> Result<(VolumeRecord, String), ClusterError> {
    let pool = choose_pool(&store.load().await?, pool, flag)?;
    Ok((store.create_volume(name, &pool, size).await?, pool))
}

/// Grows a volume to `size` bytes; shrinking is refused (it would discard
/// data).
pub async fn resize_volume(
    store: &MapStore,
    name: &str,
    size: u64,
) -> Result<VolumeRecord, ClusterError> {
    let map = store.load().await?;
    let Some(cur) = map.volume_by_name(name) else {
        return Err(ClusterError::NotFound {
            kind: "volume",
            name: name.to_string(),
        });
    };
    if size < cur.size_bytes {
        return Err(ClusterError::InvalidArgument(format!(
            "volume {name} is {}: shrinking it to {} would discard data and is refused",
            format_size(cur.size_bytes),
            format_size(size)
        )));
    }
    store.resize_volume(name, size, false).await
}

/// Parses a size such as `10G`, `256M` or `4096` (binary multiples) into
/// bytes; the error names `what`.
pub fn parse_size(what: &str, s: &str) -> Result<u64, String> {
    pontoon_types::parse_size(s).ok_or_else(|| {
        format!("invalid {what} {s:?}: expected a size such as 10G, 256M, 64K or 4096")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_types::PoolId;

    fn pool(id: u32, name: &str) -> PoolRecord {
        PoolRecord {
            id: PoolId(id),
            name: name.into(),
            size: 3,
            min_size: 2,
            pgs: 8,
            failure_domain: FailureDomain::Osd,
        }
    }

    #[test]
    fn min_size_defaults_to_a_majority() {
        assert_eq!(default_min_size(1), 1);
        assert_eq!(default_min_size(2), 2);
        assert_eq!(default_min_size(3), 2);
        assert_eq!(default_min_size(4), 3);
        assert_eq!(default_min_size(5), 3);
    }

    #[test]
    fn the_only_pool_is_the_default_and_otherwise_pool_must_be_given() {
        let mut m = ClusterMap::new("c");
        let e = choose_pool(&m, None, "--pool").unwrap_err().to_string();
        assert!(e.contains("no pool"), "{e}");
        m.pools.insert(PoolId(1), pool(1, "a"));
        assert_eq!(choose_pool(&m, None, "--pool").unwrap(), "a");
        m.pools.insert(PoolId(2), pool(2, "b"));
        let e = choose_pool(&m, None, "--pool").unwrap_err().to_string();
        assert!(e.contains("pass --pool"), "{e}");
        assert_eq!(choose_pool(&m, Some("b"), "--pool").unwrap(), "b");
    }

    #[test]
    fn sizes_give_clear_errors() {
        assert_eq!(parse_size("size", "1G").unwrap(), 1 << 30);
        let e = parse_size("volume size", "ten").unwrap_err();
        assert!(e.contains("invalid volume size \"ten\""), "{e}");
    }

    #[test]
    fn a_single_host_gets_the_osd_failure_domain_with_a_note() {
        let m = ClusterMap::new("c");
        let (d, note) = default_failure_domain(&m, 3);
        assert_eq!(d, FailureDomain::Osd);
        assert!(note.unwrap().contains("0 host(s) for 3 replicas"));
        assert_eq!(default_failure_domain(&m, 0), (FailureDomain::Host, None));
    }
}
