//! Fixed-newstyle negotiation: greeting, client flags, then option haggling
//! until the client picks an export (`NBD_OPT_GO` / `NBD_OPT_EXPORT_NAME`)
//! or leaves.
//!
//! State carried across options lives in [`Negotiation`]: where the
//! connection stands with TLS, who the client proved to be, whether
//! structured replies were negotiated and for which export
//! `base:allocation` was selected. Every option gets exactly one final
//! reply; anything the protocol gives no way to answer (bad magic, unknown
//! client flags, an unknown export under `NBD_OPT_EXPORT_NAME`, oversized
//! option data) ends the session with a hard disconnect.
//!
//! TLS ([`gate`]) follows the protocol's modes: with TLS off,
//! `NBD_OPT_STARTTLS` gets `NBD_REP_ERR_POLICY`; with TLS required, every
//! other option but `NBD_OPT_ABORT` gets `NBD_REP_ERR_TLS_REQD` (and
//! `NBD_OPT_EXPORT_NAME` a disconnect) until TLS is up. After the upgrade
//! the options negotiated in plain text are forgotten. Exports outside the
//! client's list ([`crate::ExportAccess`]) are answered exactly like
//! exports that do not exist.

use std::io;

use compio::BufResult;
use compio::io::AsyncWriteExt;
use compio::net::TcpStream;
use pontoon_volume::{BlockVolume, VOLUME_BLOCK, VolumeCatalog};
use tracing::{debug, info};

use crate::NbdError;
use crate::proto::{self, *};
use crate::server::ServerConfig;
use crate::tls::{Identity, TlsAcceptor, TlsReader, TlsWriter};
use pontoon_net::listener::Stop;
use pontoon_net::stream::Inbound;

/// Metadata context id of `base:allocation` (the only context we serve).
pub(crate) const BASE_ALLOCATION_ID: u32 = 1;
/// Largest option data read into memory.
const MAX_OPTION_DATA: u32 = 64 * 1024;
/// Largest option data skipped (with an error reply) rather than
/// disconnecting.
const MAX_OPTION_SKIP: u32 = 1 << 20;
/// Most options one client may send before it is considered abusive.
const MAX_OPTIONS: usize = 1024;
/// Handshake flags this server offers.
pub(crate) const HANDSHAKE_FLAGS: u16 = FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES;

/// The connection's two directions: the bare socket, or a TLS session.
pub(crate) enum Link {
    /// Plain text.
    Plain {
        /// Received bytes.
        inbound: Inbound,
        /// The socket, for replies.
        out: TcpStream,
    },
    /// After `NBD_OPT_STARTTLS`.
    Tls {
        /// Decrypted bytes.
        inbound: Inbound<TlsReader>,
        /// Encrypts and sends replies.
        out: TlsWriter,
    },
}

impl Link {
    /// True once TLS is up.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Link::Tls { .. })
    }

    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        let BufResult(res, _) = match self {
            Link::Plain { out, .. } => out.write_all(bytes).await,
            Link::Tls { out, .. } => out.write_all(bytes).await,
        };
        res
    }

    async fn read_array<const N: usize>(&mut self) -> io::Result<Option<[u8; N]>> {
        match self {
            Link::Plain { inbound, .. } => inbound.read_array().await,
            Link::Tls { inbound, .. } => inbound.read_array().await,
        }
    }

    async fn read_vec(&mut self, len: usize) -> io::Result<Vec<u8>> {
        match self {
            Link::Plain { inbound, .. } => inbound.read_vec(len).await,
            Link::Tls { inbound, .. } => inbound.read_vec(len).await,
        }
    }

    async fn discard(&mut self, len: u64) -> io::Result<()> {
        match self {
            Link::Plain { inbound, .. } => inbound.discard(len).await,
            Link::Tls { inbound, .. } => inbound.discard(len).await,
        }
    }

    /// Bytes received and not yet consumed.
    fn buffered(&self) -> usize {
        match self {
            Link::Plain { inbound, .. } => inbound.buffered(),
            Link::Tls { inbound, .. } => inbound.buffered(),
        }
    }
}

/// What negotiation ended with.
pub(crate) enum Outcome<V> {
    /// The client chose an export: enter transmission over this link.
    Transmission(Session<V>, Link),
    /// The session is over (client aborted, or the server disconnects);
    /// the reason is for logs.
    Closed(&'static str),
}

/// The export and options a client entered transmission with.
pub(crate) struct Session<V> {
    /// Export (volume) name.
    pub(crate) name: String,
    /// The opened volume.
    pub(crate) volume: V,
    /// Export size advertised (the volume size rounded down to 4 KiB).
    pub(crate) size: u64,
    /// Structured replies were negotiated.
    pub(crate) structured: bool,
    /// `base:allocation` was selected for this export.
    pub(crate) block_status: bool,
}

/// Where a connection stands with TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsState {
    /// The server has TLS off: `NBD_OPT_STARTTLS` is refused by policy.
    Unavailable,
    /// TLS is offered and not (yet) started; options are answered in
    /// plain text.
    Offered,
    /// TLS is required and not started: only `NBD_OPT_STARTTLS` and
    /// `NBD_OPT_ABORT` are served.
    Required,
    /// The session runs over TLS.
    Active,
}

/// What [`gate`] decides for one option, before it is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Handle the option.
    Handle,
    /// Acknowledge and run the TLS handshake.
    StartTls,
    /// Answer with this error reply and go on.
    Refuse(u32, &'static str),
    /// Disconnect (no reply is possible).
    Close(&'static str),
}

/// The TLS rules of the protocol for `option` in `state`.
pub(crate) fn gate(state: TlsState, option: u32) -> Gate {
    match (state, option) {
        (_, OPT_ABORT) => Gate::Handle,
        (TlsState::Unavailable, OPT_STARTTLS) => {
            Gate::Refuse(REP_ERR_POLICY, "TLS is not enabled on this server")
        }
        (TlsState::Offered | TlsState::Required, OPT_STARTTLS) => Gate::StartTls,
        (TlsState::Active, OPT_STARTTLS) => Gate::Refuse(REP_ERR_INVALID, "TLS is already active"),
        (TlsState::Required, OPT_EXPORT_NAME) => Gate::Close("NBD_OPT_EXPORT_NAME before TLS"),
        (TlsState::Required, _) => Gate::Refuse(
            REP_ERR_TLS_REQD,
            "TLS is required: send NBD_OPT_STARTTLS first",
        ),
        _ => Gate::Handle,
    }
}

/// Option-haggling state.
struct Negotiation {
    /// The client speaks fixed newstyle (informational: we answer options
    /// either way, as the protocol permits).
    fixed_newstyle: bool,
    /// The client set NBD_FLAG_C_NO_ZEROES.
    no_zeroes: bool,
    /// Where the connection stands with TLS.
    tls: TlsState,
    /// The name the client proved in the TLS handshake (`None`: plain, or
    /// TLS without a client certificate).
    identity: Option<String>,
    /// NBD_OPT_STRUCTURED_REPLY was acknowledged.
    structured: bool,
    /// Export for which the last NBD_OPT_SET_META_CONTEXT selected
    /// `base:allocation`.
    meta_export: Option<String>,
}

/// The transmission flags of an export, given the negotiation state and
/// whether the volume is read-only (a snapshot: `NBD_FLAG_READ_ONLY`, and
/// no trim or write-zeroes offered; writes are answered `EPERM`).
pub(crate) fn transmission_flags(structured: bool, read_only: bool) -> u16 {
    let mut f = TX_HAS_FLAGS | TX_SEND_FLUSH | TX_SEND_FUA | TX_CAN_MULTI_CONN;
    if read_only {
        f |= TX_READ_ONLY;
    } else {
        f |= TX_SEND_TRIM | TX_SEND_WRITE_ZEROES;
    }
    if structured {
        f |= TX_SEND_DF;
    }
    f
}

/// The initial TLS state of a connection.
fn initial_tls(config: &ServerConfig, tls: Option<&TlsAcceptor>) -> TlsState {
    match (config.tls.mode, tls) {
        (crate::TlsMode::Require, Some(_)) => TlsState::Required,
        (crate::TlsMode::On, Some(_)) => TlsState::Offered,
        _ => TlsState::Unavailable,
    }
}

/// Runs the handshake on a fresh connection (`tcp` is its socket, which
/// `link` reads and writes in plain text so far).
pub(crate) async fn negotiate<C: VolumeCatalog>(
    mut link: Link,
    tcp: TcpStream,
    catalog: &C,
    config: &ServerConfig,
    tls: Option<&TlsAcceptor>,
    stop: &Stop,
) -> Result<Outcome<C::Volume>, NbdError> {
    link.send(encode_greeting(HANDSHAKE_FLAGS).to_vec()).await?;
    let Some(read) = stop.or_stop(link.read_array::<4>()).await else {
        return Ok(Outcome::Closed("server stopping"));
    };
    let Some(raw) = read? else {
        return Ok(Outcome::Closed("client left before sending flags"));
    };
    let flags = match decode_client_flags(&raw, HANDSHAKE_FLAGS) {
        Ok(f) => f,
        Err(e) => {
            debug!("bad client flags: {e}");
            return Ok(Outcome::Closed("unknown client flags"));
        }
    };
    let mut st = Negotiation {
        fixed_newstyle: flags.fixed_newstyle,
        no_zeroes: flags.no_zeroes,
        tls: initial_tls(config, tls),
        identity: None,
        structured: false,
        meta_export: None,
    };
    if !st.fixed_newstyle {
        debug!("client did not set NBD_FLAG_C_FIXED_NEWSTYLE; answering options anyway");
    }
    for _ in 0..MAX_OPTIONS {
        let Some(read) = stop.or_stop(link.read_array::<OPTION_HEADER_LEN>()).await else {
            return Ok(Outcome::Closed("server stopping"));
        };
        let Some(raw) = read? else {
            return Ok(Outcome::Closed("client left during negotiation"));
        };
        let hdr = match OptionHeader::decode(&raw) {
            Ok(h) => h,
            Err(e) => {
                debug!("bad option header: {e}");
                return Ok(Outcome::Closed("bad option magic"));
            }
        };
        if hdr.length > MAX_OPTION_DATA {
            if hdr.option == OPT_EXPORT_NAME || hdr.length > MAX_OPTION_SKIP {
                return Ok(Outcome::Closed("option data too large"));
            }
            link.discard(u64::from(hdr.length)).await?;
            let mut reply = Vec::new();
            encode_option_reply(
                &mut reply,
                hdr.option,
                REP_ERR_TOO_BIG,
                b"option data too large",
            );
            link.send(reply).await?;
            continue;
        }
        let data = link.read_vec(hdr.length as usize).await?;
        if stop.is_set() && hdr.option != OPT_ABORT {
            let mut reply = Vec::new();
            encode_option_reply(
                &mut reply,
                hdr.option,
                REP_ERR_SHUTDOWN,
                b"server is stopping",
            );
            link.send(reply).await?;
            continue;
        }
        match gate(st.tls, hdr.option) {
            Gate::Handle => {}
            Gate::Refuse(code, why) => {
                let mut reply = Vec::new();
                encode_option_reply(&mut reply, hdr.option, code, why.as_bytes());
                link.send(reply).await?;
                continue;
            }
            Gate::Close(why) => return Ok(Outcome::Closed(why)),
            Gate::StartTls => {
                let Some(acceptor) = tls else {
                    return Ok(Outcome::Closed("TLS state without a TLS context"));
                };
                if !data.is_empty() {
                    let mut reply = Vec::new();
                    encode_option_reply(
                        &mut reply,
                        hdr.option,
                        REP_ERR_INVALID,
                        b"NBD_OPT_STARTTLS takes no data",
                    );
                    link.send(reply).await?;
                    continue;
                }
                // Bytes the client sent before our acknowledgement would be
                // read as if they came over TLS: a plain-text injection.
                if link.buffered() > 0 {
                    return Ok(Outcome::Closed("data after NBD_OPT_STARTTLS"));
                }
                let mut reply = Vec::new();
                encode_option_reply(&mut reply, hdr.option, REP_ACK, &[]);
                link.send(reply).await?;
                drop(link);
                let (reader, writer, identity) = acceptor.accept(tcp.clone()).await?;
                match &identity {
                    Identity::Psk(user) => info!(psk_user = %user, "NBD client authenticated"),
                    Identity::Certificate(cn) => info!(cn = %cn, "NBD client authenticated"),
                    Identity::Anonymous => debug!("NBD client on TLS without a certificate"),
                }
                link = Link::Tls {
                    inbound: Inbound::new(reader),
                    out: writer,
                };
                st.tls = TlsState::Active;
                st.identity = identity.name().map(str::to_string);
                // What was negotiated in plain text does not carry over.
                st.structured = false;
                st.meta_export = None;
                continue;
            }
        }
        match handle_option(&mut st, hdr.option, &data, catalog, config).await? {
            Step::Reply(bytes) => link.send(bytes).await?,
            Step::Abort(bytes) => {
                link.send(bytes).await?;
                return Ok(Outcome::Closed("client aborted"));
            }
            Step::Close(why) => return Ok(Outcome::Closed(why)),
            Step::Go(bytes, session) => {
                link.send(bytes).await?;
                return Ok(Outcome::Transmission(session, link));
            }
        }
    }
    Ok(Outcome::Closed("too many options"))
}

/// What to do after one option.
enum Step<V> {
    /// Send these option replies and continue haggling.
    Reply(Vec<u8>),
    /// Send these bytes, then close (NBD_OPT_ABORT).
    Abort(Vec<u8>),
    /// Close without a reply.
    Close(&'static str),
    /// Send these bytes, then enter transmission.
    Go(Vec<u8>, Session<V>),
}

fn reply_one<V>(option: u32, reply_type: u32, data: &[u8]) -> Step<V> {
    let mut out = Vec::new();
    encode_option_reply(&mut out, option, reply_type, data);
    Step::Reply(out)
}

/// The export a name refers to: the default export for "".
fn resolve<'a>(name: &'a str, config: &'a ServerConfig) -> Option<&'a str> {
    if name.is_empty() {
        config.default_export.as_deref()
    } else {
        Some(name)
    }
}

/// Opens an export by (resolved) name; `Err(reply)` carries the option
/// error to send.
/// An export outside the client's list gets the same answer as one that
/// does not exist.
async fn open_export<C: VolumeCatalog>(
    catalog: &C,
    config: &ServerConfig,
    identity: Option<&str>,
    name: &str,
) -> Result<(String, C::Volume), (u32, String)> {
    let Some(resolved) = resolve(name, config) else {
        return Err((REP_ERR_UNKNOWN, "no default export is configured".into()));
    };
    if !config.access.allows(identity, resolved) {
        return Err((REP_ERR_UNKNOWN, format!("no volume named '{resolved}'")));
    }
    match catalog.open(resolved).await {
        Ok(Some(v)) => Ok((resolved.to_string(), v)),
        Ok(None) => Err((REP_ERR_UNKNOWN, format!("no volume named '{resolved}'"))),
        Err(e) => Err((REP_ERR_UNKNOWN, format!("cannot open '{resolved}': {e}"))),
    }
}

/// The human-readable description of an export (NBD_REP_SERVER, NBD_INFO_DESCRIPTION).
fn description(size: u64) -> String {
    format!("Pontoon volume, {size} bytes")
}

/// The export size advertised for a volume: whole 4 KiB blocks only.
pub(crate) fn export_size<V: BlockVolume>(v: &V) -> u64 {
    v.size() / VOLUME_BLOCK * VOLUME_BLOCK
}

async fn handle_option<C: VolumeCatalog>(
    st: &mut Negotiation,
    option: u32,
    data: &[u8],
    catalog: &C,
    config: &ServerConfig,
) -> Result<Step<C::Volume>, NbdError> {
    Ok(match option {
        OPT_EXPORT_NAME => {
            let Ok(name) = proto::decode_string(data) else {
                return Ok(Step::Close("bad export name"));
            };
            match open_export(catalog, config, st.identity.as_deref(), &name).await {
                Ok((name, volume)) => {
                    let size = export_size(&volume);
                    let bytes = encode_export_name_reply(
                        size,
                        transmission_flags(st.structured, volume.read_only()),
                        st.no_zeroes,
                    );
                    let block_status = st.structured && st.meta_export.as_deref() == Some(&name);
                    Step::Go(
                        bytes,
                        Session {
                            name,
                            volume,
                            size,
                            structured: st.structured,
                            block_status,
                        },
                    )
                }
                Err((_, why)) => {
                    debug!("NBD_OPT_EXPORT_NAME: {why}");
                    Step::Close("unknown export (NBD_OPT_EXPORT_NAME)")
                }
            }
        }
        OPT_ABORT => {
            let mut out = Vec::new();
            encode_option_reply(&mut out, option, REP_ACK, &[]);
            Step::Abort(out)
        }
        OPT_LIST => {
            if !data.is_empty() {
                return Ok(reply_one(
                    option,
                    REP_ERR_INVALID,
                    b"NBD_OPT_LIST takes no data",
                ));
            }
            match catalog.list().await {
                Ok(vols) => {
                    let mut out = Vec::new();
                    let visible = vols
                        .into_iter()
                        .filter(|v| config.access.allows(st.identity.as_deref(), &v.name));
                    for v in visible {
                        let desc = description(v.size / VOLUME_BLOCK * VOLUME_BLOCK);
                        encode_option_reply(
                            &mut out,
                            option,
                            REP_SERVER,
                            &rep_server_data(truncate_utf8(&v.name, MAX_STRING_LEN), &desc),
                        );
                    }
                    encode_option_reply(&mut out, option, REP_ACK, &[]);
                    Step::Reply(out)
                }
                Err(e) => reply_one(
                    option,
                    REP_ERR_UNKNOWN,
                    format!("cannot list volumes: {e}").as_bytes(),
                ),
            }
        }
        OPT_STRUCTURED_REPLY => {
            if !data.is_empty() {
                return Ok(reply_one(
                    option,
                    REP_ERR_INVALID,
                    b"NBD_OPT_STRUCTURED_REPLY takes no data",
                ));
            }
            st.structured = true;
            reply_one(option, REP_ACK, &[])
        }
        OPT_INFO | OPT_GO => {
            let req = match InfoRequest::decode(data) {
                Ok(r) => r,
                Err(ProtoError::BadString(why)) => {
                    return Ok(reply_one(option, bad_string_reply(data), why.as_bytes()));
                }
                Err(e) => return Ok(reply_one(option, REP_ERR_INVALID, e.to_string().as_bytes())),
            };
            let (name, volume) =
                match open_export(catalog, config, st.identity.as_deref(), &req.name).await {
                    Ok(x) => x,
                    Err((code, why)) => return Ok(reply_one(option, code, why.as_bytes())),
                };
            let size = export_size(&volume);
            let mut out = Vec::new();
            encode_option_reply(
                &mut out,
                option,
                REP_INFO,
                &info_export_data(size, transmission_flags(st.structured, volume.read_only())),
            );
            // Always sent: our maximum differs from the protocol's default.
            encode_option_reply(
                &mut out,
                option,
                REP_INFO,
                &info_block_size_data(
                    config.min_block(),
                    config.preferred_block(),
                    config.max_payload,
                ),
            );
            if req.requests.contains(&INFO_NAME) {
                encode_option_reply(
                    &mut out,
                    option,
                    REP_INFO,
                    &info_string_data(INFO_NAME, &name),
                );
            }
            if req.requests.contains(&INFO_DESCRIPTION) {
                encode_option_reply(
                    &mut out,
                    option,
                    REP_INFO,
                    &info_string_data(INFO_DESCRIPTION, &description(size)),
                );
            }
            encode_option_reply(&mut out, option, REP_ACK, &[]);
            if option == OPT_INFO {
                Step::Reply(out)
            } else {
                let block_status = st.structured && st.meta_export.as_deref() == Some(&name);
                Step::Go(
                    out,
                    Session {
                        name,
                        volume,
                        size,
                        structured: st.structured,
                        block_status,
                    },
                )
            }
        }
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            let set = option == OPT_SET_META_CONTEXT;
            if set {
                // Replaced even if this request fails.
                st.meta_export = None;
                if !st.structured {
                    return Ok(reply_one(
                        option,
                        REP_ERR_INVALID,
                        b"negotiate structured replies first",
                    ));
                }
            }
            let req = match MetaContextRequest::decode(data) {
                Ok(r) => r,
                Err(e) => return Ok(reply_one(option, REP_ERR_INVALID, e.to_string().as_bytes())),
            };
            let name = match open_export(catalog, config, st.identity.as_deref(), &req.export).await
            {
                Ok((name, _)) => name,
                Err((code, why)) => return Ok(reply_one(option, code, why.as_bytes())),
            };
            let matches = |q: &str| {
                if set {
                    q == BASE_ALLOCATION
                } else {
                    q == BASE_ALLOCATION || q == "base:"
                }
            };
            let selected = if set {
                req.queries.iter().any(|q| matches(q))
            } else {
                req.queries.is_empty() || req.queries.iter().any(|q| matches(q))
            };
            let mut out = Vec::new();
            if selected {
                let id = if set { BASE_ALLOCATION_ID } else { 0 };
                encode_option_reply(
                    &mut out,
                    option,
                    REP_META_CONTEXT,
                    &meta_context_data(id, BASE_ALLOCATION),
                );
                if set {
                    st.meta_export = Some(name);
                }
            }
            encode_option_reply(&mut out, option, REP_ACK, &[]);
            Step::Reply(out)
        }
        _ => reply_one(option, REP_ERR_UNSUP, b"unsupported option"),
    })
}

/// `NBD_REP_ERR_TOO_BIG` when a string in the option is over the protocol's
/// length limit, `NBD_REP_ERR_INVALID` for other bad strings.
fn bad_string_reply(data: &[u8]) -> u32 {
    if data.len() > MAX_STRING_LEN + 6 {
        REP_ERR_TOO_BIG
    } else {
        REP_ERR_INVALID
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [u32; 9] = [
        OPT_EXPORT_NAME,
        OPT_ABORT,
        OPT_LIST,
        OPT_STARTTLS,
        OPT_INFO,
        OPT_GO,
        OPT_STRUCTURED_REPLY,
        OPT_LIST_META_CONTEXT,
        OPT_SET_META_CONTEXT,
    ];

    #[test]
    fn a_tls_required_server_answers_only_starttls_and_abort_before_tls() {
        for opt in ALL {
            let g = gate(TlsState::Required, opt);
            match opt {
                OPT_STARTTLS => assert_eq!(g, Gate::StartTls),
                OPT_ABORT => assert_eq!(g, Gate::Handle),
                // It cannot be answered with an error: disconnect.
                OPT_EXPORT_NAME => assert!(matches!(g, Gate::Close(_))),
                _ => assert!(
                    matches!(g, Gate::Refuse(REP_ERR_TLS_REQD, _)),
                    "option {opt}: {g:?}"
                ),
            }
        }
        // An unknown option too.
        assert!(matches!(
            gate(TlsState::Required, 99),
            Gate::Refuse(REP_ERR_TLS_REQD, _)
        ));
    }

    #[test]
    fn once_tls_is_up_no_option_gets_tls_reqd_and_starttls_is_invalid() {
        for opt in ALL {
            let g = gate(TlsState::Active, opt);
            if opt == OPT_STARTTLS {
                assert_eq!(g, Gate::Refuse(REP_ERR_INVALID, "TLS is already active"));
            } else {
                assert_eq!(g, Gate::Handle, "option {opt}");
            }
        }
    }

    #[test]
    fn without_tls_starttls_is_refused_by_policy_and_the_rest_is_served() {
        for opt in ALL {
            let g = gate(TlsState::Unavailable, opt);
            if opt == OPT_STARTTLS {
                assert!(matches!(g, Gate::Refuse(REP_ERR_POLICY, _)));
            } else {
                assert_eq!(g, Gate::Handle, "option {opt}");
            }
        }
    }

    #[test]
    fn when_tls_is_offered_plain_options_are_served_and_starttls_upgrades() {
        for opt in ALL {
            let g = gate(TlsState::Offered, opt);
            if opt == OPT_STARTTLS {
                assert_eq!(g, Gate::StartTls);
            } else {
                assert_eq!(g, Gate::Handle, "option {opt}");
            }
        }
    }

    #[test]
    fn the_initial_state_follows_the_mode_and_the_context() {
        let mut config = ServerConfig::default();
        assert_eq!(initial_tls(&config, None), TlsState::Unavailable);
        config.tls.mode = crate::TlsMode::Require;
        // Without a context (TLS could not be set up) nothing is offered.
        assert_eq!(initial_tls(&config, None), TlsState::Unavailable);
    }
}
