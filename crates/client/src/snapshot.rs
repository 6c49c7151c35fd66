//! Snapshots opened read-only (`VOLUME@SNAPSHOT`): what a [`Volume`] needs
//! to read one, and the checks that keep it read-only and current.
//!
//! A snapshot volume reads with the snapshot's id on every request (the
//! OSD reads its store's clones); it has the size the volume had when the
//! snapshot was taken; writes, discards and write-zeroes are refused with
//! [`ClientError::ReadOnly`] before anything is sent. A snapshot removed
//! from the map while open fails its next read with
//! [`ClientError::NotFound`] rather than read blocks a trim may free.

use std::rc::Rc;

use crate::ClientError;
use crate::object_io::Transport;
use crate::volume::Volume;

/// The snapshot a [`Volume`] was opened at.
#[derive(Clone, Debug)]
pub(crate) struct SnapView {
    /// The snapshot id (the volume's sequence when it was taken).
    pub id: u64,
    /// Its name, for errors.
    pub name: String,
}

impl Volume {
    /// Opens snapshot `snap` of volume `volume`, read-only, in the
    /// transport's current map.
    pub fn open_snapshot(
        transport: Rc<Transport>,
        volume: &str,
        snap: &str,
    ) -> Result<Self, ClientError> {
        let map = transport.map.get();
        let v = map
            .volume_by_name(volume)
            .ok_or_else(|| ClientError::NotFound(volume.to_string()))?;
        let s = v
            .snapshot_by_name(snap)
            .ok_or_else(|| ClientError::NotFound(format!("{volume}@{snap}")))?;
        assert!(s.id > 0, "snapshot ids start at 1");
        Ok(Self {
            id: v.id,
            name: format!("{volume}@{snap}"),
            size: s.size_bytes,
            object_size: v.object_size,
            snap: Some(SnapView {
                id: s.id,
                name: s.name.clone(),
            }),
            written: Default::default(),
            transport,
        })
    }

    /// Whether this is a snapshot (read-only).
    pub fn is_snapshot(&self) -> bool {
        self.snap.is_some()
    }

    /// Refuses changes to a snapshot.
    pub(crate) fn writable(&self) -> Result<(), ClientError> {
        match &self.snap {
            None => Ok(()),
            Some(_) => Err(ClientError::ReadOnly(self.name.clone())),
        }
    }

    /// The snapshot id reads carry (`None`: the head), checking that the
    /// snapshot is still in the newest map.
    pub(crate) fn snap_id(&self) -> Result<Option<u64>, ClientError> {
        let Some(s) = &self.snap else {
            return Ok(None);
        };
        let map = self.transport.map.get();
        let present = map
            .volumes
            .get(&self.id)
            .is_some_and(|v| v.snapshot(s.id).is_some_and(|r| r.name == s.name));
        if !present {
            return Err(ClientError::NotFound(self.name.clone()));
        }
        Ok(Some(s.id))
    }
}
