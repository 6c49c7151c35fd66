//! The cluster's volumes as a [`VolumeCatalog`], which front-ends (the NBD
//! gateway) serve.

use pontoon_volume::{VolumeCatalog, VolumeError, VolumeInfo};

use crate::{Client, Volume};

/// Every volume of the cluster, opened through one thread's [`Client`].
#[derive(Clone)]
pub struct ClusterCatalog {
    client: Client,
}

impl ClusterCatalog {
    /// A catalog over `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl VolumeCatalog for ClusterCatalog {
    type Volume = Volume;

    async fn list(&self) -> Result<Vec<VolumeInfo>, VolumeError> {
        let map = self.client.transport().map.get();
        let mut v: Vec<VolumeInfo> = map
            .volumes
            .values()
            .map(|v| VolumeInfo {
                name: v.name.clone(),
                size: v.size_bytes,
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    async fn open(&self, name: &str) -> Result<Option<Volume>, VolumeError> {
        match self.client.open(name) {
            Ok(v) => Ok(Some(v)),
            Err(crate::ClientError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
