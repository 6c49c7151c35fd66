//! The `cluster` argument of `pontoon_connect`: a cluster directory, an
//! `etcd=URL[,URL...][;name=NAME]` string, or nothing (the environment),
//! resolved with the client library's [`locate`] rules, as the `pontoon`
//! command resolves `--cluster` / `--etcd`.
//!
//! The `etcd=` string also takes etcd's TLS settings and user, each
//! overriding the environment's (`$PONTOON_ETCD_CA_FILE`, ...):
//! `ca=FILE`, `cert=FILE`, `key=FILE`, `user=NAME`, `password_file=FILE`
//! (a password itself only through `$PONTOON_ETCD_PASSWORD`, never in a
//! string that may end up in a log).
//!
//! Who the client is to the OSDs (needed when the cluster's `ms_mode` is
//! not `none`): `entity=NAME` and `keyring=FILE` in the string, else
//! `$PONTOON_NAME` and `$PONTOON_KEYRING`; the entity defaults to
//! `client.admin` and the keyring to the cluster directory's
//! `keys/<entity>.keyring` when there is one ([`identity`]).

use std::path::{Path, PathBuf};

use pontoon_client::locate::{self, Location};
use pontoon_cluster::EtcdAuth;
use pontoon_cluster::auth::EntityName;

use crate::error::Fail;

/// The `entity=` and `keyring=` parts of an `etcd=` string, and the rest.
fn split_identity(s: &str) -> Result<(String, Option<String>, Option<String>), Fail> {
    let (mut rest, mut entity, mut keyring) = (Vec::new(), None, None);
    for part in s.split(';') {
        let (slot, v) = match part.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("entity", v)) => (&mut entity, v),
            Some(("keyring", v)) => (&mut keyring, v),
            _ => {
                rest.push(part);
                continue;
            }
        };
        if slot.replace(v.to_string()).is_some() {
            return Err(Fail::inval(format!(
                "bad cluster string {s:?}: {part:?} given twice"
            )));
        }
    }
    Ok((rest.join(";"), entity, keyring))
}

/// The identity the client proves to the OSDs, its entity and the
/// keyring file it came from (see the module docs): `None` when no keyring
/// is given or found.
pub(crate) fn identity(
    spec: Option<&str>,
    at: &Location,
) -> Result<Option<(pontoon_client::ClientIdentity, EntityName, PathBuf)>, Fail> {
    let (entity, keyring) = match spec {
        Some(s) if s.trim_start().starts_with("etcd=") => {
            let (_, e, k) = split_identity(s)?;
            (e, k)
        }
        _ => (None, None),
    };
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let entity = entity
        .or_else(|| env("PONTOON_NAME"))
        .unwrap_or_else(|| pontoon_cluster::auth::ADMIN_ENTITY.to_string());
    let name = EntityName::parse(&entity).map_err(|e| Fail::inval(format!("entity: {e}")))?;
    let path = keyring
        .map(PathBuf::from)
        .or_else(|| env("PONTOON_KEYRING").map(PathBuf::from));
    let path = match path {
        Some(p) => p,
        None => match at
            .dir
            .as_deref()
            .map(|d| pontoon_cluster::auth::keyring::local_keyring(d, &name))
        {
            Some(p) if p.exists() => p,
            _ => return Ok(None),
        },
    };
    let me = pontoon_client::identity_from_keyring(&path, &name)
        .map_err(|e| Fail::new(libc::EACCES, e.to_string()))?;
    Ok(Some((me, name, path)))
}

/// Resolves `spec` (`None`: the environment) into endpoints and a name.
pub(crate) fn resolve(spec: Option<&str>) -> Result<Location, Fail> {
    let at = match spec {
        None => locate::resolve(None, None, None)?,
        Some(s) if s.trim().is_empty() => {
            return Err(Fail::inval(
                "empty cluster string: give a cluster directory or etcd=URL[,URL...][;name=NAME]",
            ));
        }
        Some(s) if s.trim_start().starts_with("etcd=") => {
            let (s, _, _) = split_identity(s)?;
            let s = s.as_str();
            let mut etcd = None;
            let mut name = None;
            let (mut ca, mut cert, mut key, mut user, mut password_file) =
                (None, None, None, None, None);
            for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, v) = part.split_once('=').ok_or_else(|| {
                    Fail::inval(format!(
                        "bad cluster string {s:?}: {part:?} is not key=value"
                    ))
                })?;
                let slot = match k.trim() {
                    "etcd" => &mut etcd,
                    "name" => &mut name,
                    "ca" => &mut ca,
                    "cert" => &mut cert,
                    "key" => &mut key,
                    "user" => &mut user,
                    "password_file" => &mut password_file,
                    other => {
                        return Err(Fail::inval(format!(
                            "bad cluster string {s:?}: unknown key {other:?} (expected etcd=, name=, ca=, cert=, key=, user=, password_file=, entity=, keyring=)"
                        )));
                    }
                };
                if slot.replace(v.trim()).is_some() {
                    return Err(Fail::inval(format!(
                        "bad cluster string {s:?}: {k} given twice"
                    )));
                }
            }
            let mut at = locate::resolve(None, etcd, name)?;
            let given = |v: Option<&str>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
            at.auth = EtcdAuth {
                ca_file: given(ca),
                cert_file: given(cert),
                key_file: given(key),
                user: user.filter(|u| !u.is_empty()).map(str::to_string),
                password: None,
                password_file: given(password_file),
            }
            .or(at.auth);
            at
        }
        Some(dir) => locate::resolve(Some(Path::new(dir)), None, None)?,
    };
    at.auth
        .check()
        .map_err(|e| Fail::inval(format!("bad cluster string: {e}")))?;
    if !pontoon_cluster::is_valid_name(&at.name) {
        return Err(Fail::inval(format!(
            "cluster name {:?} must be 1-128 characters of [A-Za-z0-9._-]",
            at.name
        )));
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_comes_from_the_string() {
        let spec = "etcd=http://a:1;entity=client.x;keyring=/nonexistent/x.keyring";
        let at = resolve(Some(spec)).unwrap();
        assert_eq!(at.endpoints, ["http://a:1"]);
        let f = identity(Some(spec), &at).unwrap_err();
        assert_eq!(f.errno, libc::EACCES);
        assert!(f.msg.contains("/nonexistent/x.keyring"), "{}", f.msg);
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("k.keyring");
        let key = pontoon_cluster::auth::AuthKey::generate();
        pontoon_cluster::auth::Keyring::single(
            pontoon_cluster::auth::EntityName::parse("client.x").unwrap(),
            key.clone(),
            None,
        )
        .write(&ring)
        .unwrap();
        let spec = format!("etcd=http://a:1;entity=client.x;keyring={}", ring.display());
        let (me, entity, path) = identity(Some(&spec), &at).unwrap().unwrap();
        assert_eq!((me.entity.as_str(), me.key), ("client.x", *key.as_bytes()));
        assert_eq!((entity.to_string(), path), ("client.x".to_string(), ring));
        let twice = format!("{spec};entity=client.y");
        assert_eq!(resolve(Some(&twice)).unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn etcd_strings_parse_and_bad_ones_are_einval() {
        let at = resolve(Some("etcd=http://a:1, http://b:2;name=c1")).unwrap();
        assert_eq!(at.endpoints, ["http://a:1", "http://b:2"]);
        assert_eq!(at.name, "c1");
        assert!(at.auth.ca_file.is_none() || std::env::var_os("PONTOON_ETCD_CA_FILE").is_some());
        let at = resolve(Some(
            "etcd=https://a:1;ca=/p/ca.pem;cert=/p/c.pem;key=/p/c.key;user=osd;password_file=/p/pw",
        ))
        .unwrap();
        assert_eq!(at.auth.ca_file.as_deref(), Some(Path::new("/p/ca.pem")));
        assert_eq!(at.auth.key_file.as_deref(), Some(Path::new("/p/c.key")));
        assert_eq!(at.auth.user.as_deref(), Some("osd"));
        assert_eq!(at.auth.password_file.as_deref(), Some(Path::new("/p/pw")));
        for bad in [
            "",
            "etcd=",
            "etcd=http://a:1;name=",
            "etcd=http://a:1;nam=x",
            "etcd=http://a:1;etcd=http://b:1",
            "etcd=http://a:1;name=bad name",
            "etcd=http://a:1;junk",
            "etcd=https://a:1;ca=/ca;cert=/c.pem",
            "etcd=https://a:1;ca=/ca;user=osd;password=x",
        ] {
            assert_eq!(
                resolve(Some(bad)).unwrap_err().errno,
                libc::EINVAL,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_directory_without_cluster_toml_is_enoent() {
        let dir = tempfile::tempdir().unwrap();
        let f = resolve(dir.path().to_str()).unwrap_err();
        assert_eq!(f.errno, libc::ENOENT);
        assert!(f.msg.contains("cluster.toml"), "{}", f.msg);
        let f = resolve(Some("/nonexistent/pontoon")).unwrap_err();
        assert_eq!(f.errno, libc::ENOENT);
    }
}
