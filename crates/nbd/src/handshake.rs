//! Fixed-newstyle negotiation: greeting, client flags, then option haggling
//! until the client picks an export (`NBD_OPT_GO` / `NBD_OPT_EXPORT_NAME`)
//! or leaves.
//!
//! State carried across options lives in [`Negotiation`]: whether structured
//! replies were negotiated and for which export `base:allocation` was
//! selected. Every option gets exactly one final reply; anything the
//! protocol gives no way to answer (bad magic, unknown client flags, an
//! unknown export under `NBD_OPT_EXPORT_NAME`, oversized option data) ends
//! the session with a hard disconnect.

use std::io;

use compio::BufResult;
use compio::io::AsyncWriteExt;
use compio::net::TcpStream;
use pontoon_volume::{BlockVolume, VOLUME_BLOCK, VolumeCatalog};
use tracing::debug;

use crate::NbdError;
use crate::proto::{self, *};
use crate::server::ServerConfig;
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

/// What negotiation ended with.
pub(crate) enum Outcome<V> {
    /// The client chose an export: enter transmission.
    Transmission(Session<V>),
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

/// Option-haggling state.
#[derive(Default)]
struct Negotiation {
    /// The client speaks fixed newstyle (informational: we answer options
    /// either way, as the protocol permits).
    fixed_newstyle: bool,
    /// The client set NBD_FLAG_C_NO_ZEROES.
    no_zeroes: bool,
    /// NBD_OPT_STRUCTURED_REPLY was acknowledged.
    structured: bool,
    /// Export for which the last NBD_OPT_SET_META_CONTEXT selected
    /// `base:allocation`.
    meta_export: Option<String>,
}

/// The transmission flags of every export, given the negotiation state.
pub(crate) fn transmission_flags(structured: bool) -> u16 {
    let mut f = TX_HAS_FLAGS
        | TX_SEND_FLUSH
        | TX_SEND_FUA
        | TX_SEND_TRIM
        | TX_SEND_WRITE_ZEROES
        | TX_CAN_MULTI_CONN;
    if structured {
        f |= TX_SEND_DF;
    }
    f
}

async fn send(out: &mut TcpStream, bytes: Vec<u8>) -> io::Result<()> {
    let BufResult(res, _) = out.write_all(bytes).await;
    res
}

/// Runs the handshake on a fresh connection.
pub(crate) async fn negotiate<C: VolumeCatalog>(
    inbound: &mut Inbound,
    out: &mut TcpStream,
    catalog: &C,
    config: &ServerConfig,
    stop: &Stop,
) -> Result<Outcome<C::Volume>, NbdError> {
    send(out, encode_greeting(HANDSHAKE_FLAGS).to_vec()).await?;
    let Some(read) = stop.or_stop(inbound.read_array::<4>()).await else {
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
        ..Default::default()
    };
    if !st.fixed_newstyle {
        debug!("client did not set NBD_FLAG_C_FIXED_NEWSTYLE; answering options anyway");
    }
    for _ in 0..MAX_OPTIONS {
        let Some(read) = stop
            .or_stop(inbound.read_array::<OPTION_HEADER_LEN>())
            .await
        else {
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
            inbound.discard(u64::from(hdr.length)).await?;
            let mut reply = Vec::new();
            encode_option_reply(
                &mut reply,
                hdr.option,
                REP_ERR_TOO_BIG,
                b"option data too large",
            );
            send(out, reply).await?;
            continue;
        }
        let data = inbound.read_vec(hdr.length as usize).await?;
        if stop.is_set() && hdr.option != OPT_ABORT {
            let mut reply = Vec::new();
            encode_option_reply(
                &mut reply,
                hdr.option,
                REP_ERR_SHUTDOWN,
                b"server is stopping",
            );
            send(out, reply).await?;
            continue;
        }
        match handle_option(&mut st, hdr.option, &data, catalog, config).await? {
            Step::Reply(bytes) => send(out, bytes).await?,
            Step::Abort(bytes) => {
                send(out, bytes).await?;
                return Ok(Outcome::Closed("client aborted"));
            }
            Step::Close(why) => return Ok(Outcome::Closed(why)),
            Step::Go(bytes, session) => {
                send(out, bytes).await?;
                return Ok(Outcome::Transmission(session));
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
async fn open_export<C: VolumeCatalog>(
    catalog: &C,
    config: &ServerConfig,
    name: &str,
) -> Result<(String, C::Volume), (u32, String)> {
    let Some(resolved) = resolve(name, config) else {
        return Err((REP_ERR_UNKNOWN, "no default export is configured".into()));
    };
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
            match open_export(catalog, config, &name).await {
                Ok((name, volume)) => {
                    let size = export_size(&volume);
                    let bytes = encode_export_name_reply(
                        size,
                        transmission_flags(st.structured),
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
                    for v in vols {
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
            let (name, volume) = match open_export(catalog, config, &req.name).await {
                Ok(x) => x,
                Err((code, why)) => return Ok(reply_one(option, code, why.as_bytes())),
            };
            let size = export_size(&volume);
            let mut out = Vec::new();
            encode_option_reply(
                &mut out,
                option,
                REP_INFO,
                &info_export_data(size, transmission_flags(st.structured)),
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
            let name = match open_export(catalog, config, &req.export).await {
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
        OPT_STARTTLS => reply_one(option, REP_ERR_UNSUP, b"TLS is not supported"),
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
