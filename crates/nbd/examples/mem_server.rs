//! Serves in-memory volumes over NBD until stdin is closed.
//!
//! `cargo run -p pontoon-nbd --example mem_server -- 127.0.0.1:10809 vol=1024 other=64`
//! (volume sizes in MiB), then e.g. `nbdinfo --list nbd://127.0.0.1:10809`.

use std::io::Read;
use std::sync::Arc;

use pontoon_nbd::{ServerConfig, start};
use pontoon_volume::{MemCatalog, MemVolume};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let listen = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:10809".into())
        .parse()?;
    let mut vols = Vec::new();
    for a in args {
        let (name, mib) = a.split_once('=').ok_or("volumes are NAME=MIB")?;
        vols.push((name.to_string(), mib.parse::<u64>()? << 20));
    }
    if vols.is_empty() {
        vols.push(("vol".to_string(), 1 << 30));
    }
    let server = start(
        ServerConfig {
            listen,
            ..Default::default()
        },
        Arc::new(move || {
            let c = MemCatalog::default();
            for (n, s) in &vols {
                c.insert(n, MemVolume::new(*s));
            }
            c
        }),
    )?;
    eprintln!("serving on {}; close stdin to stop", server.local_addr());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    server.stop()?;
    Ok(())
}
