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

use std::path::{Path, PathBuf};

use pontoon_client::locate::{self, Location};
use pontoon_cluster::EtcdAuth;

use crate::error::Fail;

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
                            "bad cluster string {s:?}: unknown key {other:?} (expected etcd=, name=, ca=, cert=, key=, user=, password_file=)"
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
