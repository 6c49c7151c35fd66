//! Tells systemd (a `Type=notify` unit) when a daemon serves, through
//! `$NOTIFY_SOCKET` (the `sd-notify` crate). Without that variable (not
//! under systemd, or another unit type) nothing is sent.

use sd_notify::NotifyState;

/// `READY=1` with a status line: the daemon serves.
pub fn ready(status: &str) {
    if let Err(e) = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)]) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}
