//! CPU time accounting for benchmarks: our own process, and child processes
//! (fio) reaped with their resource usage.

use std::time::Duration;

fn tv(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}

/// User + system CPU time consumed so far by this process (all threads,
/// including io_uring workers).
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Waits for child `pid` and returns (exit code, user + system CPU time).
pub fn wait_child(pid: u32) -> std::io::Result<(i32, Duration)> {
    let mut status = 0;
    // SAFETY: wait4 fills status and rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers; pid is our child.
        let r = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut ru) };
        if r >= 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ok((code, tv(ru.ru_utime) + tv(ru.ru_stime)))
}
