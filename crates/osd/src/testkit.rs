//! Test support: an OSD with one shard on its own thread and io_uring
//! runtime, serving TCP on 127.0.0.1, driven by maps a test pushes by hand.
//! Used by this crate's tests and by the client's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use pontoon_net::Limits;
use pontoon_store::{FileDevice, FormatOptions, Store};
use pontoon_types::OsdId;

use crate::map::ShardMap;
use crate::peers::NetPeers;
use crate::shard::{PgStatus, Shard};

enum Cmd {
    Map(Box<ShardMap>),
    Status(std_mpsc::Sender<Vec<PgStatus>>),
    Stop,
}

/// One OSD with one shard, on its own thread.
pub struct TestOsd {
    /// Where its shard listens.
    pub addr: SocketAddr,
    tx: mpsc::UnboundedSender<Cmd>,
    thread: Option<JoinHandle<()>>,
}

impl TestOsd {
    /// Starts OSD `id` on the store file `path` (created and formatted with
    /// `size` bytes when `format`), serving with no lease deadline. Panics
    /// on failure: test code only.
    pub fn start(id: u32, path: PathBuf, format: Option<u64>) -> TestOsd {
        Self::start_with_deadline(id, path, format, crate::LeaseDeadline::unbounded())
    }

    /// [`TestOsd::start`] serving until `deadline` allows no more, which the
    /// test moves by hand as a control loop would.
    pub fn start_with_deadline(
        id: u32,
        path: PathBuf,
        format: Option<u64>,
        deadline: Arc<crate::LeaseDeadline>,
    ) -> TestOsd {
        let (tx, mut rx) = mpsc::unbounded::<Cmd>();
        let (addr_tx, addr_rx) = std_mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = compio::runtime::Runtime::new().expect("io_uring runtime");
            rt.block_on(async move {
                if let Some(size) = format {
                    FileDevice::create_file(&path, size).expect("create store file");
                    let dev = FileDevice::open(&path).expect("open store file");
                    Store::format(&dev, None, &FormatOptions::default())
                        .await
                        .expect("format");
                }
                let dev = FileDevice::open(&path).expect("open store file");
                let (store, bg) = Store::open(dev, None, 0).await.expect("open store");
                compio::runtime::spawn(bg).detach();
                let me = OsdId(id);
                let shard = Shard::new(me, 0, 1, store.clone(), NetPeers::new(me), deadline);
                let listener = compio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                addr_tx
                    .send(listener.local_addr().expect("local addr"))
                    .expect("report address");
                let server = compio::runtime::spawn(pontoon_net::serve(
                    listener,
                    shard.clone(),
                    Limits::default(),
                ));
                while let Some(cmd) = rx.next().await {
                    match cmd {
                        Cmd::Map(m) => {
                            let m = Rc::new(*m);
                            shard.peers().set_map(m.clone());
                            shard.apply_map(m);
                        }
                        Cmd::Status(reply) => {
                            let _ = reply.send(shard.pg_status());
                        }
                        Cmd::Stop => break,
                    }
                }
                drop(server);
                shard.peers().close_all();
                let _ = store.close().await;
            });
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("osd started");
        TestOsd {
            addr,
            tx,
            thread: Some(thread),
        }
    }

    /// Installs a map.
    pub fn map(&self, m: &ShardMap) {
        let _ = self.tx.unbounded_send(Cmd::Map(Box::new(m.clone())));
    }

    /// The shard's PG states.
    pub fn status(&self) -> Vec<PgStatus> {
        let (tx, rx) = std_mpsc::channel();
        self.tx
            .unbounded_send(Cmd::Status(tx))
            .expect("osd running");
        rx.recv_timeout(Duration::from_secs(10)).expect("status")
    }

    /// Stops the OSD (like a crash of the process, but closing the store).
    pub fn stop(mut self) {
        let _ = self.tx.unbounded_send(Cmd::Stop);
        if let Some(t) = self.thread.take() {
            t.join().expect("osd thread");
        }
    }
}

impl Drop for TestOsd {
    fn drop(&mut self) {
        let _ = self.tx.unbounded_send(Cmd::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
