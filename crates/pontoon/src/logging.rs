//! The log subscriber: lines on stderr (the journal under systemd), as
//! text or, with `log_format = "json"` / `--log-format json` /
//! `$PONTOON_LOG_FORMAT`, one JSON object a line. `$PONTOON_LOG` is the
//! filter (e.g. `debug`, `pontoon_osd=debug`).

/// Installs the subscriber. `default_filter` applies when `$PONTOON_LOG`
/// is unset or invalid; `json` picks JSON lines.
pub fn init(default_filter: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PONTOON_LOG")
        .unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        // One object per line: timestamp, level, target and the event's
        // fields (message included) at the top level.
        builder.json().flatten_event(true).init();
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}
