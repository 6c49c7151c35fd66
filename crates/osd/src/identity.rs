//! Which OSD a device is, and what `pontoon osd run` and `pontoon osd
//! create` may do with it.
//!
//! A device formatted for a cluster records the cluster's fsid and its OSD
//! id in its header ([`OsdIdentity`]). `osd run` takes its identity from
//! there (an `--id` that disagrees is refused), refuses a device of another
//! cluster, and never formats a device that holds anything it recognises:
//! it formats only a file given a size that holds nothing (`pontoon up`'s
//! new files). `osd create` formats any device holding nothing recognised,
//! and, with `--force`, anything but a device in use.

use std::path::Path;

use pontoon_cluster::identity::id_handed_out;
use pontoon_cluster::{ClusterFsid, ClusterMap, MapStore};
use pontoon_store::probe::Contents;
use pontoon_store::{DeviceHeader, FileDevice, FormatOptions, OsdIdentity, Store};
use pontoon_types::OsdId;

use crate::device_lock::DeviceLock;

/// What a device's contents are, for people: `"ext4 filesystem"`,
/// `"Pontoon OSD 3 of cluster \"prod\" (fsid …)"`, …
pub fn describe(contents: &Contents) -> String {
    match contents {
        Contents::Unrecognized => "no data Pontoon recognises".into(),
        Contents::Foreign(what) => what.join(" and "),
        Contents::Pontoon(Err(e)) => format!("a damaged Pontoon store header ({e})"),
        Contents::Pontoon(Ok(h)) => describe_header(h),
    }
}

fn describe_header(h: &DeviceHeader) -> String {
    match (&h.identity, h.role) {
        (_, pontoon_store::layout::DeviceRole::Journal) => "a Pontoon journal device".into(),
        (Some(i), _) => format!(
            "Pontoon OSD {} of cluster {:?} (fsid {})",
            i.osd,
            i.cluster_name,
            ClusterFsid(i.cluster_fsid)
        ),
        (None, _) => {
            "a Pontoon store that records no OSD id (formatted by an older Pontoon)".into()
        }
    }
}

/// What `osd run` does with a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunPlan {
    /// The device is this cluster's OSD: run it under its id.
    Run(OsdId, DeviceHeader),
    /// The device records no identity (formatted before identities
    /// existed): record this id, given with `--id`, and run it.
    Record(OsdId, DeviceHeader),
    /// A new file holding nothing: format it for the id asked for (or a
    /// new one) and run it.
    Format(Option<OsdId>),
}

/// Decides what `osd run` does with a device holding `contents`, in the
/// cluster with `map` (whose fsid is `fsid`), asked to run as `requested`
/// (`--id`); `may_format`: the device is a file `osd run` was given a size
/// for. Errors say what the device holds and what to do.
pub fn plan_run(
    path: &Path,
    contents: &Contents,
    map: &ClusterMap,
    fsid: ClusterFsid,
    requested: Option<OsdId>,
    may_format: bool,
) -> Result<RunPlan, String> {
    let dev = path.display();
    let recreate = format!(
        "to destroy its data and make it an OSD of this cluster: pontoon osd create --device {dev} --force"
    );
    match contents {
        Contents::Foreign(_) => Err(format!(
            "device {dev} holds {}: `osd run` never formats a device holding data; {recreate}",
            describe(contents)
        )),
        Contents::Pontoon(Err(e)) => {
            Err(format!("device {dev}: cannot read its Pontoon header: {e}"))
        }
        Contents::Unrecognized if may_format => Ok(RunPlan::Format(requested)),
        Contents::Unrecognized => Err(format!(
            "device {dev} holds no Pontoon store: prepare it first with `pontoon osd create --device {dev}`"
        )),
        Contents::Pontoon(Ok(h)) if h.role != pontoon_store::layout::DeviceRole::Data => Err(
            format!("device {dev} is a Pontoon journal device; give the OSD's data device"),
        ),
        Contents::Pontoon(Ok(h)) => match &h.identity {
            Some(i) if i.cluster_fsid != fsid.0 => Err(format!(
                "device {dev} holds {}, not an OSD of this cluster {:?} (fsid {fsid}); {recreate}",
                describe_header(h),
                map.name
            )),
            Some(i) => {
                let id = OsdId(i.osd);
                if let Some(r) = requested
                    && r != id
                {
                    return Err(format!(
                        "device {dev} is {id}, not {r}: leave out --id (the device knows its id) or give {r}'s device"
                    ));
                }
                if !map.osds.contains_key(&id)
                    && !map.created_osds.contains(&id)
                    && id_handed_out(map, id)
                {
                    return Err(format!(
                        "device {dev} is {id}, which is no longer in the cluster (it was removed): its data is stale; {recreate}"
                    ));
                }
                Ok(RunPlan::Run(id, h.clone()))
            }
            None => {
                let Some(r) = requested else {
                    return Err(format!(
                        "device {dev} holds {}: start it once with --id N (its OSD id) to record the id on it",
                        describe_header(h)
                    ));
                };
                if !map.osds.contains_key(&r)
                    && !map.created_osds.contains(&r)
                    && id_handed_out(map, r)
                {
                    return Err(format!(
                        "{r} is not registered and its id was handed out before (ids are never reused); \
                         start without an id to get a new one"
                    ));
                }
                Ok(RunPlan::Record(r, h.clone()))
            }
        },
    }
}

/// Checks that `osd create` may format a device holding `contents` for
/// the cluster with `fsid`: it holds nothing recognised, or `force`.
pub fn check_create(
    path: &Path,
    contents: &Contents,
    fsid: ClusterFsid,
    force: bool,
) -> Result<(), String> {
    if force || contents.is_unrecognized() {
        return Ok(());
    }
    let dev = path.display();
    if let Contents::Pontoon(Ok(h)) = contents
        && let Some(i) = &h.identity
        && i.cluster_fsid == fsid.0
        && h.role == pontoon_store::layout::DeviceRole::Data
    {
        return Err(format!(
            "device {dev} is already osd.{} of this cluster: start it with `pontoon osd run --device {dev}`; \
             --force destroys its data and makes it a new OSD",
            i.osd
        ));
    }
    Err(format!(
        "device {dev} holds {}; pass --force to destroy it",
        describe(contents)
    ))
}

/// The identity a device formatted now for OSD `id` records.
pub fn identity_for(fsid: ClusterFsid, cluster_name: &str, id: OsdId) -> OsdIdentity {
    OsdIdentity {
        cluster_fsid: fsid.0,
        cluster_name: cluster_name.to_string(),
        osd: id.0,
    }
}

/// Runs `f` on a thread of its own with an io_uring runtime (the device
/// is driven as the store drives it), so it can be called from async code.
fn on_io_thread<T: Send>(f: impl FnOnce() -> Result<T, String> + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .map_err(|_| "the device I/O thread panicked".to_string())?
    })
}

/// Formats the locked device for `identity` with `slices` slices (and its
/// journal on the `journal` device, if given), after wiping other
/// programs' signatures. Destroys whatever it held.
pub fn format_device(
    lock: &DeviceLock,
    slices: u32,
    identity: OsdIdentity,
    journal: Option<&Path>,
) -> Result<DeviceHeader, String> {
    lock.wipe_signatures()
        .map_err(|e| format!("wiping old signatures: {e}"))?;
    let path = lock.path();
    on_io_thread(|| {
        let rt = compio::runtime::Runtime::new().map_err(|e| format!("io_uring: {e}"))?;
        rt.block_on(async {
            let dev = FileDevice::open(path).map_err(|e| format!("opening: {e}"))?;
            let journal = journal
                .map(|j| {
                    FileDevice::open(j)
                        .map_err(|e| format!("opening the journal device {}: {e}", j.display()))
                })
                .transpose()?;
            let opts = FormatOptions {
                slices,
                ..Default::default()
            };
            Store::format_as(&dev, journal.as_ref(), &opts, Some(identity))
                .await
                .map_err(|e| format!("formatting: {e}"))
        })
    })
}

/// Records `identity` in the header of the locked device, an existing
/// store formatted before identities existed.
pub fn record_identity(lock: &DeviceLock, identity: OsdIdentity) -> Result<DeviceHeader, String> {
    let path = lock.path();
    on_io_thread(|| {
        let rt = compio::runtime::Runtime::new().map_err(|e| format!("io_uring: {e}"))?;
        rt.block_on(async {
            let dev = FileDevice::open(path).map_err(|e| format!("opening: {e}"))?;
            Store::write_identity(&dev, identity)
                .await
                .map_err(|e| format!("recording its OSD id: {e}"))
        })
    })
}

/// How a new device is laid out.
#[derive(Clone, Copy, Debug)]
pub struct NewDevice<'a> {
    /// Slices (shards).
    pub slices: u32,
    /// The write-buffer device for the journal, if not on the data device.
    pub journal: Option<&'a Path>,
}

/// Gets an id for a new device from the cluster (`requested` or the next
/// one), formats the device for it and returns both; the id is given back
/// if formatting fails.
pub async fn create(
    store: &MapStore,
    lock: &DeviceLock,
    fsid: ClusterFsid,
    cluster_name: &str,
    requested: Option<OsdId>,
    layout: NewDevice<'_>,
) -> Result<(OsdId, DeviceHeader), String> {
    let id = store
        .create_osd_id(requested)
        .await
        .map_err(|e| e.to_string())?;
    let identity = identity_for(fsid, cluster_name, id);
    match format_device(lock, layout.slices.max(1), identity, layout.journal) {
        Ok(h) => Ok((id, h)),
        Err(e) => {
            if let Err(e2) = store.forget_created_osd(id).await {
                tracing::warn!(osd = %id, "giving the unused id back: {e2}");
            }
            Err(e)
        }
    }
}

/// What `osd run` claims: the OSD id, how many slices (shards) the
/// device has, and the lock on its write-buffer (journal) device, held as
/// long as this lives.
#[derive(Debug)]
pub struct Claimed {
    /// The OSD's id.
    pub id: OsdId,
    /// Slices on the device, one shard each.
    pub slices: u32,
    /// The journal device's lock, if the OSD has one.
    pub journal_lock: Option<DeviceLock>,
}

/// Locks a write-buffer (journal) device like a data device (one user at
/// a time) and, if it is about to be `formatting`, checks that it holds
/// nothing recognised unless `force`.
pub fn lock_journal(path: &Path, formatting: bool, force: bool) -> Result<DeviceLock, String> {
    let lock = DeviceLock::acquire(path, None).map_err(|e| format!("journal {e}"))?;
    if formatting && !force {
        let contents = lock
            .probe()
            .map_err(|e| format!("journal device {}: reading it: {e}", path.display()))?;
        if !contents.is_unrecognized() {
            return Err(format!(
                "journal device {} holds {}; formatting would destroy it: \
                 `pontoon osd create --journal {} --force` to do so",
                path.display(),
                describe(&contents),
                path.display()
            ));
        }
    }
    Ok(lock)
}

/// Works out which OSD the locked device is (formatting a new file given a
/// size, recording the id on an old device) for `osd run`.
pub async fn claim_for_run(
    store: &MapStore,
    lock: &DeviceLock,
    cluster_name: &str,
    requested: Option<OsdId>,
    may_format: bool,
    layout: NewDevice<'_>,
) -> Result<Claimed, String> {
    let fsid = store.fsid().await.map_err(|e| e.to_string())?;
    let map = store.load().await.map_err(|e| e.to_string())?;
    let contents = lock
        .probe()
        .map_err(|e| format!("device {}: reading it: {e}", lock.path().display()))?;
    let plan = plan_run(lock.path(), &contents, &map, fsid, requested, may_format)?;
    let formatting = matches!(plan, RunPlan::Format(_));
    let journal_lock = layout
        .journal
        .map(|j| lock_journal(j, formatting, false))
        .transpose()?;
    let (id, slices) = match plan {
        RunPlan::Run(id, h) => (id, h.slices),
        RunPlan::Record(id, _) => {
            let h = record_identity(lock, identity_for(fsid, cluster_name, id))?;
            tracing::info!(device = %lock.path().display(), osd = %id, "recorded the OSD id on the device");
            (id, h.slices)
        }
        RunPlan::Format(want) => {
            let (id, h) = create(store, lock, fsid, cluster_name, want, layout).await?;
            tracing::info!(device = %lock.path().display(), osd = %id, slices = h.slices, "formatted");
            (id, h.slices)
        }
    };
    Ok(Claimed {
        id,
        slices,
        journal_lock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::OsdRecord;
    use pontoon_store::layout::DeviceRole;

    const FSID: ClusterFsid = ClusterFsid(0x11);
    const OTHER: ClusterFsid = ClusterFsid(0x22);

    fn header(identity: Option<(ClusterFsid, u32)>) -> DeviceHeader {
        DeviceHeader {
            uuid: 1,
            role: DeviceRole::Data,
            slices: 2,
            slice_blocks: 1000,
            journal_blocks: 100,
            journal_external: false,
            peer_uuid: 0,
            object_size: 4 << 20,
            identity: identity.map(|(f, osd)| OsdIdentity {
                cluster_fsid: f.0,
                cluster_name: "c".into(),
                osd,
            }),
        }
    }

    fn pontoon(identity: Option<(ClusterFsid, u32)>) -> Contents {
        Contents::Pontoon(Ok(header(identity)))
    }

    /// A map with osd.0 registered, osd.2 created and never run, next id 3
    /// (so osd.1 was removed).
    fn map() -> ClusterMap {
        let mut m = ClusterMap::new("c");
        let rec: OsdRecord = serde_json::from_value(serde_json::json!({
            "id": 0, "host": "h", "addrs": ["127.0.0.1:1"], "weight": 1,
            "device_bytes": 1 << 20, "in_cluster": true,
        }))
        .unwrap();
        m.osds.insert(OsdId(0), rec);
        m.created_osds.insert(OsdId(2));
        m.next.osd = 3;
        m
    }

    fn plan(c: &Contents, requested: Option<u32>, may_format: bool) -> Result<RunPlan, String> {
        plan_run(
            Path::new("/dev/x"),
            c,
            &map(),
            FSID,
            requested.map(OsdId),
            may_format,
        )
    }

    #[test]
    fn a_device_of_this_cluster_runs_under_its_own_id() {
        for id in [0, 2, 7] {
            let c = pontoon(Some((FSID, id)));
            assert_eq!(
                plan(&c, None, false),
                Ok(RunPlan::Run(OsdId(id), header(Some((FSID, id)))))
            );
            assert!(matches!(plan(&c, Some(id), true), Ok(RunPlan::Run(..))));
        }
        let e = plan(&pontoon(Some((FSID, 0))), Some(2), false).unwrap_err();
        assert!(e.contains("is osd.0, not osd.2"), "{e}");
        let e = plan(&pontoon(Some((FSID, 1))), None, false).unwrap_err();
        assert!(e.contains("no longer in the cluster"), "{e}");
    }

    #[test]
    fn other_clusters_and_foreign_data_are_refused() {
        let e = plan(&pontoon(Some((OTHER, 0))), None, true).unwrap_err();
        assert!(
            e.contains(
                "Pontoon OSD 0 of cluster \"c\" (fsid 00000000-0000-0000-0000-000000000022)"
            ),
            "{e}"
        );
        assert!(e.contains("--force"), "{e}");
        let ext4 = Contents::Foreign(vec!["ext4 filesystem".into()]);
        let e = plan(&ext4, Some(0), true).unwrap_err();
        assert!(
            e.contains("holds ext4 filesystem") && e.contains("never formats"),
            "{e}"
        );
        let e = plan(&Contents::Pontoon(Err("bad crc".into())), None, true).unwrap_err();
        assert!(e.contains("bad crc"), "{e}");
        let mut journal = header(None);
        journal.role = DeviceRole::Journal;
        let e = plan(&Contents::Pontoon(Ok(journal)), None, true).unwrap_err();
        assert!(e.contains("journal"), "{e}");
    }

    #[test]
    fn only_new_files_are_formatted_by_run() {
        assert_eq!(
            plan(&Contents::Unrecognized, Some(5), true),
            Ok(RunPlan::Format(Some(OsdId(5))))
        );
        assert_eq!(
            plan(&Contents::Unrecognized, None, true),
            Ok(RunPlan::Format(None))
        );
        let e = plan(&Contents::Unrecognized, None, false).unwrap_err();
        assert!(e.contains("pontoon osd create --device /dev/x"), "{e}");
    }

    #[test]
    fn old_devices_need_their_id_once() {
        let old = pontoon(None);
        let e = plan(&old, None, false).unwrap_err();
        assert!(e.contains("--id"), "{e}");
        assert_eq!(
            plan(&old, Some(0), false),
            Ok(RunPlan::Record(OsdId(0), header(None)))
        );
        assert!(matches!(
            plan(&old, Some(9), false),
            Ok(RunPlan::Record(..))
        ));
        let e = plan(&old, Some(1), false).unwrap_err();
        assert!(e.contains("handed out before"), "{e}");
    }

    #[test]
    fn a_journal_device_is_locked_and_not_formatted_over_data() {
        let dir = tempfile::tempdir().unwrap();
        let j = dir.path().join("journal.img");
        let mut data = vec![0u8; 1 << 20];
        data[1080..1082].copy_from_slice(&0xEF53u16.to_le_bytes());
        std::fs::write(&j, &data).unwrap();
        let e = lock_journal(&j, true, false).unwrap_err();
        assert!(
            e.contains("holds ext2 filesystem") && e.contains("--force"),
            "{e}"
        );
        let held = lock_journal(&j, false, false).unwrap();
        let e = lock_journal(&j, true, true).unwrap_err();
        assert!(
            e.starts_with("journal device") && e.contains("in use"),
            "{e}"
        );
        drop(held);
        assert!(lock_journal(&j, true, true).is_ok());
    }

    #[test]
    fn create_refuses_data_unless_forced() {
        let p = Path::new("/dev/x");
        assert!(check_create(p, &Contents::Unrecognized, FSID, false).is_ok());
        let gpt = Contents::Foreign(vec!["GPT partition table".into()]);
        let e = check_create(p, &gpt, FSID, false).unwrap_err();
        assert!(e.contains("holds GPT partition table; pass --force"), "{e}");
        assert!(check_create(p, &gpt, FSID, true).is_ok());
        let e = check_create(p, &pontoon(Some((FSID, 4))), FSID, false).unwrap_err();
        assert!(e.contains("already osd.4 of this cluster"), "{e}");
        let e = check_create(p, &pontoon(Some((OTHER, 4))), FSID, false).unwrap_err();
        assert!(e.contains("Pontoon OSD 4 of cluster"), "{e}");
        let e = check_create(p, &pontoon(None), FSID, false).unwrap_err();
        assert!(e.contains("older Pontoon"), "{e}");
    }
}
