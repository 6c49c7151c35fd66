//! How the binary protocol's frames travel after the handshake: one
//! setting per cluster (the map's `ms_mode`), as Ceph's msgr2 has them.
//! The protocol itself is in `pontoon_net::auth`.

use std::fmt;
use std::str::FromStr;

/// How frames travel after the handshake. One setting per cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WireMode {
    /// No authentication, no protection.
    #[default]
    None,
    /// Mutual authentication; every frame integrity-protected, in the clear.
    Authenticated,
    /// Mutual authentication; every frame encrypted and integrity-protected.
    Secure,
}

/// Every mode, in the order of their codes.
pub const WIRE_MODES: [WireMode; 3] = [WireMode::None, WireMode::Authenticated, WireMode::Secure];

impl WireMode {
    /// The number the handshake carries.
    pub fn code(self) -> u8 {
        match self {
            WireMode::None => 0,
            WireMode::Authenticated => 1,
            WireMode::Secure => 2,
        }
    }

    /// The mode of a handshake number.
    pub fn from_code(code: u8) -> Option<Self> {
        WIRE_MODES.get(usize::from(code)).copied()
    }

    /// The name operators use: `none`, `authenticated`, `secure`.
    pub fn as_str(self) -> &'static str {
        match self {
            WireMode::None => "none",
            WireMode::Authenticated => "authenticated",
            WireMode::Secure => "secure",
        }
    }

    /// Whether connections authenticate (any mode but none).
    pub fn is_protected(self) -> bool {
        self != WireMode::None
    }
}

impl fmt::Display for WireMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is not `none`, `authenticated` or `secure`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownWireMode(pub String);

impl fmt::Display for UnknownWireMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown wire mode {:?}: expected none, authenticated or secure",
            self.0
        )
    }
}

impl std::error::Error for UnknownWireMode {}

impl FromStr for WireMode {
    type Err = UnknownWireMode;
    fn from_str(s: &str) -> Result<Self, UnknownWireMode> {
        WIRE_MODES
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownWireMode(s.chars().take(32).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for m in WIRE_MODES {
            assert_eq!(WireMode::from_code(m.code()), Some(m));
            assert_eq!(m.as_str().parse::<WireMode>(), Ok(m));
        }
        assert_eq!(WireMode::from_code(3), None);
        assert!("crc".parse::<WireMode>().is_err());
    }
}
