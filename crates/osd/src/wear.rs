//! What an NVMe data device says of its own wear: "Data Units Written" and
//! "Percentage Used" from its SMART / Health Information log page, read
//! with the NVMe admin Get Log Page command through the kernel's
//! passthrough ioctl (`NVME_IOCTL_ADMIN_CMD` on `/dev/nvmeXnY`, which
//! needs CAP_SYS_ADMIN), else with `nvme smart-log -o json` when nvme-cli
//! is installed. A file, a loop device or any other block device is "not
//! NVMe": nothing is read.
//!
//! [`WearWatch`] reads it once a minute on a thread of its own (never on
//! the control loop) and keeps the latest, which the OSD adds to its
//! reports.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use pontoon_cluster::NvmeWear;

/// How often the log page is read.
pub const REFRESH: Duration = Duration::from_secs(60);

/// The NVMe namespace block device `path` is (following symlinks), if it
/// is one: `/dev/nvme<C>n<N>` or a partition of it.
pub fn nvme_device(path: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(path).ok()?;
    let name = real.file_name()?.to_str()?;
    if !is_nvme_name(name) {
        return None;
    }
    let meta = std::fs::metadata(&real).ok()?;
    meta.file_type().is_block_device().then_some(real)
}

/// Whether a device name is `nvme<C>n<N>` or `nvme<C>n<N>p<P>`.
fn is_nvme_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some(rest) = name.strip_prefix("nvme") else {
        return false;
    };
    let Some((ctrl, ns)) = rest.split_once('n') else {
        return false;
    };
    let ns = ns
        .split_once('p')
        .map_or(ns, |(n, p)| if digits(p) { n } else { "" });
    digits(ctrl) && digits(ns)
}

/// The kernel's `struct nvme_passthru_cmd` (linux/nvme_ioctl.h).
#[repr(C)]
#[derive(Default)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 72);

/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = (3 << 30) | (72 << 16) | (0x4E << 8) | 0x41;
/// Admin opcode Get Log Page.
const GET_LOG_PAGE: u8 = 0x02;
/// Log identifier of SMART / Health Information.
const SMART_LOG: u32 = 0x02;
/// Its size.
const SMART_LOG_BYTES: usize = 512;

/// Data Units Written and Percentage Used from a SMART / Health log page
/// (bytes 48..64, a 128-bit little-endian count, and byte 5).
pub fn parse_smart_log(page: &[u8]) -> Option<(u64, u8)> {
    if page.len() < 64 {
        return None;
    }
    let mut units = [0u8; 16];
    units.copy_from_slice(&page[48..64]);
    let units = u128::from_le_bytes(units);
    Some((u64::try_from(units).unwrap_or(u64::MAX), page[5]))
}

/// Reads the SMART log page with the admin passthrough ioctl.
fn smart_by_ioctl(dev: &Path) -> Result<(u64, u8), String> {
    let f = std::fs::File::open(dev).map_err(|e| format!("opening: {e}"))?;
    let mut page = vec![0u8; SMART_LOG_BYTES];
    let dwords = (SMART_LOG_BYTES / 4 - 1) as u32;
    let mut cmd = PassthruCmd {
        opcode: GET_LOG_PAGE,
        nsid: 0xFFFF_FFFF,
        addr: page.as_mut_ptr() as u64,
        data_len: SMART_LOG_BYTES as u32,
        cdw10: SMART_LOG | ((dwords & 0xFFFF) << 16),
        cdw11: dwords >> 16,
        timeout_ms: 5000,
        ..Default::default()
    };
    // SAFETY: the command names a buffer of `data_len` bytes that lives
    // until the ioctl returns; the kernel writes only within it.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), NVME_IOCTL_ADMIN_CMD as _, &mut cmd) };
    if r < 0 {
        return Err(format!(
            "NVMe admin ioctl: {}",
            std::io::Error::last_os_error()
        ));
    }
    if r > 0 {
        return Err(format!("Get Log Page failed with NVMe status {r:#x}"));
    }
    parse_smart_log(&page).ok_or_else(|| "short log page".into())
}

/// Data units written and percentage used from `nvme smart-log -o json`.
pub fn parse_nvme_cli_json(text: &str) -> Option<(u64, u8)> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let num = |k: &str| {
        v.get(k).and_then(|x| {
            x.as_u64()
                .or_else(|| x.as_f64().map(|f| f as u64))
                .or_else(|| x.as_str().and_then(|s| s.replace(',', "").parse().ok()))
        })
    };
    let units = num("data_units_written")?;
    let used = num("percent_used")
        .or_else(|| num("percentage_used"))
        .unwrap_or(0);
    Some((units, u8::try_from(used).unwrap_or(u8::MAX)))
}

/// Reads the SMART log page with nvme-cli.
fn smart_by_nvme_cli(dev: &Path) -> Result<(u64, u8), String> {
    let out = std::process::Command::new("nvme")
        .arg("smart-log")
        .arg(dev)
        .args(["-o", "json"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("nvme-cli: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nvme smart-log: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_nvme_cli_json(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| "nvme smart-log printed no data_units_written".into())
}

/// Reads an NVMe device's wear: the ioctl, else nvme-cli; the error of
/// both when neither works.
pub fn read_wear(dev: &Path) -> NvmeWear {
    let device = dev.display().to_string();
    let got =
        smart_by_ioctl(dev).or_else(|a| smart_by_nvme_cli(dev).map_err(|b| format!("{a}; {b}")));
    match got {
        Ok((units, used)) => NvmeWear {
            device,
            data_units_written: Some(units),
            percentage_used: Some(used),
            error: None,
        },
        Err(e) => NvmeWear {
            device,
            data_units_written: None,
            percentage_used: None,
            error: Some(e),
        },
    }
}

/// The latest wear of the OSD's device, read every [`REFRESH`] by a
/// thread that ends when the watch is dropped. Holds nothing for a device
/// that is not NVMe.
pub struct WearWatch {
    latest: Arc<Mutex<Option<NvmeWear>>>,
}

impl WearWatch {
    /// Starts watching `device` (does nothing unless it is NVMe).
    pub fn start(device: &Path) -> Self {
        let latest = Arc::new(Mutex::new(None));
        if let Some(dev) = nvme_device(device) {
            let weak: Weak<Mutex<Option<NvmeWear>>> = Arc::downgrade(&latest);
            let spawned = std::thread::Builder::new()
                .name("nvme-smart".into())
                .spawn(move || {
                    loop {
                        let w = read_wear(&dev);
                        let Some(slot) = weak.upgrade() else { return };
                        if let Some(e) = &w.error {
                            tracing::debug!(device = %dev.display(), "NVMe SMART: {e}");
                        }
                        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(w);
                        drop(slot);
                        // Sleep in short steps so a dropped watch ends soon.
                        for _ in 0..REFRESH.as_secs() {
                            std::thread::sleep(Duration::from_secs(1));
                            if weak.strong_count() == 0 {
                                return;
                            }
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!("cannot start the NVMe SMART reader: {e}");
            }
        }
        Self { latest }
    }

    /// The latest reading; `None` when the device is not NVMe (or not read yet).
    pub fn latest(&self) -> Option<NvmeWear> {
        self.latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_names_are_recognised() {
        for ok in ["nvme0n1", "nvme12n3", "nvme0n1p2"] {
            assert!(is_nvme_name(ok), "{ok}");
        }
        for bad in [
            "nvme0",
            "nvme0n",
            "nvmen1",
            "sda",
            "loop0",
            "nvme0n1p",
            "nvme0c0n1",
            "nvme0n1x",
        ] {
            assert!(!is_nvme_name(bad), "{bad}");
        }
    }

    #[test]
    fn files_and_loop_devices_are_not_nvme() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(nvme_device(f.path()).is_none());
        assert!(nvme_device(Path::new("/dev/null")).is_none());
        assert!(nvme_device(Path::new("/nonexistent/nvme0n1")).is_none());
        assert!(WearWatch::start(f.path()).latest().is_none());
    }

    #[test]
    fn the_smart_log_page_is_decoded() {
        let mut page = [0u8; 512];
        page[5] = 7;
        page[48..56].copy_from_slice(&123_456_789u64.to_le_bytes());
        assert_eq!(parse_smart_log(&page), Some((123_456_789, 7)));
        page[60] = 1; // beyond 64 bits: saturates
        assert_eq!(parse_smart_log(&page), Some((u64::MAX, 7)));
        assert_eq!(parse_smart_log(&page[..10]), None);
    }

    #[test]
    fn nvme_cli_json_is_decoded() {
        let j = r#"{"critical_warning":0,"temperature":310,"percent_used":3,"data_units_read":100,"data_units_written":987654}"#;
        assert_eq!(parse_nvme_cli_json(j), Some((987_654, 3)));
        let old = r#"{"percentage_used":"12","data_units_written":"1,234"}"#;
        assert_eq!(parse_nvme_cli_json(old), Some((1234, 12)));
        assert_eq!(parse_nvme_cli_json("{}"), None);
        assert_eq!(parse_nvme_cli_json("not json"), None);
    }
}
