//! The etcd credentials of a local cluster (`pontoon up`), kept in
//! `DIR/etcd-pki/` (the directory 0700, every file 0600):
//!
//! - `ca.pem`: a CA made for this cluster alone (its key is not kept: the
//!   certificates below are all it ever signs, so nobody can sign more);
//! - `server.pem`, `server.key`: etcd's certificate (127.0.0.1 and
//!   localhost; server and client use, for its peer port too);
//! - `client.pem`, `client.key`: the client certificate every Pontoon
//!   process of the cluster presents. Its name (`pontoon-client`) is no
//!   etcd user, so the certificate alone grants nothing: etcd's own
//!   authentication still asks for a user and its password;
//! - `<user>.password`: a random password per etcd user: `root`, `admin`
//!   (the CLI, named in `cluster.toml`), and one per kind of daemon
//!   ([`DAEMON_USERS`]), each limited to `/pontoon/<cluster>/`.
//!
//! Passwords are random 256-bit values, so etcd's bcrypt cost adds no
//! protection to them and `pontoon up` runs etcd with the lowest
//! (`--bcrypt-cost 4`): each log-in costs etcd a millisecond instead of
//! tens.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use pontoon_cluster::etcd_auth::PrefixUser;
use pontoon_cluster::{EtcdAuth, Secret};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::cluster_args::ClusterFile;

/// The directory of the credentials, relative to the cluster directory.
pub const PKI_DIR: &str = "etcd-pki";
/// The CLI's etcd user.
pub const ADMIN_USER: &str = "admin";
/// The etcd users of the daemons, one per kind (also their role names).
pub const DAEMON_USERS: &[&str] = &["osd", "mgr", "nbd", "nvmf", "vhost"];
/// The common name of the client certificate: not an etcd user.
pub const CLIENT_CN: &str = "pontoon-client";

/// The paths of the credentials of the cluster in `dir`.
#[derive(Clone, Debug)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// The credentials of the cluster directory `cluster_dir`.
    pub fn new(cluster_dir: &Path) -> Self {
        Self {
            dir: cluster_dir.join(PKI_DIR),
        }
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// etcd's certificate.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// etcd's key.
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client certificate.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// The client key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// The password file of etcd user `user`.
    pub fn password_file(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.password"))
    }

    fn all_users() -> impl Iterator<Item = &'static str> {
        ["root", ADMIN_USER]
            .into_iter()
            .chain(DAEMON_USERS.iter().copied())
    }

    /// Whether every file exists.
    pub fn complete(&self) -> bool {
        [
            self.ca(),
            self.server_cert(),
            self.server_key(),
            self.client_cert(),
            self.client_key(),
        ]
        .into_iter()
        .chain(Self::all_users().map(|u| self.password_file(u)))
        .all(|p| p.is_file())
    }

    /// Makes the CA, the certificates and the passwords, unless they all
    /// exist already (then they are kept: etcd's users have them). Returns
    /// whether it made new ones.
    pub fn ensure(&self) -> Result<bool> {
        if self.complete() {
            return Ok(false);
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot restrict {}", self.dir.display()))?;
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "pontoon etcd CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        set_validity(&mut ca);
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |cn: &str, sans: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>| {
            let key = KeyPair::generate()?;
            let mut p = CertificateParams::new(sans)?;
            p.distinguished_name.push(DnType::CommonName, cn);
            p.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            p.extended_key_usages = usages;
            set_validity(&mut p);
            let cert = p.signed_by(&key, &issuer)?;
            Ok::<_, rcgen::Error>((cert.pem(), key.serialize_pem()))
        };
        use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        let server = leaf(
            "pontoon-etcd",
            vec!["127.0.0.1".into(), "localhost".into()],
            vec![ServerAuth, ClientAuth],
        )?;
        let client = leaf(CLIENT_CN, Vec::new(), vec![ClientAuth])?;
        write_private(&self.ca(), ca_cert.pem().as_bytes())?;
        write_private(&self.server_cert(), server.0.as_bytes())?;
        write_private(&self.server_key(), server.1.as_bytes())?;
        write_private(&self.client_cert(), client.0.as_bytes())?;
        write_private(&self.client_key(), client.1.as_bytes())?;
        for user in Self::all_users() {
            let mut pw = random_hex()?;
            pw.push('\n');
            write_private(&self.password_file(user), pw.as_bytes())?;
        }
        Ok(true)
    }

    /// How `user` reaches etcd: TLS with the client certificate, and its
    /// password file (absolute paths).
    pub fn auth(&self, user: &str) -> EtcdAuth {
        EtcdAuth {
            ca_file: Some(self.ca()),
            cert_file: Some(self.client_cert()),
            key_file: Some(self.client_key()),
            user: Some(user.to_string()),
            password: None,
            password_file: Some(self.password_file(user)),
        }
    }

    /// What `cluster.toml` records: the admin's credentials, relative to
    /// the cluster directory.
    pub fn admin_auth_relative() -> EtcdAuth {
        let rel = |f: &str| Some(PathBuf::from(PKI_DIR).join(f));
        EtcdAuth {
            ca_file: rel("ca.pem"),
            cert_file: rel("client.pem"),
            key_file: rel("client.key"),
            user: Some(ADMIN_USER.to_string()),
            password: None,
            password_file: rel(&format!("{ADMIN_USER}.password")),
        }
    }

    /// The root password.
    pub fn root_password(&self) -> Result<Secret> {
        Ok(pontoon_cluster::etcd_auth::read_password(
            &self.password_file("root"),
        )?)
    }

    /// The users [`pontoon_cluster::etcd_auth::enable_auth`] creates: the
    /// admin and the daemons, with their passwords.
    pub fn prefix_users(&self) -> Result<Vec<PrefixUser>> {
        std::iter::once(ADMIN_USER)
            .chain(DAEMON_USERS.iter().copied())
            .map(|u| {
                Ok(PrefixUser {
                    name: u.to_string(),
                    password: pontoon_cluster::etcd_auth::read_password(&self.password_file(u))?,
                })
            })
            .collect()
    }

    /// etcd's TLS arguments: clients and peers must present a certificate
    /// of this CA.
    pub fn etcd_args(&self) -> Vec<String> {
        let (ca, cert, key) = (self.ca(), self.server_cert(), self.server_key());
        let (ca, cert, key) = (ca.display(), cert.display(), key.display());
        vec![
            "--client-cert-auth".into(),
            format!("--trusted-ca-file={ca}"),
            format!("--cert-file={cert}"),
            format!("--key-file={key}"),
            "--peer-client-cert-auth".into(),
            format!("--peer-trusted-ca-file={ca}"),
            format!("--peer-cert-file={cert}"),
            format!("--peer-key-file={key}"),
            "--bcrypt-cost=4".into(),
        ]
    }
}

/// The credentials a daemon of kind `user` (one of [`DAEMON_USERS`]) of
/// the local cluster in `dir` uses: none if the cluster's etcd asks for
/// none (`pontoon up --etcd-insecure`), else its own user.
pub fn daemon_auth(dir: &Path, file: &ClusterFile, user: &str) -> EtcdAuth {
    debug_assert!(DAEMON_USERS.contains(&user), "{user}");
    if file.etcd_auth.is_empty() {
        return EtcdAuth::none();
    }
    Pki::new(dir).auth(user)
}

/// The `--etcd-*` flags that give a child process `auth` (never a
/// password itself: only its file).
pub fn auth_flags(auth: &EtcdAuth) -> Vec<String> {
    let mut out = Vec::new();
    let mut path = |flag: &str, p: &Option<PathBuf>| {
        if let Some(p) = p {
            out.push(flag.to_string());
            out.push(p.display().to_string());
        }
    };
    path("--etcd-ca-file", &auth.ca_file);
    path("--etcd-cert-file", &auth.cert_file);
    path("--etcd-key-file", &auth.key_file);
    path("--etcd-password-file", &auth.password_file);
    if let Some(u) = &auth.user {
        out.push("--etcd-user".into());
        out.push(u.clone());
    }
    out
}

/// Valid from a year ago to ten years on (whole years: no date crate
/// needed).
fn set_validity(p: &mut CertificateParams) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let year = 1970 + i32::try_from(secs / 31_556_952).unwrap_or(0);
    p.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    p.not_after = rcgen::date_time_ymd(year + 10, 1, 1);
}

/// 32 random bytes from the kernel, as hex.
fn random_hex() -> Result<String> {
    use std::io::Read as _;
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| anyhow!("cannot read /dev/urandom: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes `path` readable and writable by its owner only, from its
/// creation on.
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(data).and_then(|()| f.sync_all()))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_pki_is_private_and_kept_on_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path());
        assert!(pki.ensure().unwrap(), "made");
        assert!(pki.complete());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join(PKI_DIR)), 0o700);
        for e in std::fs::read_dir(dir.path().join(PKI_DIR)).unwrap() {
            let p = e.unwrap().path();
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
        let admin = std::fs::read_to_string(pki.password_file(ADMIN_USER)).unwrap();
        let osd = std::fs::read_to_string(pki.password_file("osd")).unwrap();
        assert_eq!(admin.trim().len(), 64);
        assert_ne!(admin, osd);
        let ca = std::fs::read(pki.ca()).unwrap();
        assert!(!pki.ensure().unwrap(), "kept");
        assert_eq!(std::fs::read(pki.ca()).unwrap(), ca, "kept");
        // The flags of a daemon name files, never a password.
        let flags = auth_flags(&pki.auth("osd"));
        assert!(flags.contains(&"--etcd-user".to_string()), "{flags:?}");
        assert!(!flags.iter().any(|f| f.contains(osd.trim())), "{flags:?}");
    }
}
