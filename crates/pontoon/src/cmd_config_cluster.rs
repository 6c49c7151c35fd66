//! `pontoon config set|get|rm|ls`: the runtime settings the whole cluster
//! shares, kept in the map (see [`pontoon_cluster::runtime_config`]):
//! out-after, the minimum in ratio, the recovery throttles, the full ratios
//! and the deep-scrub interval. A change bumps the map's epoch; the
//! manager and every OSD apply it at their next map, without a restart.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use pontoon_cluster::runtime_config::{ConfigError, ConfigKey};
use pontoon_cluster::{ClusterError, ClusterSettings, MapStore};
use serde::Serialize;

use crate::cluster_args::ClusterArgs;

fn parse_key(s: &str) -> Result<ConfigKey, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

/// Arguments of `pontoon config set`.
#[derive(Args, Debug)]
pub struct SetArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The setting (`pontoon config ls` lists them).
    #[arg(value_parser = parse_key)]
    key: ConfigKey,
    /// Its new value (durations as 30s, 10m, 2h; ratios as 0.75).
    value: String,
}

/// Arguments of `pontoon config get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The setting (`pontoon config ls` lists them).
    #[arg(value_parser = parse_key)]
    key: ConfigKey,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `pontoon config rm`.
#[derive(Args, Debug)]
pub struct RmArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The setting (`pontoon config ls` lists them).
    #[arg(value_parser = parse_key)]
    key: ConfigKey,
}

/// Arguments of `pontoon config ls`.
#[derive(Args, Debug)]
pub struct LsArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One setting as `--json` prints it.
#[derive(Serialize, Debug)]
struct Entry {
    key: &'static str,
    value: String,
    default: String,
    /// Set in the map (for `out_after`), else: differs from the default.
    set: bool,
    ceph_name: &'static str,
    description: &'static str,
}

fn entry(k: ConfigKey, s: &ClusterSettings) -> Entry {
    Entry {
        key: k.name(),
        value: k.value(s),
        default: k.default_value(),
        set: !k.is_default(s),
        ceph_name: k.ceph_name(),
        description: k.description(),
    }
}

/// The note `ls` adds while out-after is not set in the map.
fn out_after_note(s: &ClusterSettings) -> Option<String> {
    ConfigKey::OutAfter.is_default(s).then(|| {
        format!(
            "out_after is not set in the map: each manager uses its --out-after (default {})",
            ConfigKey::OutAfter.default_value()
        )
    })
}

fn render(s: &ClusterSettings) -> String {
    let entries: Vec<Entry> = ConfigKey::ALL.iter().map(|k| entry(*k, s)).collect();
    let kw = entries
        .iter()
        .map(|e| e.key.len())
        .max()
        .unwrap_or(0)
        .max(3);
    let vw = entries
        .iter()
        .map(|e| e.value.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let dw = entries
        .iter()
        .map(|e| e.default.len())
        .max()
        .unwrap_or(0)
        .max(7);
    let mut out = vec![format!(
        "{:<kw$}  {:<vw$}  {:<dw$}  DESCRIPTION",
        "KEY", "VALUE", "DEFAULT"
    )];
    for e in &entries {
        out.push(format!(
            "{:<kw$}  {:<vw$}  {:<dw$}  {}",
            e.key, e.value, e.default, e.description
        ));
    }
    out.extend(out_after_note(s));
    out.join("\n")
}

/// Runs `pontoon config set`.
pub fn set(a: SetArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let updated = store
            .update::<_, ConfigError>(|m| {
                let before = m.settings.clone();
                a.key.apply(m, Some(&a.value))?;
                // Set explicitly, even to the value in force: out-after
                // then no longer follows each manager's flag.
                Ok(m.settings != before)
            })
            .await?;
        println!("{} = {}", a.key, a.key.value(&updated.map.settings));
        Ok(())
    })
}

/// Runs `pontoon config rm`: the setting goes back to its default.
pub fn rm(a: RmArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let updated = store
            .update::<_, ConfigError>(|m| {
                let before = m.settings.clone();
                a.key.apply(m, None)?;
                Ok(m.settings != before)
            })
            .await?;
        println!(
            "{} = {} (default)",
            a.key,
            a.key.value(&updated.map.settings)
        );
        Ok(())
    })
}

/// Runs `pontoon config get`.
pub fn get(a: GetArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let map = store.load().await?;
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&entry(a.key, &map.settings))?
            );
        } else {
            println!("{}", a.key.value(&map.settings));
        }
        Ok(())
    })
}

/// Runs `pontoon config ls`.
pub fn ls(a: LsArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let map = store.load().await?;
        if a.json {
            let entries: Vec<Entry> = ConfigKey::ALL
                .iter()
                .map(|k| entry(*k, &map.settings))
                .collect();
            println!("{}", serde_json::to_string_pretty(&entries)?);
        } else {
            println!("{}", render(&map.settings));
        }
        Ok(())
    })
}

/// Writes `pontoon up`'s out-after into the map when it was given on the
/// command line (`given`) or the map has none yet (a new cluster), so that
/// every manager, the standby too, and `config get` agree; otherwise the
/// map's (perhaps set with `config set`) stays. Rounded up to seconds.
pub async fn seed_out_after(store: &MapStore, out_after: Duration, given: bool) -> Result<()> {
    let secs = out_after.as_secs() + u64::from(out_after.subsec_nanos() > 0);
    store
        .update::<_, ClusterError>(|m| {
            let now = &mut m.settings.osd.out_after_secs;
            if *now == Some(secs) || (now.is_some() && !given) {
                return Ok(false);
            }
            *now = Some(secs);
            Ok(true)
        })
        .await?;
    Ok(())
}

/// Sets the map's `ms_mode` (what `pontoon up --ms-mode` does), with the
/// checks of `config set ms_mode`.
pub async fn set_ms_mode(store: &MapStore, mode: pontoon_types::WireMode) -> Result<()> {
    store
        .update::<_, ConfigError>(|m| {
            if m.settings.ms_mode == mode {
                return Ok(false);
            }
            ConfigKey::MsMode.apply(m, Some(mode.as_str()))?;
            Ok(true)
        })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ls_shows_every_setting_with_its_default() {
        let mut s = ClusterSettings::default();
        let text = render(&s);
        assert!(text.starts_with("KEY "), "{text}");
        assert!(text.contains("\nout_after  "), "{text}");
        assert!(
            text.ends_with("each manager uses its --out-after (default 10m)"),
            "{text}"
        );
        assert_eq!(text.lines().count(), ConfigKey::ALL.len() + 2);
        ConfigKey::OutAfter.set(&mut s, "5m").unwrap();
        let text = render(&s);
        assert_eq!(text.lines().count(), ConfigKey::ALL.len() + 1);
        assert!(entry(ConfigKey::OutAfter, &s).set);
        assert!(!entry(ConfigKey::FullRatio, &s).set);
    }
}
