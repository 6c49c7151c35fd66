//! Per-identity export lists: which volumes each client identity (a PSK
//! username, a client certificate's CN) may list and open.
//!
//! Without lists every client may open every volume (the gateway's
//! behaviour before TLS). With lists, a client sees the union of its own
//! identity's rules and those of `*` (every client, TLS or not); a volume
//! outside them looks exactly like a volume that does not exist.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::tls::is_identity;

/// One entry of an identity's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportRule {
    /// `*`: every volume.
    All,
    /// `POOL/*`: every volume of a pool.
    Pool(String),
    /// A volume by name.
    Volume(String),
}

impl ExportRule {
    /// Parses `*`, `POOL/*` or a volume name.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.len() <= 255
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        };
        if s == "*" {
            Ok(Self::All)
        } else if let Some(pool) = s.strip_suffix("/*") {
            if name_ok(pool) {
                Ok(Self::Pool(pool.to_string()))
            } else {
                Err(format!("{s:?}: expected POOL/* with a pool name"))
            }
        } else if name_ok(s) {
            Ok(Self::Volume(s.to_string()))
        } else {
            Err(format!("{s:?}: expected a volume name, POOL/* or *"))
        }
    }
}

impl fmt::Display for ExportRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("*"),
            Self::Pool(p) => write!(f, "{p}/*"),
            Self::Volume(v) => f.write_str(v),
        }
    }
}

/// Finds the pool of a volume by name (`None`: unknown volume).
pub type PoolOf = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The key of the rules that apply to every client.
pub const EVERYONE: &str = "*";
/// Most identities in the lists.
const MAX_IDENTITIES: usize = 10_000;
/// Most rules per identity.
const MAX_RULES: usize = 1024;

/// Which exports each identity may see and open.
#[derive(Clone, Default)]
pub struct ExportAccess {
    /// identity (or [`EVERYONE`]) → rules; `None`: no lists, all open.
    rules: Option<BTreeMap<String, Vec<ExportRule>>>,
    /// Resolves `POOL/*` rules.
    pool_of: Option<PoolOf>,
}

impl fmt::Debug for ExportAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportAccess")
            .field("rules", &self.rules)
            .field("pool_of", &self.pool_of.as_ref().map(|_| "fn"))
            .finish()
    }
}

impl ExportAccess {
    /// Every client may open every volume.
    pub fn unrestricted() -> Self {
        Self::default()
    }

    /// Lists from `identity → rules` (identities as [`is_identity`], or
    /// `*`).
    pub fn lists(
        rules: BTreeMap<String, Vec<ExportRule>>,
        pool_of: Option<PoolOf>,
    ) -> Result<Self, String> {
        if rules.len() > MAX_IDENTITIES {
            return Err(format!("more than {MAX_IDENTITIES} identities"));
        }
        for (id, r) in &rules {
            if id != EVERYONE && !is_identity(id) {
                return Err(format!(
                    "identity {id:?}: expected * or 1-128 characters of [A-Za-z0-9._@-]"
                ));
            }
            if r.len() > MAX_RULES {
                return Err(format!("identity {id}: more than {MAX_RULES} exports"));
            }
        }
        Ok(Self {
            rules: Some(rules),
            pool_of,
        })
    }

    /// Parses `ID=RULE,RULE;ID=RULE...` (the flag's and the environment
    /// variable's form); an empty string means no lists.
    pub fn parse(spec: &str, pool_of: Option<PoolOf>) -> Result<Self, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Ok(Self {
                rules: None,
                pool_of,
            });
        }
        Self::lists(parse_lists(spec)?, pool_of)
    }

    /// True if lists restrict what clients see.
    pub fn is_restricted(&self) -> bool {
        self.rules.is_some()
    }

    /// Sets the pool resolver (for `POOL/*` rules).
    pub fn with_pool_of(mut self, pool_of: PoolOf) -> Self {
        self.pool_of = Some(pool_of);
        self
    }

    /// May the client with `identity` (a name, or none for a plain or
    /// anonymous client) see and open the volume `export`? A snapshot
    /// (`VOLUME@SNAPSHOT`, read-only) is open to whoever may open its
    /// volume.
    pub fn allows(&self, identity: Option<&str>, export: &str) -> bool {
        let Some(rules) = &self.rules else {
            return true;
        };
        let export = export.split_once('@').map_or(export, |(volume, _)| volume);
        let mut pool: Option<Option<String>> = None;
        let mut matches = |rule: &ExportRule| match rule {
            ExportRule::All => true,
            ExportRule::Volume(v) => v == export,
            ExportRule::Pool(p) => {
                let pool =
                    pool.get_or_insert_with(|| self.pool_of.as_ref().and_then(|f| f(export)));
                pool.as_deref() == Some(p.as_str())
            }
        };
        let own = identity.and_then(|id| rules.get(id)).into_iter().flatten();
        let everyone = rules.get(EVERYONE).into_iter().flatten();
        own.chain(everyone).any(&mut matches)
    }
}

/// Parses `ID=RULE,RULE;ID=RULE...` into a map (an identity given twice
/// gets the union of its rules).
pub fn parse_lists(spec: &str) -> Result<BTreeMap<String, Vec<ExportRule>>, String> {
    let mut out: BTreeMap<String, Vec<ExportRule>> = BTreeMap::new();
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((id, rules)) = entry.split_once('=') else {
            return Err(format!("{entry:?}: expected IDENTITY=VOLUME[,VOLUME...]"));
        };
        let id = id.trim();
        let list = out.entry(id.to_string()).or_default();
        for r in rules.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            list.push(ExportRule::parse(r)?);
        }
    }
    Ok(out)
}

/// The lists in the `ID=RULE,RULE;...` form (for `config show`).
pub fn format_lists(rules: &BTreeMap<String, Vec<ExportRule>>) -> String {
    rules
        .iter()
        .map(|(id, r)| {
            let r: Vec<String> = r.iter().map(ToString::to_string).collect();
            format!("{id}={}", r.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools() -> PoolOf {
        Arc::new(|v: &str| match v {
            "a1" | "a2" => Some("ssd".to_string()),
            "b1" => Some("hdd".to_string()),
            _ => None,
        })
    }

    #[test]
    fn without_lists_every_client_sees_every_volume() {
        let a = ExportAccess::unrestricted();
        assert!(a.allows(None, "a1"));
        assert!(a.allows(Some("alice"), "b1"));
        assert!(!a.is_restricted());
        assert!(!ExportAccess::parse("  ", None).unwrap().is_restricted());
    }

    #[test]
    fn an_identity_sees_its_volumes_its_pools_and_everyones() {
        let a = ExportAccess::parse("alice=a1;bob=hdd/*,x;*=shared", Some(pools())).unwrap();
        assert!(a.allows(Some("alice"), "a1"));
        assert!(!a.allows(Some("alice"), "a2"));
        assert!(!a.allows(Some("alice"), "b1"));
        assert!(a.allows(Some("alice"), "shared"));
        assert!(a.allows(Some("bob"), "b1"));
        assert!(a.allows(Some("bob"), "x"));
        assert!(!a.allows(Some("bob"), "a1"));
        assert!(a.allows(None, "shared"));
        assert!(!a.allows(None, "a1"));
        assert!(!a.allows(Some("mallory"), "a1"));
        assert!(a.allows(Some("mallory"), "shared"));
        // A volume whose pool is unknown matches no pool rule.
        assert!(!a.allows(Some("bob"), "nowhere"));
    }

    #[test]
    fn a_snapshot_is_open_to_whoever_may_open_its_volume() {
        let a = ExportAccess::parse("alice=a1;bob=hdd/*", Some(pools())).unwrap();
        assert!(a.allows(Some("alice"), "a1@monday"));
        assert!(!a.allows(Some("alice"), "a2@monday"));
        assert!(a.allows(Some("bob"), "b1@monday"));
        assert!(!a.allows(Some("bob"), "a1@monday"));
    }

    #[test]
    fn star_opens_everything_and_bad_specs_are_refused() {
        let a = ExportAccess::parse("admin=*", None).unwrap();
        assert!(a.allows(Some("admin"), "anything"));
        assert!(!a.allows(Some("alice"), "anything"));
        for bad in ["alice", "al ice=v", "alice=v/x", "alice=/*", "alice=v w"] {
            assert!(ExportAccess::parse(bad, None).is_err(), "{bad}");
        }
        let lists = parse_lists("b=v2;a=p/*,v1;b=v3").unwrap();
        assert_eq!(format_lists(&lists), "a=p/*,v1;b=v2,v3");
    }
}
