//! Keyring files: entities and their keys in Ceph's INI form, read by
//! daemons and the CLI, written 0600.
//!
//! ```text
//! # comments start with # or ;
//! [client.admin]
//!     key = 3q2+7wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=
//!     caps = "allow *"
//! ```
//!
//! One section per entity (`[TYPE.ID]`, validated as an [`EntityName`]),
//! each with exactly one `key` (base64 of 32 bytes). `caps` is for people
//! (the map's caps are what count); Ceph's `caps mon = ...` spelling is
//! accepted too. Other settings are ignored, so Ceph keyrings with `auid`
//! and the like still load. Errors name the line, never a key.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::{AuthError, AuthKey, EntityName};

/// The directory of a local cluster's keyrings (mode 0700), relative to
/// the cluster directory.
pub const KEYS_DIR: &str = "keys";

/// The keyring file of `entity` in a local cluster's directory `dir`
/// (what `pontoon up` writes and the CLI, gateways and libpontoon read).
pub fn local_keyring(dir: &Path, entity: &EntityName) -> PathBuf {
    dir.join(KEYS_DIR).join(format!("{entity}.keyring"))
}

/// Largest keyring file read, in bytes.
pub const MAX_KEYRING_BYTES: u64 = 1 << 20;

/// One section of a keyring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyringEntry {
    /// The entity's key.
    pub key: AuthKey,
    /// The caps as written in the file, if any (informational).
    pub caps: Option<String>,
}

/// A parsed keyring: entity → key (and caps text).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keyring {
    entries: BTreeMap<EntityName, KeyringEntry>,
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Self {
        Self::default()
    }

    /// A keyring of one entity.
    pub fn single(entity: EntityName, key: AuthKey, caps: Option<String>) -> Self {
        let mut k = Self::new();
        k.insert(entity, KeyringEntry { key, caps });
        k
    }

    /// Adds or replaces an entity's section.
    pub fn insert(&mut self, entity: EntityName, entry: KeyringEntry) {
        self.entries.insert(entity, entry);
    }

    /// The entity's section.
    pub fn get(&self, entity: &EntityName) -> Option<&KeyringEntry> {
        self.entries.get(entity)
    }

    /// Every section, by entity.
    pub fn entries(&self) -> impl Iterator<Item = (&EntityName, &KeyringEntry)> {
        self.entries.iter()
    }

    /// Whether there are no sections.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses keyring text. The error is `line N: what`, never a key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = BTreeMap::new();
        let mut section: Option<(EntityName, usize, Option<AuthKey>, Option<String>)> = None;
        let close = |entries: &mut BTreeMap<EntityName, KeyringEntry>,
                     s: Option<(EntityName, usize, Option<AuthKey>, Option<String>)>|
         -> Result<(), String> {
            if let Some((entity, line, key, caps)) = s {
                let key = key.ok_or_else(|| format!("line {line}: [{entity}] has no key"))?;
                if entries.contains_key(&entity) {
                    return Err(format!("line {line}: [{entity}] appears twice"));
                }
                entries.insert(entity, KeyringEntry { key, caps });
            }
            Ok(())
        };
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                let name = rest
                    .strip_suffix(']')
                    .ok_or_else(|| format!("line {n}: a section header ends with ']'"))?;
                let entity =
                    EntityName::parse(name.trim()).map_err(|e| format!("line {n}: {e}"))?;
                close(&mut entries, section.take())?;
                section = Some((entity, n, None, None));
                continue;
            }
            let Some((k, v)) = line.split_once('=').filter(|(k, _)| {
                let k = k.trim();
                !k.is_empty()
                    && k.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b' ' || b == b'_'
                    })
            }) else {
                return Err(format!("line {n}: expected `name = value`"));
            };
            let Some((entity, _, key, caps)) = section.as_mut() else {
                return Err(format!("line {n}: a setting before any [TYPE.ID] section"));
            };
            let (k, v) = (k.trim(), unquote(v.trim()));
            if k == "key" {
                if key.is_some() {
                    return Err(format!("line {n}: [{entity}] has two keys"));
                }
                *key = Some(AuthKey::from_base64(v).map_err(|e| format!("line {n}: {e}"))?);
            } else if (k == "caps" || k.starts_with("caps ")) && caps.is_none() {
                *caps = Some(v.to_string());
            }
        }
        close(&mut entries, section)?;
        Ok(Self { entries })
    }

    /// Reads and parses a keyring file.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        let err = |reason: String| AuthError::Keyring {
            path: path.display().to_string(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read: {e}")))?;
        if meta.len() > MAX_KEYRING_BYTES {
            return Err(err(format!(
                "{} bytes, more than a keyring holds",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        Self::parse(&text).map_err(err)
    }

    /// The file's text. Holds secrets: write it only to a 0600 file or to
    /// a terminal that asked for it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (entity, e) in &self.entries {
            out.push_str(&format!("[{entity}]\n\tkey = {}\n", e.key.to_base64()));
            if let Some(caps) = &e.caps {
                out.push_str(&format!("\tcaps = \"{}\"\n", caps.replace('"', "")));
            }
        }
        out
    }

    /// Writes the keyring to `path`, mode 0600 from the first byte: a
    /// temporary file beside it (created 0600), synced, then renamed over.
    pub fn write(&self, path: &Path) -> Result<(), AuthError> {
        let err = |reason: String| AuthError::Keyring {
            path: path.display().to_string(),
            reason,
        };
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let file_name = path
            .file_name()
            .ok_or_else(|| err("not a file name".into()))?;
        let tmp = dir.join(format!(
            ".{}.tmp.{}",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(self.render().as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(err(format!("cannot write: {e}")));
        }
        Ok(())
    }
}

/// Strips one pair of surrounding double quotes.
fn unquote(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::auth::KEY_BYTES;

    fn key(b: u8) -> AuthKey {
        AuthKey::from_bytes([b; KEY_BYTES])
    }

    #[test]
    fn keyrings_round_trip_and_read_ceph_spellings() {
        let mut k = Keyring::single(
            "client.admin".parse().unwrap(),
            key(1),
            Some("allow *".into()),
        );
        k.insert(
            "osd.0".parse().unwrap(),
            KeyringEntry {
                key: key(2),
                caps: None,
            },
        );
        let text = k.render();
        assert!(
            text.contains(&format!(
                "[client.admin]\n\tkey = {}\n\tcaps = \"allow *\"\n",
                key(1).to_base64()
            )),
            "{text}"
        );
        assert!(text.starts_with("[osd.0]\n\tkey = "), "{text}");
        assert_eq!(Keyring::parse(&text).unwrap(), k);

        let ceph = format!(
            "# made by hand\n[client.foo]\n  key = {}\n  auid = 0\n  caps mon = \"allow r\"\n  caps osd = \"allow rw pool=rbd\"\n\n; end\n",
            key(3).to_base64()
        );
        let k = Keyring::parse(&ceph).unwrap();
        let e = k.get(&"client.foo".parse().unwrap()).unwrap();
        assert_eq!(e.key, key(3));
        assert_eq!(e.caps.as_deref(), Some("allow r"));
    }

    #[test]
    fn bad_keyrings_name_the_line_and_never_the_key() {
        let good = key(1).to_base64();
        for (text, want) in [
            (format!("key = {good}\n"), "line 1: a setting before any"),
            ("[client.a]\n".to_string(), "line 1: [client.a] has no key"),
            (
                format!("[client.a\nkey = {good}\n"),
                "line 1: a section header",
            ),
            (format!("[bob]\nkey = {good}\n"), "line 1: bad entity name"),
            (
                "[client.a]\nkey = c2VjcmV0\n".to_string(),
                "line 2: bad key: 6 bytes",
            ),
            (
                format!("[client.a]\nkey = {good}\nkey = {good}\n"),
                "line 3: [client.a] has two keys",
            ),
            (
                format!("[client.a]\nkey = {good}\n[client.a]\nkey = {good}\n"),
                "line 3: [client.a] appears twice",
            ),
            (
                format!("[client.a]\n{good}\n"),
                "line 2: expected `name = value`",
            ),
        ] {
            let e = Keyring::parse(&text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains(&good) && !e.contains("c2VjcmV0"), "{e}");
        }
    }

    #[test]
    fn keyrings_are_written_0600_and_replace_older_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.admin.keyring");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let k = Keyring::single("client.admin".parse().unwrap(), key(7), None);
        k.write(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Keyring::load(&path).unwrap(), k);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
        let e = Keyring::load(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing: cannot read"), "{e}");
    }
}
