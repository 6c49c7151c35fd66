//! `pontoon auth add|ls|get|caps|rm|rotate|whoami`: entities, their keys
//! and capabilities (see [`pontoon_cluster::auth`]), and the keyrings of a
//! local cluster.
//!
//! # Who the CLI is
//!
//! The CLI acts as an entity (`--name`, `$PONTOON_NAME`, the config's
//! `auth.name`, default `client.admin`) whose key it reads from a keyring:
//! `--keyring FILE`, else `$PONTOON_KEYRING`, else the cluster directory's
//! `keys/<name>.keyring` (a `pontoon up` cluster found through `--cluster
//! DIR` or `$PONTOON_CLUSTER`), else the config's `auth.keyring`.
//!
//! Once the map holds any entity, every `auth` command but `whoami` needs
//! that identity to hold `allow *` with a key the map accepts. A map with
//! no entity at all (a cluster deployed by hand, before its first `auth
//! add`) lets the first admin be added without one. While etcd itself is
//! reachable without credentials, this check stops mistakes, not
//! attackers: see docs/security.md.
//!
//! # Secrets
//!
//! Keys are printed only by `auth get` (the keyring, or written to `-o
//! FILE` with mode 0600) and `auth rotate` (the new key); never by `ls`,
//! `--json` or in an error.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::ClusterMap;
use pontoon_cluster::auth::{
    ADMIN_ENTITY, AuthKey, AuthRecord, Caps, DEFAULT_ROTATION_GRACE, EntityName, KeyState, Keyring,
    Op, Profile, format_unix, now_unix,
};
use serde::Serialize;

use crate::cluster_args::{ClusterArgs, Target, format_duration, parse_duration};

pub use pontoon_cluster::auth::keyring::{KEYS_DIR, local_keyring};

/// `pontoon auth ...`.
#[derive(Args, Debug)]
pub struct AuthArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: AuthCmd,
}

/// Who the CLI is: `--name` and `--keyring`. Flatten into commands that
/// prove an identity.
#[derive(Args, Debug, Clone, Default)]
pub struct IdentityArgs {
    /// Keyring file holding this command's key (default: $PONTOON_KEYRING,
    /// else DIR/keys/<name>.keyring of a `pontoon up` cluster, else the
    /// config's auth.keyring)
    #[arg(long, global = true, value_name = "FILE")]
    pub keyring: Option<PathBuf>,
    /// Entity this command acts as (default: $PONTOON_NAME, else the
    /// config's auth.name, else client.admin)
    #[arg(long = "name", id = "as_entity", global = true, value_name = "ENTITY")]
    pub as_entity: Option<String>,
}

#[derive(Subcommand, Debug)]
enum AuthCmd {
    /// Add an entity (osd.N, mgr.NAME, gateway.NAME, client.NAME) with a new
    /// random key and the given caps, e.g. `allow rw pool=rbd`.
    Add {
        /// The entity.
        entity: String,
        /// Capabilities: `allow *`, `allow r|rw [pool=P | volume=P/V]`,
        /// `allow profile osd|mgr|gateway`, comma-separated (none: no
        /// rights).
        caps: Vec<String>,
        /// Also write its keyring to FILE (mode 0600).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// List entities, their caps and key state (no keys).
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print an entity's keyring section (its key and caps).
    Get {
        /// The entity.
        entity: String,
        /// Write the keyring to FILE (mode 0600) instead of printing it.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Replace an entity's caps.
    Caps {
        /// The entity.
        entity: String,
        /// The new caps ("" for none).
        #[arg(required = true)]
        caps: Vec<String>,
    },
    /// Remove an entity: its keys stop working at once.
    Rm {
        /// The entity.
        entity: String,
    },
    /// Give an entity a new key (printed). The old key stays valid for the
    /// grace period or until `--finish`, so nothing using it breaks while
    /// keyrings are replaced.
    Rotate {
        /// The entity.
        entity: String,
        /// How long the old key stays valid (default 1h; 0 revokes it at
        /// once).
        #[arg(long, value_name = "DURATION", conflicts_with = "finish")]
        grace: Option<String>,
        /// End the rotation: only the new key stays valid.
        #[arg(long)]
        finish: bool,
        /// Also write the new keyring to FILE (mode 0600).
        #[arg(
            short = 'o',
            long = "output",
            value_name = "FILE",
            conflicts_with = "finish"
        )]
        output: Option<PathBuf>,
    },
    /// Show which entity and keyring this command uses, and whether the
    /// map accepts its key.
    Whoami,
}

/// One row of `auth ls --json`: everything but the key.
#[derive(Serialize)]
struct EntityView {
    entity: String,
    kind: &'static str,
    caps: String,
    key_generation: u32,
    /// "stable", "rotating" (the previous key still valid) or
    /// "rotation-expired" (only the current one is; `--finish` tidies).
    key_state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_generation: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_valid_until: Option<String>,
    created: String,
}

fn view(rec: &AuthRecord, now: u64) -> EntityView {
    let (state, prev, until) = match &rec.keys {
        KeyState::Stable { .. } => ("stable", None, None),
        KeyState::Rotating {
            previous,
            previous_until_unix,
            ..
        } => (
            if now < *previous_until_unix {
                "rotating"
            } else {
                "rotation-expired"
            },
            Some(previous.generation),
            Some(format_unix(*previous_until_unix)),
        ),
    };
    EntityView {
        entity: rec.entity.to_string(),
        kind: rec.entity.kind().as_str(),
        caps: rec.caps.to_string(),
        key_generation: rec.keys.current().generation,
        key_state: state,
        previous_generation: prev,
        previous_valid_until: until,
        created: format_unix(rec.created_unix),
    }
}

fn entity(s: &str) -> Result<EntityName> {
    Ok(EntityName::parse(s)?)
}

/// The keyring text of one record: its current key and caps.
fn keyring_of(rec: &AuthRecord) -> Keyring {
    Keyring::single(
        rec.entity.clone(),
        rec.keys.current().key.clone(),
        Some(rec.caps.to_string()),
    )
}

/// The CLI's identity: who, the keyring it came from, and the key.
struct Identity {
    entity: EntityName,
    path: PathBuf,
    key: AuthKey,
}

/// The identity the client library proves to the OSDs (when the cluster's
/// `ms_mode` asks for one): found as [`identity`] finds the CLI's, with
/// `default_entity` when neither `--name`, `$PONTOON_NAME` nor the
/// config's `auth.name` names one. With the keyring's path.
pub fn client_identity(
    args: &IdentityArgs,
    target: &Target,
    default_entity: &str,
) -> Result<Option<(pontoon_client::ClientIdentity, PathBuf)>> {
    let mut args = args.clone();
    if args.as_entity.is_none()
        && crate::config_file::get()
            .setting("auth.name", None)?
            .value
            .is_none()
    {
        args.as_entity = Some(default_entity.to_string());
    }
    Ok(identity(&args, target)?.map(|me| {
        (
            pontoon_client::ClientIdentity {
                entity: me.entity.to_string(),
                key: *me.key.as_bytes(),
            },
            me.path,
        )
    }))
}

/// Keeps `feed`'s identity in step with its keyring file (see
/// [`pontoon_client::follow_keyring`]).
pub fn follow_keyring(
    feed: &std::sync::Arc<pontoon_client::MapFeed>,
    entity: EntityName,
    path: PathBuf,
) -> Result<()> {
    pontoon_client::follow_keyring(feed, entity, path).context("starting the keyring watcher")
}

/// Finds the CLI's identity (see the module docs for the order); `None`
/// when no keyring is given or found.
fn identity(args: &IdentityArgs, target: &Target) -> Result<Option<Identity>> {
    let config = crate::config_file::get();
    let name = config.setting(
        "auth.name",
        args.as_entity.as_deref().map(|v| ("--name", v)),
    )?;
    let entity = entity(name.value.as_deref().unwrap_or(ADMIN_ENTITY))?;
    let configured = config.setting(
        "auth.keyring",
        args.keyring
            .as_deref()
            .and_then(Path::to_str)
            .map(|v| ("--keyring", v)),
    )?;
    use crate::config_file::Source;
    let path = match (&configured.source, &configured.value) {
        (Source::Flag(_) | Source::Env(_), Some(p)) => Some(PathBuf::from(p)),
        _ => match target.dir.as_deref().map(|d| local_keyring(d, &entity)) {
            Some(p) if p.exists() => Some(p),
            _ => configured.value.as_deref().map(PathBuf::from),
        },
    };
    let path = match (path, &args.keyring) {
        (Some(p), _) => p,
        (None, Some(p)) => p.clone(),
        (None, None) => return Ok(None),
    };
    let ring = Keyring::load(&path)?;
    let key = match ring.get(&entity) {
        Some(e) => e.key.clone(),
        None => bail!(
            "keyring {} has no [{entity}] section (pick the entity with --name)",
            path.display()
        ),
    };
    Ok(Some(Identity { entity, path, key }))
}

/// Refuses unless the CLI's identity may administer the cluster (or the
/// map has no entity yet: bootstrap).
fn require_admin(map: &ClusterMap, me: Option<&Identity>) -> Result<()> {
    if map.auth.is_empty() {
        return Ok(());
    }
    let Some(me) = me else {
        bail!(
            "no keyring: the cluster has entities, so `pontoon auth` needs an admin's key \
             (--keyring FILE, PONTOON_KEYRING, or --cluster DIR of a `pontoon up` cluster)"
        );
    };
    let Some(creds) = map.credentials(&me.entity, now_unix()) else {
        bail!(
            "{} (keyring {}) is not an entity of this cluster",
            me.entity,
            me.path.display()
        );
    };
    if creds.accepts(me.key.as_bytes()).is_none() {
        bail!(
            "the key of {} in {} is not valid any more (rotated or replaced): \
             get the current one with an admin's `pontoon auth get {}`",
            me.entity,
            me.path.display(),
            me.entity
        );
    }
    if !creds.caps.allows(Op::Admin, None, None) {
        bail!(
            "{} may not administer the cluster (caps: {:?})",
            me.entity,
            creds.caps.to_string()
        );
    }
    Ok(())
}

/// Rewrites a local cluster's keyring of `rec` if the directory holds one.
fn refresh_local(target: &Target, rec: &AuthRecord) -> Result<Option<PathBuf>> {
    let Some(dir) = &target.dir else {
        return Ok(None);
    };
    let path = local_keyring(dir, &rec.entity);
    if !path.exists() {
        return Ok(None);
    }
    keyring_of(rec).write(&path)?;
    Ok(Some(path))
}

/// Runs `pontoon auth ...`.
pub fn run(args: AuthArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, target) = args.cluster.connect().await?;
        let me = identity(&args.cluster.identity, &target)?;
        if let AuthCmd::Whoami = args.cmd {
            return whoami(&store.load().await?, me.as_ref());
        }
        require_admin(&store.load().await?, me.as_ref())?;
        match args.cmd {
            AuthCmd::Add {
                entity: e,
                caps,
                output,
            } => {
                let e = entity(&e)?;
                let caps = Caps::parse_words(&caps)?;
                if let Some(out) = &output {
                    check_writable(out)?;
                }
                let rec = store.auth_add(&e, caps).await?;
                println!("added {} (caps: {:?})", rec.entity, rec.caps.to_string());
                if let Some(out) = output {
                    keyring_of(&rec).write(&out)?;
                    println!("keyring of {} written to {}", rec.entity, out.display());
                }
            }
            AuthCmd::Ls { json } => {
                let map = store.load().await?;
                let now = now_unix();
                let rows: Vec<EntityView> = map.auth.values().map(|r| view(r, now)).collect();
                if json {
                    println!("{}", serde_json::to_string_pretty(&rows)?);
                } else if rows.is_empty() {
                    println!("no entities");
                } else {
                    println!(
                        "{:<24} {:>7}  {:<34} CAPS",
                        "ENTITY", "KEY_GEN", "KEY_STATE"
                    );
                    for r in rows {
                        let state = match (&r.previous_generation, &r.previous_valid_until) {
                            (Some(g), Some(u)) if r.key_state == "rotating" => {
                                format!("rotating (gen {g} until {u})")
                            }
                            _ => r.key_state.to_string(),
                        };
                        println!(
                            "{:<24} {:>7}  {:<34} {}",
                            r.entity, r.key_generation, state, r.caps
                        );
                    }
                }
            }
            AuthCmd::Get { entity: e, output } => {
                let rec = store.auth_get(&entity(&e)?).await?;
                match output {
                    Some(out) => {
                        keyring_of(&rec).write(&out)?;
                        println!("keyring of {} written to {}", rec.entity, out.display());
                    }
                    None => print!("{}", keyring_of(&rec).render()),
                }
            }
            AuthCmd::Caps { entity: e, caps } => {
                let caps = Caps::parse_words(&caps)?;
                let rec = store.auth_set_caps(&entity(&e)?, caps).await?;
                println!("{} caps: {:?}", rec.entity, rec.caps.to_string());
            }
            AuthCmd::Rm { entity: e } => {
                let rec = store.auth_remove(&entity(&e)?).await?;
                println!("removed {}", rec.entity);
            }
            AuthCmd::Rotate {
                entity: e,
                grace,
                finish,
                output,
            } => {
                let e = entity(&e)?;
                if finish {
                    let rec = store.auth_finish_rotation(&e).await?;
                    println!(
                        "{}: rotation finished; only key generation {} is valid",
                        rec.entity,
                        rec.keys.current().generation
                    );
                    return Ok(());
                }
                let grace = match grace {
                    Some(g) => parse_duration(&g).map_err(|err| anyhow!("--grace: {err}"))?,
                    None => DEFAULT_ROTATION_GRACE,
                };
                if let Some(out) = &output {
                    check_writable(out)?;
                }
                let rec = store.auth_rotate(&e, grace).await?;
                let cur = rec.keys.current();
                println!("{}", cur.key.to_base64());
                match &rec.keys {
                    KeyState::Rotating {
                        previous,
                        previous_until_unix,
                        ..
                    } => eprintln!(
                        "{}: new key generation {}; generation {} stays valid until {} ({}), \
                         or until `pontoon auth rotate {} --finish`",
                        rec.entity,
                        cur.generation,
                        previous.generation,
                        format_unix(*previous_until_unix),
                        format_duration(grace),
                        rec.entity
                    ),
                    KeyState::Stable { .. } => eprintln!(
                        "{}: new key generation {}; the old key is revoked",
                        rec.entity, cur.generation
                    ),
                }
                if let Some(path) = refresh_local(&target, &rec)? {
                    eprintln!("updated {}", path.display());
                }
                if let Some(out) = output {
                    keyring_of(&rec).write(&out)?;
                    eprintln!("keyring of {} written to {}", rec.entity, out.display());
                }
            }
            AuthCmd::Whoami => unreachable!("handled above"),
        }
        Ok(())
    })
}

/// Fails early (before the map changes) if `path`'s directory is missing.
fn check_writable(path: &Path) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!(
            "cannot write {}: {} is not a directory",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

fn whoami(map: &ClusterMap, me: Option<&Identity>) -> Result<()> {
    let Some(me) = me else {
        println!("no keyring found (--keyring FILE, PONTOON_KEYRING, --cluster DIR, auth.keyring)");
        return Ok(());
    };
    print!("{} (keyring {})", me.entity, me.path.display());
    match map.credentials(&me.entity, now_unix()) {
        None => println!(": not an entity of this cluster"),
        Some(c) => match c.accepts(me.key.as_bytes()) {
            Some(generation) => println!(
                ": key generation {generation} valid; caps {:?}",
                c.caps.to_string()
            ),
            None => println!(": key NOT valid (rotated, or another cluster's)"),
        },
    }
    Ok(())
}

/// The entities a local cluster (`pontoon up`) gives keys to: the admin,
/// each OSD, its two managers and its gateways (`nbd`, `nvmf`; `mgr` is
/// the standby manager).
fn local_entities(osds: u32, gateways: &[&str]) -> Result<Vec<(EntityName, Caps)>> {
    let mut out = vec![
        (entity(ADMIN_ENTITY)?, Caps::admin()),
        (entity("mgr.up")?, Caps::profile(Profile::Mgr)),
    ];
    for id in 0..osds {
        out.push((EntityName::osd(id), Caps::profile(Profile::Osd)));
    }
    for g in gateways {
        out.push(match *g {
            "mgr" => (entity("mgr.standby")?, Caps::profile(Profile::Mgr)),
            g => (
                entity(&format!("gateway.{g}"))?,
                Caps::profile(Profile::Gateway),
            ),
        });
    }
    Ok(out)
}

/// What `pontoon up` runs at each start: every entity of the local
/// cluster exists in the map (new ones get a new key and default caps;
/// existing ones are left as they are), and `DIR/keys/<entity>.keyring`
/// holds each one's current key (mode 0600, in a 0700 directory).
/// Returns the admin keyring's path.
pub async fn bootstrap_local(
    store: &pontoon_cluster::MapStore,
    dir: &Path,
    osds: u32,
    gateways: &[&str],
) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let keys = dir.join(KEYS_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&keys)
        .with_context(|| format!("cannot create {}", keys.display()))?;
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot restrict {}", keys.display()))?;
    let want = local_entities(osds, gateways)?;
    let records = store.auth_ensure_all(&want).await?;
    for rec in &records {
        let path = local_keyring(dir, &rec.entity);
        let ring = keyring_of(rec);
        if Keyring::load(&path).ok().as_ref() != Some(&ring) {
            ring.write(&path)?;
        }
    }
    Ok(local_keyring(dir, &entity(ADMIN_ENTITY)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_cluster_names_an_entity_per_daemon() {
        let e = local_entities(2, &["nbd", "mgr"]).unwrap();
        let names: Vec<String> = e.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            names,
            [
                "client.admin",
                "mgr.up",
                "osd.0",
                "osd.1",
                "gateway.nbd",
                "mgr.standby"
            ]
        );
        assert!(e[0].1.is_admin());
        assert!(e[2].1.allows(Op::OsdRole, None, None));
        assert!(!e[4].1.allows(Op::Admin, None, None));
    }
}
