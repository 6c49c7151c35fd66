//! The standard `process_*` series (as Prometheus' client libraries name
//! them) from `/proc/self`, and the daemon's build info.

use crate::{Exposition, Labels, labels};

/// Adds `process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_virtual_memory_bytes`, `process_start_time_seconds`,
/// `process_open_fds`, `process_max_fds` and `process_threads`, and
/// `pontoon_build_info{version}`. What cannot be read is left out.
pub fn add_process_metrics(e: &mut Exposition) {
    e.gauge_u64(
        "pontoon_build_info",
        "Always 1; the version label names the Pontoon build.",
        labels(&[("version", env!("CARGO_PKG_VERSION"))]),
        1,
    );
    // SAFETY: sysconf has no preconditions.
    let (tick, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        // Fields from the 3rd (state) on.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        if tick > 0 {
            let tick = tick as f64;
            if let (Some(u), Some(s)) = (num(11), num(12)) {
                e.counter_f64(
                    "process_cpu_seconds_total",
                    "Total user and system CPU time spent in seconds.",
                    Labels::new(),
                    (u + s) as f64 / tick,
                );
            }
            if let (Some(start), Some(boot)) = (num(19), boot_time()) {
                e.gauge(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    Labels::new(),
                    boot as f64 + start as f64 / tick,
                );
            }
        }
        if let Some(t) = num(17) {
            e.gauge_u64(
                "process_threads",
                "Number of OS threads in the process.",
                Labels::new(),
                t,
            );
        }
        if let Some(v) = num(20) {
            e.gauge_u64(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                Labels::new(),
                v,
            );
        }
        if let (Some(rss), true) = (num(21), page > 0) {
            e.gauge_u64(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                Labels::new(),
                rss * page as u64,
            );
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        e.gauge_u64(
            "process_open_fds",
            "Number of open file descriptors.",
            Labels::new(),
            dir.count() as u64,
        );
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits")
        && let Some(line) = limits.lines().find(|l| l.starts_with("Max open files"))
        && let Some(soft) = line
            .split_whitespace()
            .nth(3)
            .and_then(|v| v.parse::<u64>().ok())
    {
        e.gauge_u64(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            Labels::new(),
            soft,
        );
    }
}

/// The system's boot time, Unix seconds (`btime` in `/proc/stat`).
fn boot_time() -> Option<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_series_are_read() {
        let mut e = Exposition::new();
        add_process_metrics(&mut e);
        let text = e.render();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "pontoon_build_info{version=",
        ] {
            assert!(text.contains(name), "{name} missing: {text}");
        }
    }
}
