//! Bare device random-read loop (no store) to measure the I/O path's own cost.
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pontoon_buf::AlignedBuf;
use pontoon_store::{BlockDevice, FileDevice};

fn main() {
    let path = std::env::args().nth(1).expect("path");
    let qd: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(32);
    let rt = compio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let dev = Rc::new(FileDevice::open(path.as_ref()).unwrap());
        let blocks = dev.size() / 4096;
        let done = Rc::new(Cell::new(0u64));
        let stop = Rc::new(Cell::new(false));
        let t0 = Instant::now();
        let mut hs = vec![];
        for w in 0..qd {
            let (dev, done, stop) = (dev.clone(), done.clone(), stop.clone());
            hs.push(compio::runtime::spawn(async move {
                let mut x = pontoon_types::mix64(w as u64 + 1);
                let mut buf = AlignedBuf::for_read(4096);
                while !stop.get() {
                    x = pontoon_types::mix64(x);
                    let (r, b) = dev.read_at(buf, 0..4096, (x % blocks) * 4096).await;
                    r.unwrap();
                    buf = b;
                    done.set(done.get() + 1);
                }
            }));
        }
        compio::time::sleep(Duration::from_secs(5)).await;
        stop.set(true);
        for h in hs {
            let _ = h.await;
        }
        println!("{:.0} IOPS", done.get() as f64 / t0.elapsed().as_secs_f64());
    });
}
