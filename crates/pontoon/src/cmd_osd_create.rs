//! `pontoon osd create --device DEV`: formats a device for this cluster
//! and hands it an OSD id, refusing one that holds a filesystem, a
//! partition table or another cluster's data unless `--force` is given.
//! `pontoon osd run --device DEV` then runs it under that id.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use pontoon_osd::device_lock::DeviceLock;
use pontoon_osd::identity::{self, NewDevice, check_create, describe};
use pontoon_store::probe::Contents;
use pontoon_types::format_size;

use crate::cluster_args::{ClusterArgs, parse_size_arg};
use crate::cmd_osd::MAX_SHARDS;

/// Arguments of `pontoon osd create`.
#[derive(Args, Debug)]
pub struct OsdCreateArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Data device (an NVMe namespace or other block device), or a file.
    #[arg(long, value_name = "PATH")]
    device: PathBuf,
    /// Create the device as a file of this size if it does not exist, or
    /// extend a smaller file (e.g. 10G). A block device has its own size.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Shards (one thread each, each with its own slice of the device).
    #[arg(long, value_name = "K", default_value_t = 1)]
    shards: u32,
    /// Write-buffer device for the journal, instead of the data device
    /// (give it to `osd run` too; default: the configuration file's
    /// [osd.journal] entry for --device).
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Format the device even if it holds a filesystem, a partition table
    /// or another cluster's data, destroying it. A device in use is never
    /// formatted.
    #[arg(long)]
    force: bool,
    /// Print the new OSD as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `pontoon osd create`.
pub fn run(a: OsdCreateArgs) -> Result<()> {
    with_device(&a.device, a.shards, a.size.as_deref(), |lock, size| {
        create(&a, lock, size)
    })
}

/// Checks `--shards` and `--size`, locks `device` (creating a file of
/// `--size` if there is none), runs `f` on it, and removes a file this
/// command made if `f` fails: what `osd create` and `osd replace` share.
pub fn with_device(
    device: &Path,
    shards: u32,
    size: Option<&str>,
    f: impl FnOnce(&DeviceLock, Option<u64>) -> Result<()>,
) -> Result<()> {
    if !(1..=MAX_SHARDS).contains(&shards) {
        bail!("--shards {shards} must be between 1 and {MAX_SHARDS}");
    }
    let size = size.map(|s| parse_size_arg("device size", s)).transpose()?;
    let lock = DeviceLock::acquire(device, size)?;
    let result = f(&lock, size);
    if result.is_err() && lock.created() {
        // Leave nothing behind for a file this command made.
        let _ = std::fs::remove_file(device);
    }
    result
}

/// What the locked `device` holds; another program's data is refused
/// unless `force` (before the cluster is needed), and so is `--size` for
/// a block device.
pub fn probe_device(
    device: &Path,
    lock: &DeviceLock,
    size: Option<u64>,
    force: bool,
) -> Result<Contents> {
    let dev = device.display();
    if lock.is_block_device() && size.is_some() {
        bail!("--size is for files: {dev} is a block device, whose size is its own");
    }
    let contents = lock.probe().with_context(|| format!("cannot read {dev}"))?;
    if let Contents::Foreign(_) = &contents
        && !force
    {
        bail!(
            "device {dev} holds {}; pass --force to destroy it",
            describe(&contents)
        );
    }
    Ok(contents)
}

/// The checks against the cluster (`fsid`) before formatting, the notice
/// of what `--force` destroys, and a file device grown to `--size`.
pub fn ready_to_format(
    device: &Path,
    lock: &DeviceLock,
    contents: &Contents,
    fsid: pontoon_cluster::ClusterFsid,
    size: Option<u64>,
    force: bool,
) -> Result<()> {
    let dev = device.display();
    check_create(device, contents, fsid, force).map_err(|e| anyhow!(e))?;
    if !contents.is_unrecognized() {
        eprintln!("destroying {} on {dev} (--force)", describe(contents));
    }
    if let Some(size) = size
        && !lock.created()
        && lock.size()? < size
    {
        pontoon_store::FileDevice::create_file(device, size)
            .with_context(|| format!("cannot extend {dev}"))?;
    }
    Ok(())
}

/// The write-buffer device a new OSD on `device` gets (`--journal`, else
/// the configuration file's `[osd.journal]` entry), locked like the device.
pub(crate) fn journal_for(
    device: &Path,
    flag: Option<&Path>,
    force: bool,
) -> Result<(Option<PathBuf>, Option<DeviceLock>)> {
    let journal = crate::config_file::get()
        .journal(device, flag)
        .value
        .map(PathBuf::from);
    let lock = journal
        .as_deref()
        .map(|j| identity::lock_journal(j, true, force))
        .transpose()
        .map_err(|e| anyhow!(e))?;
    Ok((journal, lock))
}

fn create(a: &OsdCreateArgs, lock: &DeviceLock, size: Option<u64>) -> Result<()> {
    let dev = a.device.display();
    let contents = probe_device(&a.device, lock, size, a.force)?;
    crate::runtime()?.block_on(async {
        let (store, target) = a.cluster.connect().await?;
        let fsid = store.fsid().await?;
        ready_to_format(&a.device, lock, &contents, fsid, size, a.force)?;
        let (journal, _journal_lock) = journal_for(&a.device, a.journal.as_deref(), a.force)?;
        let layout = NewDevice {
            slices: a.shards,
            journal: journal.as_deref(),
        };
        let (id, h) = identity::create(&store, lock, fsid, &target.name, None, layout)
            .await
            .map_err(|e| anyhow!("device {dev}: {e}"))?;
        let bytes = lock.size()?;
        if a.json {
            let v = serde_json::json!({
                "id": id.0,
                "device": a.device,
                "device_bytes": bytes,
                "weight": pontoon_cluster::weight_for_size(bytes),
                "shards": h.slices,
                "cluster": target.name,
                "fsid": fsid.to_string(),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "created {id} on {dev}: {}, {} shard{}, cluster {:?} (fsid {fsid})",
                format_size(bytes),
                h.slices,
                if h.slices == 1 { "" } else { "s" },
                target.name
            );
            println!("run it with: pontoon osd run --device {dev} (it knows its id)");
        }
        Ok(())
    })
}
