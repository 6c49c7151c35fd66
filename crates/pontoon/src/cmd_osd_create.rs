//! `pontoon osd create --device DEV`: formats a device for this cluster
//! and hands it an OSD id, refusing one that holds a filesystem, a
//! partition table or another cluster's data unless `--force` is given.
//! `pontoon osd run --device DEV` then runs it under that id.

use std::path::PathBuf;

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
    if !(1..=MAX_SHARDS).contains(&a.shards) {
        bail!("--shards {} must be between 1 and {MAX_SHARDS}", a.shards);
    }
    let size = a
        .size
        .as_deref()
        .map(|s| parse_size_arg("device size", s))
        .transpose()?;
    let lock = DeviceLock::acquire(&a.device, size)?;
    let result = create(&a, &lock, size);
    if result.is_err() && lock.created() {
        // Leave nothing behind for a file this command made.
        let _ = std::fs::remove_file(&a.device);
    }
    result
}

fn create(a: &OsdCreateArgs, lock: &DeviceLock, size: Option<u64>) -> Result<()> {
    let dev = a.device.display();
    if lock.is_block_device() && size.is_some() {
        bail!("--size is for files: {dev} is a block device, whose size is its own");
    }
    let contents = lock.probe().with_context(|| format!("cannot read {dev}"))?;
    // Refuse another program's data before needing the cluster.
    if let Contents::Foreign(_) = &contents
        && !a.force
    {
        bail!(
            "device {dev} holds {}; pass --force to destroy it",
            describe(&contents)
        );
    }
    crate::runtime()?.block_on(async {
        let (store, target) = a.cluster.connect().await?;
        let fsid = store.fsid().await?;
        check_create(&a.device, &contents, fsid, a.force).map_err(|e| anyhow!(e))?;
        if !contents.is_unrecognized() {
            eprintln!("destroying {} on {dev} (--force)", describe(&contents));
        }
        if let Some(size) = size
            && !lock.created()
            && lock.size()? < size
        {
            pontoon_store::FileDevice::create_file(&a.device, size)
                .with_context(|| format!("cannot extend {dev}"))?;
        }
        // --journal, else the configuration file's [osd.journal] entry.
        let journal = crate::config_file::get()
            .journal(&a.device, a.journal.as_deref())
            .value
            .map(PathBuf::from);
        let _journal_lock = journal
            .as_deref()
            .map(|j| identity::lock_journal(j, true, a.force))
            .transpose()
            .map_err(|e| anyhow!(e))?;
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
