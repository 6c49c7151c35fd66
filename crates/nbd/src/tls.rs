//! TLS for `NBD_OPT_STARTTLS`: the server's credentials (an x509
//! certificate, a CA that client certificates must chain to, pre-shared
//! keys as qemu's and libnbd's `keys.psk`), and the session over a compio
//! socket.
//!
//! TLS runs in OpenSSL (Debian's libssl, through the `openssl` crate)
//! because the clients that matter here (qemu and libnbd, both GnuTLS)
//! authenticate PSK users with TLS 1.3 external pre-shared keys, which
//! rustls does not implement (see `docs/security.md`, "NBD: TLS").
//!
//! The session is driven over memory buffers: OpenSSL never touches the
//! socket. The connection's reader ([`TlsReader`]) receives ciphertext
//! with io_uring, feeds it to the session and hands out plaintext; its
//! writer ([`TlsWriter`]) encrypts replies and sends the records. Both
//! share one session (one thread, never borrowed across an `.await`);
//! ciphertext is sent only under the write lock, in the order the session
//! produced it, so records never interleave.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use compio::BufResult;
use compio::buf::{IntoInner, IoBuf, IoBufMut, IoVectoredBuf};
use compio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use compio::net::TcpStream;
use futures::lock::Mutex;
use openssl::ex_data::Index;
use openssl::nid::Nid;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslOptions,
    SslSessionCacheMode, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509Name;

use crate::NbdError;

/// Whether the server offers or insists on TLS (the NBD protocol's NOTLS,
/// SELECTIVETLS with every export available both ways, and FORCEDTLS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// No TLS: `NBD_OPT_STARTTLS` is refused with `NBD_REP_ERR_POLICY`.
    #[default]
    Off,
    /// TLS at the client's choice; plain clients are served too.
    On,
    /// TLS before anything: every option but `NBD_OPT_STARTTLS` and
    /// `NBD_OPT_ABORT` gets `NBD_REP_ERR_TLS_REQD` until TLS is up.
    Require,
}

impl FromStr for TlsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "require" => Ok(Self::Require),
            _ => Err(format!("TLS mode {s:?}: expected off, on or require")),
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Require => "require",
        })
    }
}

/// The server's TLS settings. Paths only: key material is read from the
/// files at start and never logged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// Off, on or require.
    pub mode: TlsMode,
    /// Serve plain NBD on an address that is not loopback (refused
    /// otherwise).
    pub insecure: bool,
    /// The server's certificate chain (PEM), for x509 clients.
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    pub key: Option<PathBuf>,
    /// CA certificates (PEM): when set, x509 clients must present a
    /// certificate signed by one of them, and its subject CN is the
    /// client's identity.
    pub ca: Option<PathBuf>,
    /// Pre-shared keys, `username:hexkey` a line (`psktool`'s format, as
    /// qemu's `tls-creds-psk` and libnbd's `tls-psk-file` read it); the
    /// username is the client's identity.
    pub psk_file: Option<PathBuf>,
}

impl TlsConfig {
    /// True if some credentials are configured.
    pub fn has_credentials(&self) -> bool {
        self.cert.is_some() || self.psk_file.is_some()
    }

    /// Checks the mode against the credentials and the listen address.
    pub fn validate(&self, listen: SocketAddr) -> Result<(), NbdError> {
        let bad = |m: String| Err(NbdError::Config(m));
        if self.cert.is_some() != self.key.is_some() {
            return bad("a TLS certificate needs its key, and a key its certificate".into());
        }
        if self.ca.is_some() && self.cert.is_none() {
            return bad("a CA for client certificates needs a server certificate".into());
        }
        match self.mode {
            TlsMode::Off if !listen.ip().is_loopback() && !self.insecure => bad(format!(
                "refusing plain NBD on {listen}, which is not a loopback address: \
                 configure TLS credentials, or pass --insecure to serve without TLS"
            )),
            TlsMode::On | TlsMode::Require if !self.has_credentials() => bad(format!(
                "TLS mode {} needs credentials: a certificate and key, or a PSK file",
                self.mode
            )),
            _ => Ok(()),
        }
    }
}

/// The mode when none is given: `require` with credentials, `off` on a
/// loopback address without them; an address that is not loopback and
/// has no credentials gets `require` too, which [`TlsConfig::validate`]
/// then refuses with the reason.
pub fn default_mode(listen: SocketAddr, has_credentials: bool) -> TlsMode {
    if has_credentials || !listen.ip().is_loopback() {
        TlsMode::Require
    } else {
        TlsMode::Off
    }
}

/// Longest PSK username (GnuTLS and OpenSSL cap identities at 128 bytes).
pub const MAX_PSK_USERNAME: usize = 128;
/// Shortest accepted key, in bytes (`psktool` makes 32).
pub const MIN_PSK_BYTES: usize = 16;
/// Longest accepted key, in bytes.
pub const MAX_PSK_BYTES: usize = 64;
/// Most lines a PSK file may have.
const MAX_PSK_ENTRIES: usize = 10_000;
/// Largest PSK or PEM file read.
const MAX_CREDENTIAL_FILE: u64 = 4 << 20;

/// A pre-shared key: never printed, wiped when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct PskKey(Vec<u8>);

impl PskKey {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for PskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PskKey(<{} bytes, redacted>)", self.0.len())
    }
}

impl Drop for PskKey {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// Parses a PSK file: `username:hexkey` a line; blank lines and lines
/// starting with `#` are skipped. Errors name the line, never the key.
pub fn parse_psk_file(text: &str) -> Result<BTreeMap<String, PskKey>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if out.len() >= MAX_PSK_ENTRIES {
            return Err(format!("more than {MAX_PSK_ENTRIES} keys"));
        }
        let Some((user, hex)) = line.split_once(':') else {
            return Err(format!("line {n}: expected username:hexkey"));
        };
        if user.is_empty() || user.len() > MAX_PSK_USERNAME || !is_identity(user) {
            return Err(format!(
                "line {n}: the username must be 1-{MAX_PSK_USERNAME} characters of [A-Za-z0-9._@-]"
            ));
        }
        let key = decode_hex(hex).ok_or_else(|| format!("line {n}: the key is not hex"))?;
        if !(MIN_PSK_BYTES..=MAX_PSK_BYTES).contains(&key.len()) {
            return Err(format!(
                "line {n}: the key of {user} is {} bytes; keys must be {MIN_PSK_BYTES}-{MAX_PSK_BYTES} bytes",
                key.len()
            ));
        }
        if out.insert(user.to_string(), PskKey(key)).is_some() {
            return Err(format!("line {n}: {user} has a second key"));
        }
    }
    Ok(out)
}

/// What an identity (a PSK username, a certificate's CN, a key of the
/// export lists) may be made of.
pub fn is_identity(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_PSK_USERNAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8))
        .collect()
}

fn read_small(path: &Path, what: &str) -> Result<String, NbdError> {
    let bad = |e: String| NbdError::Config(format!("{what} {}: {e}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if meta.len() > MAX_CREDENTIAL_FILE {
        return Err(bad(format!("larger than {MAX_CREDENTIAL_FILE} bytes")));
    }
    std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))
}

/// Who the client proved to be during the TLS handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A PSK username.
    Psk(String),
    /// The subject CN of a verified client certificate.
    Certificate(String),
    /// TLS without a client certificate (no CA configured).
    Anonymous,
}

impl Identity {
    /// The name export lists are keyed by, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Psk(n) | Self::Certificate(n) => Some(n),
            Self::Anonymous => None,
        }
    }
}

/// The ex-data slot where the PSK callback records the username it served.
fn psk_user_index() -> Result<Index<Ssl, String>, NbdError> {
    static INDEX: OnceLock<Result<Index<Ssl, String>, String>> = OnceLock::new();
    INDEX
        .get_or_init(|| Ssl::new_ex_index().map_err(|e| e.to_string()))
        .clone()
        .map_err(NbdError::Tls)
}

/// The server's TLS context, built once from [`TlsConfig`] and shared by
/// every worker.
#[derive(Clone)]
pub(crate) struct TlsAcceptor {
    ctx: SslContext,
    psk_user: Index<Ssl, String>,
}

impl TlsAcceptor {
    /// Reads the credentials and builds the context; `None` when TLS is off.
    pub(crate) fn new(config: &TlsConfig) -> Result<Option<Self>, NbdError> {
        if config.mode == TlsMode::Off {
            return Ok(None);
        }
        let ssl_err =
            |what: &str, e: openssl::error::ErrorStack| NbdError::Config(format!("{what}: {e}"));
        let mut b = SslContextBuilder::new(SslMethod::tls_server())
            .map_err(|e| ssl_err("TLS context", e))?;
        b.set_min_proto_version(Some(SslVersion::TLS1_2))
            .map_err(|e| ssl_err("TLS versions", e))?;
        b.set_options(
            SslOptions::NO_RENEGOTIATION
                | SslOptions::CIPHER_SERVER_PREFERENCE
                | SslOptions::NO_TICKET
                | SslOptions::IGNORE_UNEXPECTED_EOF,
        );
        // SHA-256 suites first, chosen by the server: GnuTLS (qemu,
        // libnbd) binds external PSKs to SHA-256, and OpenSSL falls back to
        // certificates when it picks a SHA-384 suite first.
        b.set_ciphersuites(
            "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384",
        )
        .map_err(|e| ssl_err("TLS 1.3 cipher suites", e))?;
        // No resumption: every connection proves its identity afresh, so
        // a revoked key or certificate stops working at once.
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
        b.set_num_tickets(0)
            .map_err(|e| ssl_err("TLS tickets", e))?;
        b.set_session_id_context(b"pontoon-nbd")
            .map_err(|e| ssl_err("TLS session context", e))?;
        if let (Some(cert), Some(key)) = (&config.cert, &config.key) {
            b.set_certificate_chain_file(cert)
                .map_err(|e| ssl_err(&format!("TLS certificate {}", cert.display()), e))?;
            b.set_private_key_file(key, SslFiletype::PEM)
                .map_err(|e| ssl_err(&format!("TLS key {}", key.display()), e))?;
            b.check_private_key()
                .map_err(|e| ssl_err("the TLS key does not match the certificate", e))?;
        }
        if let Some(ca) = &config.ca {
            b.set_ca_file(ca)
                .map_err(|e| ssl_err(&format!("TLS CA {}", ca.display()), e))?;
            let names = X509Name::load_client_ca_file(ca)
                .map_err(|e| ssl_err(&format!("TLS CA {}", ca.display()), e))?;
            b.set_client_ca_list(names);
            b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
        }
        let psk_user = psk_user_index()?;
        if let Some(path) = &config.psk_file {
            let keys = parse_psk_file(&read_small(path, "PSK file")?)
                .map_err(|e| NbdError::Config(format!("PSK file {}: {e}", path.display())))?;
            if keys.is_empty() {
                return Err(NbdError::Config(format!(
                    "PSK file {} has no keys",
                    path.display()
                )));
            }
            let keys = Arc::new(keys);
            b.set_psk_server_callback(move |ssl, identity, out| {
                let Some(user) = identity.and_then(|i| std::str::from_utf8(i).ok()) else {
                    return Ok(0);
                };
                let Some(key) = keys.get(user) else {
                    return Ok(0);
                };
                if key.bytes().len() > out.len() {
                    return Ok(0);
                }
                out[..key.bytes().len()].copy_from_slice(key.bytes());
                ssl.set_ex_data(psk_user, user.to_string());
                Ok(key.bytes().len())
            });
        }
        Ok(Some(Self {
            ctx: b.build(),
            psk_user,
        }))
    }

    /// Runs the TLS handshake on `tcp` (whose NBD bytes so far were all
    /// consumed) and returns the two halves of the session and the
    /// client's identity.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
    ) -> Result<(TlsReader, TlsWriter, Identity), NbdError> {
        let ssl = Ssl::new(&self.ctx).map_err(|e| NbdError::Tls(e.to_string()))?;
        let stream =
            SslStream::new(ssl, MemIo::default()).map_err(|e| NbdError::Tls(e.to_string()))?;
        let shared = Rc::new(Shared {
            ssl: std::cell::RefCell::new(stream),
            write_lock: Mutex::new(()),
        });
        let mut reader = TlsReader {
            shared: shared.clone(),
            tcp: tcp.clone(),
        };
        let mut writer = TlsWriter { shared, tcp };
        loop {
            let step = reader.shared.ssl.borrow_mut().accept();
            match step {
                Ok(()) => break,
                Err(e) if e.code() == ErrorCode::WANT_READ => {
                    writer.flush_ciphertext().await?;
                    if !reader.receive().await? {
                        return Err(NbdError::Tls("client left during the TLS handshake".into()));
                    }
                }
                Err(e) => {
                    // Send the alert, if any, so the client learns why.
                    let _ = writer.flush_ciphertext().await;
                    return Err(NbdError::Tls(format!("handshake: {e}")));
                }
            }
        }
        writer.flush_ciphertext().await?;
        let identity = {
            let ssl = reader.shared.ssl.borrow();
            let ssl = ssl.ssl();
            if let Some(user) = ssl.ex_data(self.psk_user) {
                Identity::Psk(user.clone())
            } else if let Some(cert) = ssl.peer_certificate() {
                let cn = cert
                    .subject_name()
                    .entries_by_nid(Nid::COMMONNAME)
                    .next()
                    .and_then(|e| e.data().to_string().ok());
                // A CN that could not key an export list (or would garble
                // a log line) names nobody.
                match cn {
                    Some(cn) if is_identity(&cn) => Identity::Certificate(cn),
                    _ => Identity::Anonymous,
                }
            } else {
                Identity::Anonymous
            }
        };
        Ok((reader, writer, identity))
    }
}

/// Ciphertext received before the session has consumed it: at most one
/// socket read beyond what the session holds.
const RECEIVE_CHUNK: usize = 64 * 1024;
/// Plaintext gathered into one record when replies come in small pieces.
const RECORD_PLAINTEXT: usize = 16 * 1024;
/// Ciphertext accumulated before it is sent.
const SEND_AT: usize = 256 * 1024;

/// The session's side of the socket: ciphertext in, ciphertext out.
#[derive(Default)]
struct MemIo {
    input: Vec<u8>,
    pos: usize,
    eof: bool,
    output: Vec<u8>,
}

impl Read for MemIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = &self.input[self.pos..];
        if avail.is_empty() {
            return if self.eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.pos += n;
        Ok(n)
    }
}

impl Write for MemIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One TLS session, shared by a connection's reader and writer.
struct Shared {
    ssl: std::cell::RefCell<SslStream<MemIo>>,
    /// Held while ciphertext is taken from the session and sent.
    write_lock: Mutex<()>,
}

fn tls_io_error(e: openssl::ssl::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

/// The receiving half: plaintext out of the session.
pub(crate) struct TlsReader {
    shared: Rc<Shared>,
    tcp: TcpStream,
}

impl TlsReader {
    /// Reads more ciphertext from the socket; false at end of stream.
    async fn receive(&mut self) -> io::Result<bool> {
        let mut buf = {
            let mut ssl = self.shared.ssl.borrow_mut();
            let io = ssl.get_mut();
            if io.eof {
                return Ok(false);
            }
            io.input.drain(..io.pos);
            io.pos = 0;
            std::mem::take(&mut io.input)
        };
        buf.reserve(RECEIVE_CHUNK);
        let len = buf.len();
        let BufResult(res, slice) = self.tcp.read(buf.slice(len..len + RECEIVE_CHUNK)).await;
        let buf = slice.into_inner();
        let mut ssl = self.shared.ssl.borrow_mut();
        let io = ssl.get_mut();
        debug_assert!(io.input.is_empty());
        io.input = buf;
        match res {
            Ok(0) => {
                io.eof = true;
                Ok(false)
            }
            Ok(_) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Sends what reading made the session write (a KeyUpdate answer, an
    /// alert), unless the writer holds the lock: it sends it then.
    async fn send_pending(&self) -> io::Result<()> {
        let pending = !self.shared.ssl.borrow_mut().get_mut().output.is_empty();
        if !pending {
            return Ok(());
        }
        let Some(_guard) = self.shared.write_lock.try_lock() else {
            return Ok(());
        };
        send_output(&self.shared, &mut self.tcp.clone()).await
    }
}

impl AsyncRead for TlsReader {
    async fn read<B: IoBufMut>(&mut self, mut buf: B) -> BufResult<usize, B> {
        let mut ended = false;
        loop {
            let res = {
                let dst: &mut [MaybeUninit<u8>] = buf.as_uninit();
                if dst.is_empty() {
                    return BufResult(Ok(0), buf);
                }
                self.shared.ssl.borrow_mut().ssl_read_uninit(dst)
            };
            match res {
                Ok(n) => {
                    // SAFETY: `ssl_read_uninit` initialised the first `n`
                    // bytes of the buffer's spare room.
                    unsafe { buf.set_len(n) };
                    if let Err(e) = self.send_pending().await {
                        return BufResult(Err(e), buf);
                    }
                    return BufResult(Ok(n), buf);
                }
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => return BufResult(Ok(0), buf),
                Err(e) if e.code() == ErrorCode::WANT_READ => {
                    if let Err(e) = self.send_pending().await {
                        return BufResult(Err(e), buf);
                    }
                    match self.receive().await {
                        Ok(true) => {}
                        // End of stream: the session reports it on the
                        // next read (once; a second time is the end).
                        Ok(false) if !ended => ended = true,
                        Ok(false) => return BufResult(Ok(0), buf),
                        Err(e) => return BufResult(Err(e), buf),
                    }
                }
                Err(e) => {
                    let eof = self.shared.ssl.borrow_mut().get_mut().eof;
                    if eof && e.code() == ErrorCode::SYSCALL {
                        return BufResult(Ok(0), buf);
                    }
                    return BufResult(Err(tls_io_error(e)), buf);
                }
            }
        }
    }
}

/// Sends the session's pending ciphertext; the caller holds the write lock.
async fn send_output(shared: &Shared, tcp: &mut TcpStream) -> io::Result<()> {
    loop {
        let out = std::mem::take(&mut shared.ssl.borrow_mut().get_mut().output);
        if out.is_empty() {
            return Ok(());
        }
        let BufResult(res, mut out) = tcp.write_all(out).await;
        res?;
        // Keep the allocation for the next records.
        out.clear();
        let mut ssl = shared.ssl.borrow_mut();
        let io = ssl.get_mut();
        if io.output.is_empty() {
            io.output = out;
        }
    }
}

/// The sending half: plaintext into the session, records onto the socket.
#[derive(Clone)]
pub(crate) struct TlsWriter {
    shared: Rc<Shared>,
    tcp: TcpStream,
}

impl TlsWriter {
    async fn flush_ciphertext(&mut self) -> io::Result<()> {
        let _guard = self.shared.write_lock.lock().await;
        send_output(&self.shared, &mut self.tcp).await
    }

    fn encrypt(&self, mut bytes: &[u8]) -> io::Result<()> {
        let mut ssl = self.shared.ssl.borrow_mut();
        while !bytes.is_empty() {
            let n = ssl.ssl_write(bytes).map_err(tls_io_error)?;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    fn pending(&self) -> usize {
        self.shared.ssl.borrow_mut().get_mut().output.len()
    }

    /// Encrypts `parts` (small ones gathered into full records) and sends
    /// the records.
    async fn send_parts<'a>(&mut self, parts: impl Iterator<Item = &'a [u8]>) -> io::Result<usize> {
        let _guard = self.shared.write_lock.lock().await;
        let mut staged: Vec<u8> = Vec::new();
        let mut total = 0usize;
        for part in parts {
            total += part.len();
            if staged.len() + part.len() <= RECORD_PLAINTEXT {
                staged.extend_from_slice(part);
                continue;
            }
            if !staged.is_empty() {
                self.encrypt(&staged)?;
                staged.clear();
            }
            if part.len() >= RECORD_PLAINTEXT {
                // Large data in slices, each sent before the next is
                // encrypted: ciphertext held stays near SEND_AT.
                for slice in part.chunks(SEND_AT) {
                    self.encrypt(slice)?;
                    if self.pending() >= SEND_AT {
                        send_output(&self.shared, &mut self.tcp).await?;
                    }
                }
            } else {
                staged.extend_from_slice(part);
            }
            if self.pending() >= SEND_AT {
                send_output(&self.shared, &mut self.tcp).await?;
            }
        }
        if !staged.is_empty() {
            self.encrypt(&staged)?;
        }
        send_output(&self.shared, &mut self.tcp).await?;
        Ok(total)
    }
}

impl AsyncWrite for TlsWriter {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let res = self.send_parts(std::iter::once(buf.as_init())).await;
        BufResult(res, buf)
    }

    async fn write_vectored<T: IoVectoredBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let res = self.send_parts(buf.iter_slice()).await;
        BufResult(res, buf)
    }

    async fn flush(&mut self) -> io::Result<()> {
        self.flush_ciphertext().await
    }

    /// Sends close_notify, then shuts the socket down.
    async fn shutdown(&mut self) -> io::Result<()> {
        {
            let _guard = self.shared.write_lock.lock().await;
            let _ = self.shared.ssl.borrow_mut().shutdown();
            send_output(&self.shared, &mut self.tcp).await?;
        }
        self.tcp.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_files_in_psktool_format_parse_and_keys_never_print() {
        let keys = parse_psk_file(
            "# made by psktool\nalice:000102030405060708090a0b0c0d0e0f\n\nbob.b@x:FFEEDDCCBBAA99887766554433221100aabbccdd\n",
        )
        .unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys["alice"].bytes()[15], 0x0f);
        assert_eq!(keys["bob.b@x"].bytes().len(), 20);
        let shown = format!("{:?}", keys);
        assert!(!shown.contains("0f") && !shown.contains("0e0f"), "{shown}");
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn bad_psk_lines_are_refused_without_echoing_the_key() {
        for (text, what) in [
            ("alice", "username:hexkey"),
            (":00112233445566778899aabbccddeeff", "username"),
            ("al ice:00112233445566778899aabbccddeeff", "username"),
            ("alice:0011zz", "not hex"),
            ("alice:001", "not hex"),
            ("alice:0011223344556677", "8 bytes"),
            (
                "alice:00112233445566778899aabbccddeeff\nalice:00112233445566778899aabbccddeeff",
                "second key",
            ),
        ] {
            let e = parse_psk_file(text).unwrap_err();
            assert!(e.contains(what), "{text:?}: {e}");
            assert!(!e.contains("0011"), "the error shows the key: {e}");
        }
    }

    #[test]
    fn plain_nbd_off_loopback_needs_insecure_and_tls_needs_credentials() {
        let lo: SocketAddr = "127.0.0.1:10809".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:10809".parse().unwrap();
        let off = TlsConfig::default();
        assert!(off.validate(lo).is_ok());
        assert!(off.validate(any).is_err());
        let insecure = TlsConfig {
            insecure: true,
            ..Default::default()
        };
        assert!(insecure.validate(any).is_ok());
        let naked = TlsConfig {
            mode: TlsMode::Require,
            ..Default::default()
        };
        assert!(naked.validate(lo).is_err());
        let psk = TlsConfig {
            mode: TlsMode::Require,
            psk_file: Some("/k.psk".into()),
            ..Default::default()
        };
        assert!(psk.validate(any).is_ok());
        let half = TlsConfig {
            mode: TlsMode::Require,
            cert: Some("/c.pem".into()),
            ..Default::default()
        };
        assert!(half.validate(lo).is_err());
        assert_eq!(default_mode(lo, false), TlsMode::Off);
        assert_eq!(default_mode(lo, true), TlsMode::Require);
        assert_eq!(default_mode(any, false), TlsMode::Require);
        assert_eq!("require".parse::<TlsMode>(), Ok(TlsMode::Require));
        assert!("yes".parse::<TlsMode>().is_err());
    }
}
