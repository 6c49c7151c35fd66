//! A client's identity read from a keyring file, and kept in step with
//! the file: `pontoon auth rotate ENTITY -o FILE` writes the new key there,
//! and a process following the file uses it for the connections it makes
//! from then on, so a rotation needs no restart (the old key stays valid
//! for the rotation's grace period, which covers the poll interval).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pontoon_cluster::auth::{EntityName, Keyring};

use crate::{ClientIdentity, MapFeed};

/// How often a follower looks whether its keyring file changed.
const POLL: Duration = Duration::from_secs(1);

/// Why a keyring file gave no identity.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    /// The file could not be read or parsed.
    #[error(transparent)]
    Load(#[from] pontoon_cluster::auth::AuthError),
    /// The file has no key for the entity.
    #[error("keyring {path} has no [{entity}] section")]
    NoEntity {
        /// The file.
        path: String,
        /// The entity looked for.
        entity: String,
    },
}

/// `entity`'s identity from the keyring file at `path`.
pub fn identity_from_keyring(
    path: &Path,
    entity: &EntityName,
) -> Result<ClientIdentity, KeyringError> {
    let ring = Keyring::load(path)?;
    let entry = ring.get(entity).ok_or_else(|| KeyringError::NoEntity {
        path: path.display().to_string(),
        entity: entity.to_string(),
    })?;
    Ok(ClientIdentity {
        entity: entity.to_string(),
        key: *entry.key.as_bytes(),
    })
}

/// Keeps `feed`'s identity in step with the keyring file at `path`: a
/// thread polls the file's change time each second and, when it changed
/// and holds a different key for `entity`, gives the feed that key. It
/// ends with the feed. A file that no longer parses or lacks the entity
/// keeps the old key (and says so once per change).
pub fn follow_keyring(
    feed: &Arc<MapFeed>,
    entity: EntityName,
    path: PathBuf,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(feed);
    let changed =
        |p: &Path| -> Option<SystemTime> { std::fs::metadata(p).and_then(|m| m.modified()).ok() };
    let mut seen = changed(&path);
    std::thread::Builder::new()
        .name("keyring-watch".into())
        .spawn(move || {
            let mut complained = false;
            loop {
                std::thread::sleep(POLL);
                let Some(feed) = weak.upgrade() else { return };
                let now = changed(&path);
                if now == seen {
                    continue;
                }
                match identity_from_keyring(&path, &entity) {
                    Ok(me) => {
                        seen = now;
                        complained = false;
                        if feed.identity().is_some_and(|id| id.key != me.key) {
                            tracing::info!(%entity, keyring = %path.display(), "keyring changed: new connections use its key");
                            feed.set_identity(me);
                        }
                    }
                    Err(e) if !complained => {
                        complained = true;
                        tracing::warn!(%entity, keyring = %path.display(), "keyring changed but gives no key ({e}): keeping the old key");
                    }
                    Err(_) => {}
                }
            }
        })?;
    Ok(())
}
