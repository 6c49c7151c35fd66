//! `pontoon osd smart --device DEV`: what an NVMe namespace's SMART /
//! Health Information log page says of the drive's wear, read on this host
//! the way an OSD reads it for its device (`pontoon_osd::wear`: the admin
//! Get Log Page passthrough ioctl, else `nvme smart-log`). No cluster is
//! needed; reading the log page needs root (CAP_SYS_ADMIN).

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use pontoon_cluster::NvmeWear;
use pontoon_mgr::endurance::NVME_DATA_UNIT;
use pontoon_osd::wear::{nvme_device, read_wear};
use pontoon_types::format_size;
use serde::Serialize;

/// Arguments of `pontoon osd smart`.
#[derive(Args, Debug)]
pub struct SmartArgs {
    /// The NVMe namespace block device, e.g. /dev/nvme0n1 (a symlink to
    /// one, or a partition of one, will do).
    #[arg(long, value_name = "DEV")]
    device: PathBuf,
    /// Print JSON: the device, data_units_written, percentage_used and
    /// lifetime_written_bytes (data units x 512,000).
    #[arg(long)]
    json: bool,
}

/// What `--json` prints: the reading plus the units in bytes.
#[derive(Serialize)]
struct SmartJson<'a> {
    #[serde(flatten)]
    wear: &'a NvmeWear,
    /// Bytes written over the device's life (data units × 512,000).
    lifetime_written_bytes: u64,
}

/// Bytes that `units` NVMe data units stand for (each 1,000 × 512 bytes,
/// counted by the drive rounded up; saturating).
pub fn units_to_bytes(units: u64) -> u64 {
    units.saturating_mul(NVME_DATA_UNIT)
}

/// Runs `pontoon osd smart`: prints the device's wear, or fails when it is
/// not an NVMe namespace or its log page cannot be read.
pub fn run(a: SmartArgs) -> Result<()> {
    let given = a.device.display();
    if let Err(e) = std::fs::metadata(&a.device) {
        bail!("{given}: {e}");
    }
    let Some(dev) = nvme_device(&a.device) else {
        bail!("{given} is not an NVMe namespace (/dev/nvme<C>n<N>): it has no NVMe SMART log");
    };
    let wear = read_wear(&dev);
    if let Some(e) = &wear.error {
        bail!("cannot read the SMART log of {}: {e}", dev.display());
    }
    let units = wear.data_units_written.ok_or_else(|| {
        anyhow!(
            "{}: the SMART log gave no data units written",
            dev.display()
        )
    })?;
    let bytes = units_to_bytes(units);
    if a.json {
        let j = SmartJson {
            wear: &wear,
            lifetime_written_bytes: bytes,
        };
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    println!("device              {}", wear.device);
    println!(
        "data units written  {units} ({bytes} bytes, {})",
        format_size(bytes)
    );
    match wear.percentage_used {
        Some(p) => println!("percentage used     {p}%"),
        None => println!("percentage used     -"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_512000_bytes() {
        assert_eq!(units_to_bytes(0), 0);
        assert_eq!(units_to_bytes(132), 67_584_000);
        assert_eq!(units_to_bytes(u64::MAX), u64::MAX);
    }

    #[test]
    fn json_has_the_wear_fields_and_bytes() {
        let w = NvmeWear {
            device: "/dev/nvme0n1".into(),
            data_units_written: Some(2),
            percentage_used: Some(3),
            error: None,
        };
        let j = serde_json::to_value(SmartJson {
            wear: &w,
            lifetime_written_bytes: units_to_bytes(2),
        })
        .expect("serialises");
        assert_eq!(j["device"], "/dev/nvme0n1");
        assert_eq!(j["data_units_written"], 2);
        assert_eq!(j["percentage_used"], 3);
        assert_eq!(j["lifetime_written_bytes"], 1_024_000);
        assert!(j.get("error").is_none());
    }

    #[test]
    fn devices_that_are_not_nvme_are_refused() {
        let e = run(SmartArgs {
            device: PathBuf::from("/dev/null"),
            json: true,
        })
        .expect_err("/dev/null is not NVMe")
        .to_string();
        assert_eq!(
            e,
            "/dev/null is not an NVMe namespace (/dev/nvme<C>n<N>): it has no NVMe SMART log"
        );
    }
}
