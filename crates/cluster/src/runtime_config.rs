//! The runtime settings the whole cluster shares, by name, as `pontoon
//! config set|get|ls` shows and changes them: each [`ConfigKey`] names
//! one value of the map's [`ClusterSettings`], parses and checks what an
//! operator types, and prints it back the same way. Pure; the CLI applies
//! a change inside [`MapStore::update`](crate::MapStore::update), so it
//! bumps the epoch and every daemon sees it at its next map.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::osd_admin::{
    DEFAULT_OUT_AFTER_SECS, MAX_OUT_AFTER_SECS, MAX_RECOVERY_MAX_ACTIVE, MAX_RECOVERY_SLEEP_MS,
};
use crate::{ClusterMap, ClusterSettings};

/// Longest deep-scrub interval that may be set (a year).
pub const MAX_DEEP_SCRUB_INTERVAL_SECS: u64 = 365 * 86_400;

/// One runtime setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigKey {
    /// How long an OSD may be down before the manager marks it out.
    OutAfter,
    /// The fraction of OSDs the manager keeps in.
    MinInRatio,
    /// Objects each OSD shard recovers at once.
    RecoveryMaxActive,
    /// Pause after each object recovered.
    RecoverySleep,
    /// Fill ratio of a health warning.
    NearfullRatio,
    /// Fill ratio above which recovery does not write to an OSD.
    BackfillfullRatio,
    /// Fill ratio at which writes needing space are refused.
    FullRatio,
    /// How often every PG is deep-scrubbed.
    DeepScrubInterval,
    /// How the binary protocol authenticates and protects its frames.
    MsMode,
}

/// Why a setting could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No setting has that name.
    #[error("unknown setting {0:?} (known: {known})", known = known_keys())]
    UnknownKey(String),
    /// The value does not parse or is out of range.
    #[error("{key}: {reason}")]
    BadValue {
        /// The setting.
        key: ConfigKey,
        /// What is wrong, with what is accepted.
        reason: String,
    },
    /// Reading or writing the map failed.
    #[error(transparent)]
    Cluster(#[from] crate::ClusterError),
}

fn known_keys() -> String {
    ConfigKey::ALL.map(ConfigKey::name).join(", ")
}

impl ConfigKey {
    /// Every setting, in the order `config ls` lists them.
    pub const ALL: [ConfigKey; 9] = [
        ConfigKey::OutAfter,
        ConfigKey::MinInRatio,
        ConfigKey::RecoveryMaxActive,
        ConfigKey::RecoverySleep,
        ConfigKey::NearfullRatio,
        ConfigKey::BackfillfullRatio,
        ConfigKey::FullRatio,
        ConfigKey::DeepScrubInterval,
        ConfigKey::MsMode,
    ];

    /// The setting's name, e.g. `out_after`.
    pub fn name(self) -> &'static str {
        match self {
            ConfigKey::OutAfter => "out_after",
            ConfigKey::MinInRatio => "min_in_ratio",
            ConfigKey::RecoveryMaxActive => "recovery_max_active",
            ConfigKey::RecoverySleep => "recovery_sleep",
            ConfigKey::NearfullRatio => "nearfull_ratio",
            ConfigKey::BackfillfullRatio => "backfillfull_ratio",
            ConfigKey::FullRatio => "full_ratio",
            ConfigKey::DeepScrubInterval => "deep_scrub_interval",
            ConfigKey::MsMode => "ms_mode",
        }
    }

    /// Ceph's name for the same setting.
    pub fn ceph_name(self) -> &'static str {
        match self {
            ConfigKey::OutAfter => "mon_osd_down_out_interval",
            ConfigKey::MinInRatio => "mon_osd_min_in_ratio",
            ConfigKey::RecoveryMaxActive => "osd_recovery_max_active",
            ConfigKey::RecoverySleep => "osd_recovery_sleep",
            ConfigKey::NearfullRatio => "mon_osd_nearfull_ratio",
            ConfigKey::BackfillfullRatio => "mon_osd_backfillfull_ratio",
            ConfigKey::FullRatio => "mon_osd_full_ratio",
            ConfigKey::DeepScrubInterval => "osd_deep_scrub_interval",
            ConfigKey::MsMode => "ms_cluster_mode",
        }
    }

    /// What it does, in one line.
    pub fn description(self) -> &'static str {
        match self {
            ConfigKey::OutAfter => "how long an OSD may be down before it is marked out",
            ConfigKey::MinInRatio => "down OSDs are marked out only while this fraction is in",
            ConfigKey::RecoveryMaxActive => "objects each OSD shard recovers or backfills at once",
            ConfigKey::RecoverySleep => "pause after each object a PG's recovery copies",
            ConfigKey::NearfullRatio => "fill at which an OSD is reported nearfull",
            ConfigKey::BackfillfullRatio => "fill above which recovery does not write to an OSD",
            ConfigKey::FullRatio => "fill at which writes needing new space are refused",
            ConfigKey::DeepScrubInterval => "deep-scrub every PG this often (0: on request only)",
            ConfigKey::MsMode => {
                "OSD connections: none, authenticated (keys, signed frames) or secure (encrypted)"
            }
        }
    }

    /// The value in `s`, as `config get` prints it (and `config set` reads it).
    pub fn value(self, s: &ClusterSettings) -> String {
        let o = &s.osd;
        match self {
            ConfigKey::OutAfter => secs_text(o.out_after_secs.unwrap_or(DEFAULT_OUT_AFTER_SECS)),
            ConfigKey::MinInRatio => o.min_in_ratio.to_string(),
            ConfigKey::RecoveryMaxActive => o.recovery_max_active.to_string(),
            ConfigKey::RecoverySleep => duration_text(o.recovery_sleep()),
            ConfigKey::NearfullRatio => s.full_ratios.nearfull.to_string(),
            ConfigKey::BackfillfullRatio => s.full_ratios.backfillfull.to_string(),
            ConfigKey::FullRatio => s.full_ratios.full.to_string(),
            ConfigKey::DeepScrubInterval => secs_text(s.deep_scrub_interval_secs),
            ConfigKey::MsMode => s.ms_mode.to_string(),
        }
    }

    /// The default value, printed the same way.
    pub fn default_value(self) -> String {
        self.value(&ClusterSettings::default())
    }

    /// Whether `s` holds the default (for out-after: whether it is unset,
    /// so that each manager's `--out-after` applies).
    pub fn is_default(self, s: &ClusterSettings) -> bool {
        match self {
            ConfigKey::OutAfter => s.osd.out_after_secs.is_none(),
            _ => self.value(s) == self.default_value(),
        }
    }

    /// Returns the setting to its default (out-after: unset, so that each
    /// manager's `--out-after` applies again), checked like [`Self::set`].
    pub fn reset(self, s: &mut ClusterSettings) -> Result<(), ConfigError> {
        match self {
            ConfigKey::OutAfter => {
                s.osd.out_after_secs = None;
                Ok(())
            }
            _ => self.set(s, &self.default_value()),
        }
    }

    /// Sets the value in `s` from its text, checking it alone and against
    /// the others (the full ratios must stay in order).
    pub fn set(self, s: &mut ClusterSettings, text: &str) -> Result<(), ConfigError> {
        let bad = |reason: String| ConfigError::BadValue { key: self, reason };
        let text = text.trim();
        let mut next = s.clone();
        match self {
            ConfigKey::OutAfter => {
                next.osd.out_after_secs = Some(whole_secs(text, MAX_OUT_AFTER_SECS).map_err(bad)?);
            }
            ConfigKey::MinInRatio => {
                next.osd.min_in_ratio = ratio(text, true).map_err(bad)?;
            }
            ConfigKey::RecoveryMaxActive => {
                next.osd.recovery_max_active = text
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_RECOVERY_MAX_ACTIVE).contains(n))
                    .ok_or_else(|| {
                        bad(format!(
                            "{text:?} is not a whole number from 1 to {MAX_RECOVERY_MAX_ACTIVE}"
                        ))
                    })?;
            }
            ConfigKey::RecoverySleep => {
                let d = parse_duration(text).map_err(bad)?;
                if d > Duration::from_millis(MAX_RECOVERY_SLEEP_MS) {
                    return Err(bad(format!(
                        "{text:?} is more than {}",
                        duration_text(Duration::from_millis(MAX_RECOVERY_SLEEP_MS))
                    )));
                }
                next.osd.recovery_sleep_ms = d.as_millis() as u64;
            }
            ConfigKey::NearfullRatio => {
                next.full_ratios.nearfull = ratio(text, false).map_err(bad)?;
            }
            ConfigKey::BackfillfullRatio => {
                next.full_ratios.backfillfull = ratio(text, false).map_err(bad)?;
            }
            ConfigKey::FullRatio => {
                next.full_ratios.full = ratio(text, false).map_err(bad)?;
            }
            ConfigKey::DeepScrubInterval => {
                next.deep_scrub_interval_secs =
                    whole_secs(text, MAX_DEEP_SCRUB_INTERVAL_SECS).map_err(bad)?;
            }
            ConfigKey::MsMode => {
                next.ms_mode = text.parse().map_err(|e| bad(format!("{e}")))?;
            }
        }
        next.full_ratios.validate().map_err(bad)?;
        next.osd.validate().map_err(bad)?;
        *s = next;
        Ok(())
    }
}

impl ConfigKey {
    /// Sets (`Some`) or resets (`None`) the setting in `map`, checked
    /// against the rest of the map too: a protected `ms_mode` needs a key
    /// for every OSD and an admin, or the cluster could not talk to itself
    /// nor be managed. What `config set|rm` and the REST API call.
    pub fn apply(self, map: &mut ClusterMap, text: Option<&str>) -> Result<(), ConfigError> {
        let mut next = map.settings.clone();
        match text {
            Some(t) => self.set(&mut next, t)?,
            None => self.reset(&mut next)?,
        }
        if self == ConfigKey::MsMode && next.ms_mode.is_protected() {
            crate::auth::check_protected_mode(map)
                .map_err(|reason| ConfigError::BadValue { key: self, reason })?;
        }
        map.settings = next;
        Ok(())
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ConfigKey {
    type Err = ConfigError;

    /// Reads a setting's name; Ceph's name for it and dashes for
    /// underscores are accepted too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().replace('-', "_");
        ConfigKey::ALL
            .into_iter()
            .find(|k| k.name() == norm || k.ceph_name() == norm)
            .ok_or_else(|| ConfigError::UnknownKey(s.to_string()))
    }
}

/// A ratio between 0 and 1 (`zero_ok`: 0 included, else excluded).
fn ratio(text: &str, zero_ok: bool) -> Result<f64, String> {
    let r: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    let low_ok = if zero_ok { r >= 0.0 } else { r > 0.0 };
    if !(r.is_finite() && low_ok && r <= 1.0) {
        return Err(format!(
            "{text} is not in {}0, 1]",
            if zero_ok { "[" } else { "(" }
        ));
    }
    Ok(r)
}

/// A duration in whole seconds, at most `max`.
fn whole_secs(text: &str, max: u64) -> Result<u64, String> {
    let d = parse_duration(text)?;
    if d.subsec_nanos() != 0 {
        return Err(format!("{text:?} is not a whole number of seconds"));
    }
    if d.as_secs() > max {
        return Err(format!("{text:?} is more than {}", secs_text(max)));
    }
    Ok(d.as_secs())
}

/// Parses `500ms`, `30s`, `10m`, `2h`, `7d` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    duration_value(text)
        .ok_or_else(|| format!("{text:?} is not a duration (e.g. 500ms, 30s, 10m, 2h, 7d)"))
}

/// The duration `text` names: a number (fractions allowed) with a unit
/// `ms`, `s`, `m`/`min`, `h` or `d`, or a bare number of seconds, at most
/// 1e9 s; `None` for anything else. The one rule every duration argument
/// and setting is read by (callers word their own errors).
pub fn duration_value(text: &str) -> Option<Duration> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => return None,
    };
    (secs.is_finite() && (0.0..=1e9).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

/// Seconds as the largest unit that divides them: `600s` is `10m`.
fn secs_text(secs: u64) -> String {
    match secs {
        0 => "0s".into(),
        s if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        s if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        s if s.is_multiple_of(60) => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A duration in whole seconds when it is one, else in milliseconds.
fn duration_text(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        secs_text(d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::osd_admin::{DEFAULT_MIN_IN_RATIO, DEFAULT_RECOVERY_MAX_ACTIVE};

    fn get(s: &ClusterSettings, k: &str) -> String {
        k.parse::<ConfigKey>().unwrap().value(s)
    }

    fn set(s: &mut ClusterSettings, k: &str, v: &str) -> Result<(), String> {
        k.parse::<ConfigKey>()
            .map_err(|e| e.to_string())?
            .set(s, v)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_read_as_ceph_operators_expect() {
        let s = ClusterSettings::default();
        assert_eq!(get(&s, "out_after"), "10m");
        assert_eq!(get(&s, "min_in_ratio"), "0.75");
        assert_eq!(get(&s, "recovery_max_active"), "2");
        assert_eq!(get(&s, "recovery_sleep"), "0s");
        assert_eq!(get(&s, "full_ratio"), "0.95");
        assert_eq!(get(&s, "deep_scrub_interval"), "7d");
        assert!(ConfigKey::ALL.iter().all(|k| k.is_default(&s)));
        // Ceph's names and dashes are read too.
        assert_eq!(
            "mon_osd_down_out_interval".parse::<ConfigKey>().unwrap(),
            ConfigKey::OutAfter
        );
        assert_eq!(
            "recovery-max-active".parse::<ConfigKey>().unwrap(),
            ConfigKey::RecoveryMaxActive
        );
        for k in ConfigKey::ALL {
            assert_eq!(k.name().parse::<ConfigKey>().unwrap(), k);
        }
        assert_eq!(s.osd.min_in_ratio, DEFAULT_MIN_IN_RATIO);
        assert_eq!(s.osd.recovery_max_active, DEFAULT_RECOVERY_MAX_ACTIVE);
    }

    #[test]
    fn values_are_set_and_printed_back_the_same_way() {
        let mut s = ClusterSettings::default();
        set(&mut s, "out_after", "90").unwrap();
        assert_eq!(s.osd.out_after_secs, Some(90));
        assert_eq!(get(&s, "out_after"), "90s");
        assert!(!ConfigKey::OutAfter.is_default(&s));
        set(&mut s, "out_after", "600s").unwrap();
        assert!(
            !ConfigKey::OutAfter.is_default(&s),
            "set, even to the default"
        );
        set(&mut s, "recovery_sleep", "250ms").unwrap();
        assert_eq!(s.osd.recovery_sleep_ms, 250);
        assert_eq!(get(&s, "recovery_sleep"), "250ms");
        set(&mut s, "recovery_max_active", "8").unwrap();
        set(&mut s, "min_in_ratio", "0").unwrap();
        set(&mut s, "nearfull_ratio", "0.8").unwrap();
        set(&mut s, "deep_scrub_interval", "1d").unwrap();
        assert_eq!(s.deep_scrub_interval_secs, 86_400);
        for k in ConfigKey::ALL {
            let text = k.value(&s);
            let mut again = s.clone();
            k.set(&mut again, &text).unwrap();
            assert_eq!(again, s, "{k} = {text}");
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_one_line_errors_that_change_nothing() {
        let mut s = ClusterSettings::default();
        let before = s.clone();
        let e = set(&mut s, "out_afterr", "5s").unwrap_err();
        assert!(
            e.starts_with("unknown setting \"out_afterr\" (known: out_after, "),
            "{e}"
        );
        for (k, v, want) in [
            ("out_after", "soon", "not a duration"),
            ("out_after", "1.5s", "whole number of seconds"),
            ("out_after", "31d", "more than 30d"),
            ("min_in_ratio", "1.2", "not in [0, 1]"),
            ("min_in_ratio", "x", "not a number"),
            ("recovery_max_active", "0", "from 1 to 64"),
            ("recovery_max_active", "2.5", "from 1 to 64"),
            ("recovery_sleep", "11s", "more than 10s"),
            ("full_ratio", "0", "not in (0, 1]"),
            ("nearfull_ratio", "0.97", "full ratios must be"),
            ("deep_scrub_interval", "-1", "not a duration"),
        ] {
            let e = set(&mut s, k, v).unwrap_err();
            assert!(e.starts_with(&format!("{k}: ")), "{k}={v}: {e}");
            assert!(e.contains(want), "{k}={v}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(s, before);
    }
}
