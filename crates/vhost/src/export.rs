//! One exported volume on one unix socket, served to one front-end at a
//! time, connection after connection.
//!
//! Between connections the export waits for every request of the old one
//! to finish before it accepts the next, and completions that arrive after
//! the old connection ended are not published. So a front-end that
//! reconnects (QEMU's `reconnect-ms`), whether this process or QEMU
//! restarted, never sees a request of the previous session complete in its
//! rings, and a request it offers again cannot race an older copy of
//! itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{info, warn};
use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

use crate::backend::{Backend, DRAIN_LIMIT};
use crate::config::{DeviceShape, ID_BYTES};
use crate::worker::QueueWorker;
use crate::{ExportVolume, VhostError, VolumeFactory};

/// Most queues per device.
pub const MAX_QUEUES: usize = 64;

/// What to export and how.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// The unix socket to listen on (replaced if it exists).
    pub socket: PathBuf,
    /// The volume's name: thread names, logs and the serial number.
    pub name: String,
    /// Request queues offered (the front-end may use fewer).
    pub queues: usize,
    /// Refuse writes, discards and write-zeroes, and say so in the features.
    pub read_only: bool,
}

/// A running export; serves until the process ends.
pub struct Export {
    socket: PathBuf,
    size: u64,
    _thread: JoinHandle<()>,
}

/// The serial number GET_ID returns: the volume's name, cut at 20 bytes.
fn serial(name: &str) -> [u8; ID_BYTES] {
    let mut s = [0u8; ID_BYTES];
    let n = name.len().min(ID_BYTES);
    s[..n].copy_from_slice(&name.as_bytes()[..n]);
    s
}

impl Export {
    /// Opens the volume on every queue's worker, listens on the socket and
    /// starts serving.
    pub fn start<V: ExportVolume>(
        config: ExportConfig,
        factory: VolumeFactory<V>,
    ) -> Result<Self, VhostError> {
        if config.queues == 0 || config.queues > MAX_QUEUES {
            return Err(VhostError::Config(format!(
                "queues must be 1..={MAX_QUEUES}, not {}",
                config.queues
            )));
        }
        let current = Arc::new(AtomicU64::new(1));
        let mut workers = Vec::with_capacity(config.queues);
        let mut size = 0;
        for q in 0..config.queues {
            let (w, s) = QueueWorker::start(
                &config.name,
                q,
                factory.clone(),
                current.clone(),
                config.read_only,
                serial(&config.name),
            )?;
            size = s;
            workers.push(w);
        }
        let shape = DeviceShape {
            size,
            queues: config.queues as u16,
            read_only: config.read_only,
        };
        let listen_err = |source| VhostError::Listen {
            path: config.socket.clone(),
            source,
        };
        let listener = Listener::new(&config.socket, true)
            .map_err(|e| listen_err(std::io::Error::other(e.to_string())))?;
        let workers = Arc::new(workers);
        let name = config.name.clone();
        let thread = std::thread::Builder::new()
            .name(format!("vhost-{name}"))
            .spawn(move || serve(listener, name, shape, workers, current))
            .map_err(|e| VhostError::Start(e.to_string()))?;
        Ok(Self {
            socket: config.socket,
            size,
            _thread: thread,
        })
    }

    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The volume's size in bytes, as the device reports it.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Accepts front-ends one after another, for ever.
fn serve(
    mut listener: Listener,
    name: String,
    shape: DeviceShape,
    workers: Arc<Vec<QueueWorker>>,
    current: Arc<AtomicU64>,
) {
    loop {
        let generation = current.load(Ordering::Acquire);
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let backend = match Backend::new(shape, generation, workers.clone(), mem.clone()) {
            Ok(b) => b,
            Err(e) => {
                warn!("vhost {name}: cannot set up a connection: {e}");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        let mut daemon = match VhostUserDaemon::new(name.clone(), backend.clone(), mem) {
            Ok(d) => d,
            Err(e) => {
                warn!("vhost {name}: cannot set up a connection: {e}");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        match daemon.start(&mut listener) {
            Ok(()) => {
                info!("vhost {name}: front-end connected (session {generation})");
                match daemon.wait() {
                    Ok(()) => info!("vhost {name}: front-end disconnected"),
                    Err(e) => info!("vhost {name}: front-end connection ended: {e}"),
                }
            }
            Err(e) => {
                warn!("vhost {name}: accepting a front-end: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        backend.stop_threads();
        drop(daemon);
        // Completions of this session are no longer published; wait for
        // its requests to finish before the next session may start.
        current.fetch_add(1, Ordering::AcqRel);
        for (q, w) in workers.iter().enumerate() {
            if !w.drain(DRAIN_LIMIT) {
                warn!("vhost {name}: queue {q} still busy after {DRAIN_LIMIT:?}");
            }
        }
    }
}
