//! How a process proves itself to etcd and checks that it talks to the
//! right etcd: TLS with a client certificate (etcd's
//! `--client-cert-auth`), and etcd's own authentication (a user and its
//! password, for which etcd hands out a token).
//!
//! [`EtcdAuth`] is what the configuration gives (file paths, a user, a
//! password or a file holding it); every connection to etcd takes one
//! ([`crate::MapStore::connect_with`]), and [`EtcdAuth::none`] is plain
//! HTTP without credentials, for an etcd that asks for none. The files are
//! read once per [`crate::MapStore`], when it connects.
//!
//! The second half sets etcd up the way `pontoon up` runs it
//! ([`enable_auth`]): a role per kind of daemon that may read and write the
//! cluster's prefix `/pontoon/<cluster>/` and nothing else, a user per
//! role, a root user, and authentication switched on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, Permission, TlsOptions};
use tokio::time::timeout;

use crate::ClusterError;

/// Longest password or certificate file read (they are small; a larger
/// one is a mistake, such as a device path).
const MAX_FILE: u64 = 1 << 20;

/// A password, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The value itself: only for handing it to etcd.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

/// The etcd credentials and trust of one process, as configured (`etcd.*`
/// keys of the configuration file, the `--etcd-*` flags, `PONTOON_ETCD_*`
/// variables, or a local cluster's `cluster.toml`). Every field is
/// optional: the default is plain HTTP without credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdAuth {
    /// PEM CA certificate(s) that etcd's server certificate must chain to.
    /// Set: the connection uses TLS (endpoints `https://` or without scheme).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate presented to etcd (`--client-cert-auth`).
    pub cert_file: Option<PathBuf>,
    /// Its PEM private key.
    pub key_file: Option<PathBuf>,
    /// etcd user name (etcd's authentication).
    pub user: Option<String>,
    /// The user's password, given directly (environment, C connect
    /// string); wins over `password_file`.
    pub password: Option<Secret>,
    /// A file whose first line is the user's password.
    pub password_file: Option<PathBuf>,
}

/// [`EtcdAuth`] with its files read: what a connection is made with.
#[derive(Clone, Default)]
pub struct Credentials {
    tls: Option<TlsOptions>,
    user: Option<(String, Secret)>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("tls", &self.tls.is_some())
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl EtcdAuth {
    /// Plain HTTP, no credentials.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether the connection uses TLS.
    pub fn tls(&self) -> bool {
        self.ca_file.is_some()
    }

    /// Whether anything is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `self`, each field that is unset taken from `weaker`.
    pub fn or(self, weaker: EtcdAuth) -> EtcdAuth {
        EtcdAuth {
            ca_file: self.ca_file.or(weaker.ca_file),
            cert_file: self.cert_file.or(weaker.cert_file),
            key_file: self.key_file.or(weaker.key_file),
            user: self.user.or(weaker.user),
            password: self.password.or(weaker.password),
            password_file: self.password_file.or(weaker.password_file),
        }
    }

    /// Relative paths made relative to `dir` (a cluster directory).
    pub fn relative_to(mut self, dir: &Path) -> Self {
        for p in [
            &mut self.ca_file,
            &mut self.cert_file,
            &mut self.key_file,
            &mut self.password_file,
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
        self
    }

    /// Checks that the settings go together: a certificate with its key
    /// and a CA, a user with a password.
    pub fn check(&self) -> Result<(), ClusterError> {
        let bad = |m: &str| Err(ClusterError::InvalidArgument(m.to_string()));
        if self.cert_file.is_some() != self.key_file.is_some() {
            return bad(
                "etcd: a client certificate (etcd.cert_file) needs its key (etcd.key_file), and a key its certificate",
            );
        }
        if self.cert_file.is_some() && self.ca_file.is_none() {
            return bad(
                "etcd: a client certificate needs etcd.ca_file, the CA of etcd's server certificate (TLS)",
            );
        }
        let has_password = self.password.is_some() || self.password_file.is_some();
        if self.user.is_some() && !has_password {
            return bad("etcd: etcd.user needs a password (etcd.password_file)");
        }
        if self.user.is_none() && has_password {
            return bad("etcd: a password was given without etcd.user");
        }
        if let Some(u) = &self.user
            && (u.is_empty() || u.contains(char::is_whitespace))
        {
            return bad("etcd: etcd.user must be a name without spaces");
        }
        Ok(())
    }

    /// Checks the settings and reads the files.
    pub fn load(&self) -> Result<Credentials, ClusterError> {
        self.check()?;
        let tls = match &self.ca_file {
            None => None,
            Some(ca) => {
                let mut tls =
                    TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca, "CA")?));
                if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
                    tls = tls.identity(Identity::from_pem(
                        read(cert, "client certificate")?,
                        read(key, "client key")?,
                    ));
                }
                Some(tls)
            }
        };
        let password = match (&self.password, &self.password_file) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(f)) => Some(read_password(f)?),
            (None, None) => None,
        };
        Ok(Credentials {
            tls,
            user: self.user.clone().zip(password),
        })
    }

    /// `endpoint` as a connection with these settings must use it: refuses
    /// `http://` with TLS and `https://` without a CA.
    pub fn check_endpoint(&self, endpoint: &str) -> Result<(), ClusterError> {
        let bad = |m: String| Err(ClusterError::InvalidArgument(m));
        if self.tls() && endpoint.starts_with("http://") {
            return bad(format!(
                "etcd endpoint {endpoint} is plain HTTP but etcd.ca_file is set: use https://"
            ));
        }
        if !self.tls() && endpoint.starts_with("https://") {
            return bad(format!(
                "etcd endpoint {endpoint} is HTTPS: set etcd.ca_file (the CA of etcd's certificate)"
            ));
        }
        Ok(())
    }
}

impl Credentials {
    /// `opts` with these credentials: TLS (if any) and the user (if any),
    /// whose token is renewed when etcd says it expired.
    pub fn apply(&self, mut opts: ConnectOptions) -> ConnectOptions {
        if let Some(tls) = &self.tls {
            opts = opts.with_tls(tls.clone());
        }
        if let Some((user, password)) = &self.user {
            opts = opts
                .with_user(user.clone(), password.expose().to_string())
                .with_auto_token_refresh(true);
        }
        opts
    }

    /// The user, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_ref().map(|(u, _)| u.as_str())
    }
}

/// Reads a small file, with an error naming what it is.
fn read(path: &Path, what: &str) -> Result<Vec<u8>, ClusterError> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut buf))
        .map_err(|e| {
            ClusterError::InvalidArgument(format!(
                "etcd {what} file {}: cannot read it: {e}",
                path.display()
            ))
        })?;
    if buf.len() as u64 > MAX_FILE {
        return Err(ClusterError::InvalidArgument(format!(
            "etcd {what} file {} is larger than {MAX_FILE} bytes",
            path.display()
        )));
    }
    Ok(buf)
}

/// A password file's first line (without its line end).
pub fn read_password(path: &Path) -> Result<Secret, ClusterError> {
    let raw = read(path, "password")?;
    let text = String::from_utf8(raw).map_err(|_| {
        ClusterError::InvalidArgument(format!(
            "etcd password file {} is not UTF-8",
            path.display()
        ))
    })?;
    let line = text.lines().next().unwrap_or("").to_string();
    if line.is_empty() {
        return Err(ClusterError::InvalidArgument(format!(
            "etcd password file {} is empty",
            path.display()
        )));
    }
    Ok(Secret(line))
}

/// Whether etcd at `endpoint` serves, reached with `tls`'s TLS settings
/// (its user ignored), within `within`: a read answered, or refused for
/// want of a user (authentication is on) — either way etcd is up and
/// talks TLS with this CA and certificate.
pub async fn serves(endpoint: &str, tls: &EtcdAuth, within: Duration) -> Result<(), String> {
    let plain = EtcdAuth {
        user: None,
        password: None,
        password_file: None,
        ..tls.clone()
    };
    let creds = plain.load().map_err(|e| e.to_string())?;
    let attempt = async {
        let opts = creds.apply(ConnectOptions::new().with_connect_timeout(within));
        let client = Client::connect([endpoint], Some(opts))
            .await
            .map_err(|e| e.to_string())?;
        match client
            .kv_client()
            .get(
                "/pontoon/",
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if needs_auth(&e) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    };
    match timeout(within, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// One etcd user that [`enable_auth`] creates, with a role of its own
/// (named like the user) that may read and write the cluster's prefix.
#[derive(Clone, Debug)]
pub struct PrefixUser {
    /// User and role name.
    pub name: String,
    /// Its password.
    pub password: Secret,
}

/// How long one step of [`enable_auth`] may take.
const SETUP_STEP: Duration = Duration::from_secs(10);

fn setup_err(op: &'static str) -> impl Fn(etcd_client::Error) -> ClusterError {
    move |source| ClusterError::Etcd { op, source }
}

/// Whether etcd refused for want of authentication (auth is enabled).
fn needs_auth(e: &etcd_client::Error) -> bool {
    let m = e.to_string();
    m.contains("user name is empty")
        || m.contains("permission denied")
        || m.contains("invalid auth token")
        || m.contains("user name not found")
}

/// Sets up etcd's authentication at `endpoint` (reached with `tls`, whose
/// user fields are ignored) for cluster `cluster`: for each of `users` a
/// role of the same name with read-write permission on
/// `/pontoon/<cluster>/` (that prefix only) and a user holding it, with
/// the given password (reset to it if the user exists); a `root` user with
/// `root_password`; then authentication on. An etcd with authentication on
/// already is left as it is, unless `again` (its passwords changed, say):
/// then it is logged into as root and brought to the same state.
pub async fn enable_auth(
    endpoint: &str,
    tls: &EtcdAuth,
    cluster: &str,
    root_password: &Secret,
    users: &[PrefixUser],
    again: bool,
) -> Result<(), ClusterError> {
    let plain = EtcdAuth {
        user: None,
        password: None,
        password_file: None,
        ..tls.clone()
    };
    let connect = |auth: EtcdAuth| async move {
        let creds = auth.load()?;
        let opts = creds.apply(ConnectOptions::new().with_connect_timeout(SETUP_STEP));
        timeout(SETUP_STEP, Client::connect([endpoint], Some(opts)))
            .await
            .map_err(|_| ClusterError::Unavailable(format!("etcd at {endpoint}: no answer")))?
            .map_err(setup_err("connect to set up authentication"))
    };
    let mut client = connect(plain.clone()).await?;
    let enabled = match client.user_list().await {
        Ok(_) => false,
        Err(e) if needs_auth(&e) => true,
        Err(e) => return Err(setup_err("list etcd users")(e)),
    };
    if enabled && !again {
        return Ok(());
    }
    if enabled {
        client = connect(EtcdAuth {
            user: Some("root".into()),
            password: Some(root_password.clone()),
            ..plain
        })
        .await?;
    }
    let existing: Vec<String> = client
        .user_list()
        .await
        .map_err(setup_err("list etcd users"))?
        .users()
        .to_vec();
    let roles: Vec<String> = client
        .role_list()
        .await
        .map_err(setup_err("list etcd roles"))?
        .roles()
        .to_vec();
    let prefix = format!("/pontoon/{cluster}/");
    for u in users {
        if !roles.contains(&u.name) {
            client
                .role_add(u.name.clone())
                .await
                .map_err(setup_err("add an etcd role"))?;
        }
        client
            .role_grant_permission(
                u.name.clone(),
                Permission::read_write(prefix.clone()).with_prefix(),
            )
            .await
            .map_err(setup_err("grant an etcd role its prefix"))?;
        if existing.contains(&u.name) {
            client
                .user_change_password(u.name.clone(), u.password.expose())
                .await
                .map_err(setup_err("set an etcd user's password"))?;
        } else {
            client
                .user_add(u.name.clone(), u.password.expose(), None)
                .await
                .map_err(setup_err("add an etcd user"))?;
        }
        client
            .user_grant_role(u.name.clone(), u.name.clone())
            .await
            .map_err(setup_err("grant an etcd user its role"))?;
    }
    if !enabled {
        if !existing.iter().any(|u| u == "root") {
            client
                .user_add("root", root_password.expose(), None)
                .await
                .map_err(setup_err("add the etcd root user"))?;
        } else {
            client
                .user_change_password("root", root_password.expose())
                .await
                .map_err(setup_err("set the etcd root password"))?;
        }
        client
            .user_grant_role("root", "root")
            .await
            .map_err(setup_err("grant root the root role"))?;
        client
            .auth_enable()
            .await
            .map_err(setup_err("enable etcd authentication"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_settings_are_refused_with_what_is_missing() {
        let cert_only = EtcdAuth {
            ca_file: Some("/ca".into()),
            cert_file: Some("/c".into()),
            ..EtcdAuth::none()
        };
        let e = cert_only.check().unwrap_err().to_string();
        assert!(e.contains("key"), "{e}");
        let no_ca = EtcdAuth {
            cert_file: Some("/c".into()),
            key_file: Some("/k".into()),
            ..EtcdAuth::none()
        };
        assert!(no_ca.check().unwrap_err().to_string().contains("ca_file"));
        let user_only = EtcdAuth {
            user: Some("osd".into()),
            ..EtcdAuth::none()
        };
        assert!(
            user_only
                .check()
                .unwrap_err()
                .to_string()
                .contains("password")
        );
        let password_only = EtcdAuth {
            password: Some(Secret::new("x")),
            ..EtcdAuth::none()
        };
        assert!(password_only.check().is_err());
        assert!(EtcdAuth::none().check().is_ok());
    }

    #[test]
    fn passwords_never_show_in_debug_output() {
        let a = EtcdAuth {
            user: Some("osd".into()),
            password: Some(Secret::new("hunter2-very-secret")),
            ..EtcdAuth::none()
        };
        let d = format!("{a:?} {:?}", a.load().unwrap());
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("osd"), "{d}");
    }

    #[test]
    fn password_files_give_their_first_line_and_empty_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\nignored\n").unwrap();
        assert_eq!(read_password(&f).unwrap().expose(), "s3cret");
        std::fs::write(&f, "\n").unwrap();
        assert!(read_password(&f).is_err());
        let e = read_password(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
    }

    #[test]
    fn endpoints_must_match_the_tls_setting() {
        let tls = EtcdAuth {
            ca_file: Some("/ca".into()),
            ..EtcdAuth::none()
        };
        assert!(tls.check_endpoint("http://127.0.0.1:2379").is_err());
        assert!(tls.check_endpoint("https://127.0.0.1:2379").is_ok());
        assert!(tls.check_endpoint("127.0.0.1:2379").is_ok());
        assert!(EtcdAuth::none().check_endpoint("https://a:1").is_err());
        assert!(EtcdAuth::none().check_endpoint("http://a:1").is_ok());
    }

    #[test]
    fn relative_paths_follow_the_cluster_directory_and_fields_merge() {
        let a = EtcdAuth {
            ca_file: Some("pki/ca.pem".into()),
            key_file: Some("/abs/k".into()),
            ..EtcdAuth::none()
        }
        .relative_to(Path::new("/c"));
        assert_eq!(a.ca_file.as_deref(), Some(Path::new("/c/pki/ca.pem")));
        assert_eq!(a.key_file.as_deref(), Some(Path::new("/abs/k")));
        let merged = EtcdAuth {
            user: Some("a".into()),
            ..EtcdAuth::none()
        }
        .or(EtcdAuth {
            user: Some("b".into()),
            ca_file: Some("/x".into()),
            ..EtcdAuth::none()
        });
        assert_eq!(merged.user.as_deref(), Some("a"));
        assert_eq!(merged.ca_file.as_deref(), Some(Path::new("/x")));
    }
}
