//! Capabilities: what an entity may do, as a small Ceph-like language, and
//! a pure evaluator of it ([`Caps::allows`]).
//!
//! # Grammar
//!
//! ```text
//! caps    := ε | grant ((',' | ';')? grant)*
//! grant   := 'allow' ( '*'
//!                    | 'profile' ('osd' | 'mgr' | 'gateway')
//!                    | perm target? )
//! perm    := 'r' | 'rw'
//! target  := 'pool' '=' NAME | 'volume' '=' NAME '/' NAME
//! NAME    := [A-Za-z0-9._-]{1,128}
//! ```
//!
//! Tokens are separated by white space; `,`, `;` and `=` are tokens of
//! their own, so `allow rw pool=rbd, allow r volume=rbd/vm1` and the shell
//! words `allow rw pool = rbd allow r volume=rbd/vm1` mean the same. A new
//! `allow` starts a new grant. What each grant gives:
//!
//! | grant | gives |
//! |---|---|
//! | `allow *` | cluster admin: read, write and [`Op::Admin`] everywhere |
//! | `allow r` / `allow rw` | read / read-write on every pool and volume |
//! | `allow r pool=P` / `allow rw pool=P` | on pool P and all its volumes |
//! | `allow r volume=P/V` / `allow rw volume=P/V` | on volume V of pool P only |
//! | `allow profile osd` | read-write everywhere and [`Op::OsdRole`] (replica sub-operations, peering, recovery) |
//! | `allow profile mgr` | read-write and admin everywhere |
//! | `allow profile gateway` | read-write everywhere (a gateway narrows it per host) |
//!
//! Grants add up; nothing subtracts. No caps at all is valid: the entity
//! can prove who it is and do nothing. `allow *` does not give
//! [`Op::OsdRole`]: only OSDs speak as OSDs.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::is_valid_name;

/// Longest caps text accepted, in bytes.
pub const MAX_CAPS_LEN: usize = 4096;
/// Most grants one entity may hold.
pub const MAX_GRANTS: usize = 64;

/// What a request wants to do; [`Caps::allows`] says whether it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Read data or metadata (a volume's blocks, a pool's volume list).
    Read,
    /// Change data (write, discard, create or resize a volume).
    Write,
    /// Change the cluster itself: pools, OSDs, settings, entities and keys.
    Admin,
    /// Speak as an OSD to another OSD: replica sub-operations, peering,
    /// recovery pushes. Only `allow profile osd` gives it; the protocol
    /// also checks that the entity is an `osd.N` of the current map.
    OsdRole,
}

/// Read-only or read-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Perm {
    /// `r`.
    Read,
    /// `rw`.
    ReadWrite,
}

/// What a `r`/`rw` grant applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Every pool and volume (no target written).
    Everything,
    /// `pool=NAME`: the pool and every volume in it.
    Pool(String),
    /// `volume=POOL/NAME`: that volume only.
    Volume {
        /// The volume's pool.
        pool: String,
        /// The volume.
        volume: String,
    },
}

/// A daemon role's fixed set of rights (`allow profile ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    /// `profile osd`.
    Osd,
    /// `profile mgr`.
    Mgr,
    /// `profile gateway`.
    Gateway,
}

impl Profile {
    fn as_str(self) -> &'static str {
        match self {
            Profile::Osd => "osd",
            Profile::Mgr => "mgr",
            Profile::Gateway => "gateway",
        }
    }
}

/// One `allow ...` clause.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Grant {
    /// `allow *`: cluster admin.
    All,
    /// `allow profile ROLE`.
    Profile(Profile),
    /// `allow r|rw [target]`.
    Access {
        /// Read or read-write.
        perm: Perm,
        /// Where.
        target: Target,
    },
}

impl Grant {
    /// Whether this grant alone allows `op` (see [`Caps::allows`]).
    pub fn allows(&self, op: Op, pool: Option<&str>, volume: Option<&str>) -> bool {
        match self {
            Grant::All => op != Op::OsdRole,
            Grant::Profile(Profile::Osd) => matches!(op, Op::Read | Op::Write | Op::OsdRole),
            Grant::Profile(Profile::Mgr) => matches!(op, Op::Read | Op::Write | Op::Admin),
            Grant::Profile(Profile::Gateway) => matches!(op, Op::Read | Op::Write),
            Grant::Access { perm, target } => {
                let op_ok = match op {
                    Op::Read => true,
                    Op::Write => *perm == Perm::ReadWrite,
                    Op::Admin | Op::OsdRole => false,
                };
                op_ok
                    && match target {
                        Target::Everything => true,
                        Target::Pool(p) => pool == Some(p.as_str()),
                        Target::Volume { pool: p, volume: v } => {
                            pool == Some(p.as_str()) && volume == Some(v.as_str())
                        }
                    }
            }
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::All => f.write_str("allow *"),
            Grant::Profile(p) => write!(f, "allow profile {}", p.as_str()),
            Grant::Access { perm, target } => {
                f.write_str(match perm {
                    Perm::Read => "allow r",
                    Perm::ReadWrite => "allow rw",
                })?;
                match target {
                    Target::Everything => Ok(()),
                    Target::Pool(p) => write!(f, " pool={p}"),
                    Target::Volume { pool, volume } => write!(f, " volume={pool}/{volume}"),
                }
            }
        }
    }
}

/// An entity's capabilities: a list of grants, any of which may allow an
/// operation. Written and read as text ([`fmt::Display`], [`Caps::parse`]);
/// stored in the map in its canonical text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Caps {
    grants: Vec<Grant>,
}

/// Why a caps text was refused: the text, and what is wrong where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad caps {text:?}: {reason}")]
pub struct CapsError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Caps {
    /// No rights at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// `allow *`.
    pub fn admin() -> Self {
        Self {
            grants: vec![Grant::All],
        }
    }

    /// `allow profile ROLE`.
    pub fn profile(p: Profile) -> Self {
        Self {
            grants: vec![Grant::Profile(p)],
        }
    }

    /// The grants, in the order written.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// Whether there are no grants.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// Whether the caps hold `allow *` (what "the last admin" counts).
    pub fn is_admin(&self) -> bool {
        self.grants.contains(&Grant::All)
    }

    /// Whether some grant allows `op`:
    ///
    /// * `pool: None, volume: None` is a cluster-wide operation (list every
    ///   pool, read the whole map, change the cluster): only grants without
    ///   a pool or volume allow it.
    /// * `pool: Some(p), volume: None` is an operation on pool `p` as a
    ///   whole (list its volumes, create one in it): grants for everything
    ///   or for `pool=p`.
    /// * `pool: Some(p), volume: Some(v)` is an operation on volume `v` of
    ///   pool `p`: grants for everything, `pool=p` or `volume=p/v`.
    /// * `pool: None, volume: Some(_)` (the pool unknown) is allowed only
    ///   by grants for everything.
    ///
    /// [`Op::Admin`] needs `allow *` or `profile mgr`; [`Op::OsdRole`]
    /// needs `profile osd`. Pure: no I/O, no allocation.
    pub fn allows(&self, op: Op, pool: Option<&str>, volume: Option<&str>) -> bool {
        self.grants.iter().any(|g| g.allows(op, pool, volume))
    }

    /// Parses CLI words (`pontoon auth add client.x allow rw pool=rbd`):
    /// they are joined with spaces and parsed as one text.
    pub fn parse_words<S: AsRef<str>>(words: &[S]) -> Result<Self, CapsError> {
        let text: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
        Self::parse(&text.join(" "))
    }

    /// Parses caps text (see the module docs for the grammar). The error
    /// names the text and what was expected where.
    pub fn parse(text: &str) -> Result<Self, CapsError> {
        let err = |reason: String| CapsError {
            text: text.to_string(),
            reason,
        };
        if text.len() > MAX_CAPS_LEN {
            return Err(err(format!(
                "longer than {MAX_CAPS_LEN} bytes ({})",
                text.len()
            )));
        }
        let tokens = tokenize(text);
        let mut grants = Vec::new();
        let mut i = 0;
        let at = |i: usize| tokens.get(i).copied();
        let found = |t: Option<&str>| match t {
            Some(t) => format!("found {t:?}"),
            None => "found the end".to_string(),
        };
        while i < tokens.len() {
            match tokens[i] {
                "," | ";" if !grants.is_empty() => {
                    i += 1;
                    continue;
                }
                "allow" => i += 1,
                "mon" | "osd" | "mgr" => {
                    return Err(err(format!(
                        "Pontoon caps have no per-service sections ({:?}): write e.g. `allow rw pool=rbd`",
                        tokens[i]
                    )));
                }
                t => {
                    return Err(err(format!(
                        "expected \"allow\" at the start of a grant, found {t:?}"
                    )));
                }
            }
            let grant = match at(i) {
                Some("*") => {
                    i += 1;
                    Grant::All
                }
                Some("profile") => {
                    let p = match at(i + 1) {
                        Some("osd") => Profile::Osd,
                        Some("mgr") => Profile::Mgr,
                        Some("gateway") => Profile::Gateway,
                        t => {
                            return Err(err(format!(
                                "expected osd, mgr or gateway after \"profile\", {}",
                                found(t)
                            )));
                        }
                    };
                    i += 2;
                    Grant::Profile(p)
                }
                Some(p @ ("r" | "rw")) => {
                    let perm = if p == "r" {
                        Perm::Read
                    } else {
                        Perm::ReadWrite
                    };
                    i += 1;
                    let target = match at(i) {
                        Some(kind @ ("pool" | "volume")) => {
                            if at(i + 1) != Some("=") {
                                return Err(err(format!(
                                    "expected \"=\" after {kind:?}, {}",
                                    found(at(i + 1))
                                )));
                            }
                            let Some(value) = at(i + 2).filter(|v| !matches!(*v, "," | ";" | "="))
                            else {
                                return Err(err(format!(
                                    "expected a {kind} name after \"{kind}=\", {}",
                                    found(at(i + 2))
                                )));
                            };
                            i += 3;
                            target(kind, value).map_err(err)?
                        }
                        Some(t) if t.starts_with("pool") || t.starts_with("volume") => {
                            return Err(err(format!(
                                "unknown target {t:?}: expected pool=NAME or volume=POOL/NAME"
                            )));
                        }
                        _ => Target::Everything,
                    };
                    Grant::Access { perm, target }
                }
                Some(w @ ("w" | "x" | "rx" | "wx" | "rwx")) => {
                    return Err(err(format!(
                        "permission {w:?} is not supported: use r, rw or *"
                    )));
                }
                t => {
                    return Err(err(format!(
                        "expected r, rw, * or profile after \"allow\", {}",
                        found(t)
                    )));
                }
            };
            if grant == Grant::All
                && let Some(t @ ("pool" | "volume")) = at(i)
            {
                return Err(err(format!(
                    "\"allow *\" is cluster admin and takes no {t}: use `allow rw {t}=...`"
                )));
            }
            grants.push(grant);
            if grants.len() > MAX_GRANTS {
                return Err(err(format!("more than {MAX_GRANTS} grants")));
            }
            match at(i) {
                None | Some("allow") => {}
                Some("," | ";") => i += 1,
                Some(t) => {
                    return Err(err(format!(
                        "unexpected {t:?} after `{}` (grants are separated by \",\")",
                        grants.last().expect("just pushed")
                    )));
                }
            }
        }
        Ok(Self { grants })
    }
}

/// Splits caps text into words and the one-character tokens `,` `;` `=`.
fn tokenize(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        let punct = matches!(c, ',' | ';' | '=');
        if c.is_whitespace() || punct {
            if let Some(s) = start.take() {
                out.push(&text[s..i]);
            }
            if punct {
                out.push(&text[i..i + 1]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

fn target(kind: &str, value: &str) -> Result<Target, String> {
    let name = |what: &str, n: &str| {
        if is_valid_name(n) {
            Ok(n.to_string())
        } else {
            Err(format!(
                "{what} name {n:?} must be 1-128 characters of [A-Za-z0-9._-]"
            ))
        }
    };
    if kind == "pool" {
        return Ok(Target::Pool(name("pool", value)?));
    }
    let Some((pool, volume)) = value.split_once('/') else {
        return Err(format!(
            "volume={value} must name the pool too: volume=POOL/{value}"
        ));
    };
    Ok(Target::Volume {
        pool: name("pool", pool)?,
        volume: name("volume", volume)?,
    })
}

impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.grants.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Caps {
    type Err = CapsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Caps {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Caps {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(s: &str) -> Caps {
        Caps::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn bad(s: &str) -> String {
        match Caps::parse(s) {
            Ok(c) => panic!("{s:?} parsed as {c}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn ceph_like_caps_parse_to_their_grants_and_print_canonically() {
        assert_eq!(caps("allow *").grants(), &[Grant::All]);
        assert_eq!(
            caps("allow rw pool=rbd").grants(),
            &[Grant::Access {
                perm: Perm::ReadWrite,
                target: Target::Pool("rbd".into())
            }]
        );
        assert_eq!(
            caps("allow r volume=rbd/vm1").grants(),
            &[Grant::Access {
                perm: Perm::Read,
                target: Target::Volume {
                    pool: "rbd".into(),
                    volume: "vm1".into()
                }
            }]
        );
        let c = caps("  allow rw pool = rbd ;allow r volume=rbd/vm1,allow profile osd allow r ");
        assert_eq!(c.grants().len(), 4);
        assert_eq!(
            c.to_string(),
            "allow rw pool=rbd, allow r volume=rbd/vm1, allow profile osd, allow r"
        );
        assert_eq!(caps(&c.to_string()), c, "the canonical text parses back");
        assert!(caps("").is_empty());
        assert!(caps("   ").is_empty());
        assert_eq!(
            Caps::parse_words(&["allow", "rw", "pool=rbd", "allow", "r"]).unwrap(),
            caps("allow rw pool=rbd, allow r")
        );
    }

    #[test]
    fn bad_caps_say_what_was_expected() {
        let e = bad("allow q");
        assert!(
            e.contains("bad caps \"allow q\"") && e.contains("expected r, rw"),
            "{e}"
        );
        let e = bad("allow w pool=rbd");
        assert!(e.contains("\"w\" is not supported"), "{e}");
        let e = bad("allow rwx");
        assert!(e.contains("\"rwx\" is not supported"), "{e}");
        let e = bad("allow");
        assert!(e.contains("found the end"), "{e}");
        let e = bad("rw pool=rbd");
        assert!(e.contains("expected \"allow\""), "{e}");
        let e = bad("allow rw pool");
        assert!(e.contains("expected \"=\" after \"pool\""), "{e}");
        let e = bad("allow rw pool=");
        assert!(e.contains("expected a pool name"), "{e}");
        let e = bad("allow rw pool=a/b");
        assert!(e.contains("pool name \"a/b\""), "{e}");
        let e = bad("allow r volume=vm1");
        assert!(e.contains("volume=POOL/vm1"), "{e}");
        let e = bad("allow r volume=rbd/");
        assert!(e.contains("volume name \"\""), "{e}");
        let e = bad("allow r pools=rbd");
        assert!(e.contains("unknown target"), "{e}");
        let e = bad("allow * pool=rbd");
        assert!(e.contains("takes no pool"), "{e}");
        let e = bad("allow profile admin");
        assert!(e.contains("osd, mgr or gateway"), "{e}");
        let e = bad("osd allow rw");
        assert!(e.contains("no per-service sections"), "{e}");
        let e = bad("allow r pool=rbd extra");
        assert!(e.contains("unexpected \"extra\""), "{e}");
        let e = bad(", allow r");
        assert!(e.contains("expected \"allow\""), "{e}");
        let e = bad(&"allow r, ".repeat(MAX_GRANTS + 1));
        assert!(e.contains("more than 64 grants"), "{e}");
        let e = bad(&"x".repeat(MAX_CAPS_LEN + 1));
        assert!(e.contains("longer than"), "{e}");
    }

    #[test]
    fn admin_may_do_everything_but_speak_as_an_osd() {
        let c = caps("allow *");
        for op in [Op::Read, Op::Write, Op::Admin] {
            assert!(c.allows(op, None, None));
            assert!(c.allows(op, Some("a"), Some("v")));
        }
        assert!(!c.allows(Op::OsdRole, None, None));
        assert!(c.is_admin());
        assert!(!caps("allow profile mgr").is_admin());
    }

    #[test]
    fn pool_grants_reach_the_pool_and_its_volumes_only() {
        let c = caps("allow rw pool=a");
        assert!(c.allows(Op::Read, Some("a"), None));
        assert!(c.allows(Op::Write, Some("a"), Some("v")));
        assert!(!c.allows(Op::Read, Some("b"), Some("v")));
        assert!(!c.allows(Op::Read, None, None), "not cluster-wide");
        assert!(!c.allows(Op::Read, None, Some("v")), "pool unknown");
        assert!(!c.allows(Op::Admin, Some("a"), None));
        assert!(!c.allows(Op::OsdRole, Some("a"), Some("v")));
    }

    #[test]
    fn read_only_grants_refuse_writes() {
        let c = caps("allow r pool=a");
        assert!(c.allows(Op::Read, Some("a"), Some("v")));
        assert!(!c.allows(Op::Write, Some("a"), Some("v")));
        let c = caps("allow r");
        assert!(c.allows(Op::Read, None, None));
        assert!(c.allows(Op::Read, Some("z"), Some("v")));
        assert!(!c.allows(Op::Write, Some("z"), Some("v")));
    }

    #[test]
    fn volume_grants_reach_that_volume_only() {
        let c = caps("allow r volume=a/v, allow rw volume=a/w");
        assert!(c.allows(Op::Read, Some("a"), Some("v")));
        assert!(!c.allows(Op::Write, Some("a"), Some("v")));
        assert!(c.allows(Op::Write, Some("a"), Some("w")));
        assert!(!c.allows(Op::Read, Some("a"), Some("x")));
        assert!(
            !c.allows(Op::Read, Some("b"), Some("v")),
            "same name, other pool"
        );
        assert!(!c.allows(Op::Read, Some("a"), None), "not the whole pool");
    }

    #[test]
    fn grants_add_up() {
        let c = caps("allow r, allow rw pool=a");
        assert!(c.allows(Op::Write, Some("a"), Some("v")));
        assert!(!c.allows(Op::Write, Some("b"), Some("v")));
        assert!(c.allows(Op::Read, Some("b"), Some("v")));
    }

    #[test]
    fn profiles_give_their_roles() {
        let osd = caps("allow profile osd");
        assert!(osd.allows(Op::OsdRole, None, None));
        assert!(osd.allows(Op::Write, Some("a"), Some("v")));
        assert!(!osd.allows(Op::Admin, None, None));
        let mgr = caps("allow profile mgr");
        assert!(mgr.allows(Op::Admin, None, None));
        assert!(!mgr.allows(Op::OsdRole, None, None));
        let gw = caps("allow profile gateway");
        assert!(gw.allows(Op::Write, Some("a"), Some("v")));
        assert!(!gw.allows(Op::Admin, None, None));
        assert!(!gw.allows(Op::OsdRole, None, None));
    }

    #[test]
    fn no_caps_allow_nothing() {
        let c = Caps::none();
        for op in [Op::Read, Op::Write, Op::Admin, Op::OsdRole] {
            assert!(!c.allows(op, None, None));
            assert!(!c.allows(op, Some("a"), Some("v")));
        }
    }

    #[test]
    fn caps_serialize_as_their_canonical_text() {
        let c = caps("allow rw   pool=rbd;allow r");
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, r#""allow rw pool=rbd, allow r""#);
        assert_eq!(serde_json::from_str::<Caps>(&json).unwrap(), c);
        assert!(serde_json::from_str::<Caps>(r#""allow q""#).is_err());
    }
}
