//! The `cluster` argument of `pontoon_connect`: a cluster directory, an
//! `etcd=URL[,URL...][;name=NAME]` string, or nothing (the environment),
//! resolved with the client library's [`locate`] rules, as the `pontoon`
//! command resolves `--cluster` / `--etcd`.

use std::path::Path;

use pontoon_client::locate::{self, Location};

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
            for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, v) = part.split_once('=').ok_or_else(|| {
                    Fail::inval(format!(
                        "bad cluster string {s:?}: {part:?} is not key=value"
                    ))
                })?;
                let slot = match k.trim() {
                    "etcd" => &mut etcd,
                    "name" => &mut name,
                    other => {
                        return Err(Fail::inval(format!(
                            "bad cluster string {s:?}: unknown key {other:?} (expected etcd= and name=)"
                        )));
                    }
                };
                if slot.replace(v.trim()).is_some() {
                    return Err(Fail::inval(format!(
                        "bad cluster string {s:?}: {k} given twice"
                    )));
                }
            }
            locate::resolve(None, etcd, name)?
        }
        Some(dir) => locate::resolve(Some(Path::new(dir)), None, None)?,
    };
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
        for bad in [
            "",
            "etcd=",
            "etcd=http://a:1;name=",
            "etcd=http://a:1;nam=x",
            "etcd=http://a:1;etcd=http://b:1",
            "etcd=http://a:1;name=bad name",
            "etcd=http://a:1;junk",
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
