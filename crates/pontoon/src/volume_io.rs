//! What the commands that move a volume's data share (`volume export`,
//! `import`, `export-diff`, `import-diff`, `snap rollback`): naming and
//! finding volumes and snapshots with one-line errors, the data-path
//! runtime and client, waiting for the client's map to catch up with a
//! change the command made, the input and output files, and progress bars.
//!
//! Bounds: at most [`IN_FLIGHT`] objects are worked on at once, each at
//! most [`CHUNK`] bytes in memory.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pontoon_client::MapFeed;
use pontoon_cluster::{ClusterMap, SnapshotRecord, VolumeRecord, is_valid_name, parse_snap_spec};

/// Objects worked on at once.
pub const IN_FLIGHT: usize = 8;
/// Most bytes one request reads or writes (the default object size).
pub const CHUNK: u64 = pontoon_client::READ_CHUNK;
/// How long a command waits for its client's map to show a change it made.
const MAP_WAIT: Duration = Duration::from_secs(15);

/// A volume name, checked.
pub fn check_volume(name: &str) -> Result<()> {
    if !is_valid_name(name) {
        bail!(
            "volume name {name:?} must be 1-{} characters of [A-Za-z0-9._-]",
            pontoon_cluster::MAX_NAME_LEN
        );
    }
    Ok(())
}

/// `VOLUME` or `VOLUME@SNAPSHOT`, checked: (volume, snapshot).
pub fn parse_spec(spec: &str) -> Result<(&str, Option<&str>)> {
    if spec.contains('@') {
        let (v, s) = parse_snap_spec(spec)?;
        return Ok((v, Some(s)));
    }
    check_volume(spec)?;
    Ok((spec, None))
}

/// The volume (and snapshot) `spec` names in `map`.
pub fn find<'a>(
    map: &'a ClusterMap,
    volume: &str,
    snap: Option<&str>,
) -> Result<(&'a VolumeRecord, Option<&'a SnapshotRecord>)> {
    let v = map
        .volume_by_name(volume)
        .ok_or_else(|| anyhow!("volume {volume} not found"))?;
    let s = match snap {
        None => None,
        Some(name) => Some(
            v.snapshot_by_name(name)
                .ok_or_else(|| anyhow!("snapshot {volume}@{name} not found"))?,
        ),
    };
    Ok((v, s))
}

/// Waits (at most [`MAP_WAIT`]) until `feed`'s map has volume `name` of
/// at least `size` bytes: a change the command just made reaches its
/// client's map through the feed's watch a moment later.
pub fn wait_for_size(feed: &MapFeed, name: &str, size: u64) -> Result<()> {
    let deadline = Instant::now() + MAP_WAIT;
    loop {
        let map = feed.current();
        if map
            .volume_by_name(name)
            .is_some_and(|v| v.size_bytes >= size)
        {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("the cluster map did not show volume {name} of {size} bytes within {MAP_WAIT:?}");
        }
        feed.wait_newer(map.epoch.0, left.min(Duration::from_millis(500)));
    }
}

/// The data path's runtime (io_uring) for a command.
pub fn data_runtime() -> Result<compio::runtime::Runtime> {
    compio::runtime::Runtime::new().context("starting io_uring (is io_uring enabled?)")
}

/// Prints a command's closing line: on standard error when its data went
/// to standard output, else on standard output.
pub fn report(data_on_stdout: bool, msg: &str) {
    if data_on_stdout {
        eprintln!("{msg}");
    } else {
        println!("{msg}");
    }
}

/// `r`, the outcome of writing `path`; on failure the partial file is
/// removed (standard output cannot be), so a failed export leaves no
/// image or diff behind that looks whole.
pub fn or_remove<T>(path: &str, r: Result<T>) -> Result<T> {
    if r.is_err() && path != "-" {
        let _ = std::fs::remove_file(path);
    }
    r
}

/// Where an export goes: a file (written sparsely, at offsets) or standard
/// output (written in order, zeros included).
pub enum Output {
    /// A regular file, truncated.
    File(File),
    /// Standard output.
    Stdout(std::io::StdoutLock<'static>),
}

impl Output {
    /// Opens `path` (`-`: standard output) for writing; an unwritable
    /// path is refused here, before anything else is done.
    pub fn open(path: &str) -> Result<Self> {
        if path == "-" {
            return Ok(Output::Stdout(std::io::stdout().lock()));
        }
        let f = File::create(path).map_err(|e| anyhow!("cannot write {path}: {e}"))?;
        Ok(Output::File(f))
    }

    /// Whether the data goes to standard output (messages then go to
    /// standard error).
    pub fn is_stdout(&self) -> bool {
        matches!(self, Output::Stdout(_))
    }
}

/// Writes an image's bytes in ascending order of offset, the gaps as
/// zeros: holes in a file, zero bytes on standard output.
pub struct ImageWriter {
    out: Output,
    /// Bytes of standard output written so far (the next offset).
    pos: u64,
}

impl ImageWriter {
    /// An image of `size` bytes on `out`.
    pub fn new(out: Output, size: u64) -> Result<Self> {
        if let Output::File(f) = &out {
            f.set_len(size).context("sizing the output file")?;
        }
        Ok(Self { out, pos: 0 })
    }

    /// Writes `data` at `offset` (never below what was written).
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        match &mut self.out {
            Output::File(f) => f
                .write_all_at(data, offset)
                .context("writing the output file")?,
            Output::Stdout(o) => {
                assert!(offset >= self.pos, "image writes ascend");
                zeros(o, offset - self.pos)?;
                o.write_all(data).context("writing standard output")?;
                self.pos = offset + data.len() as u64;
            }
        }
        Ok(())
    }

    /// Writes the zeros up to `size` (standard output) and makes the file
    /// durable.
    pub fn finish(mut self, size: u64) -> Result<()> {
        match &mut self.out {
            Output::File(f) => f.sync_all().context("syncing the output file")?,
            Output::Stdout(o) => {
                zeros(o, size - self.pos)?;
                o.flush().context("writing standard output")?;
            }
        }
        Ok(())
    }
}

fn zeros(o: &mut impl Write, mut n: u64) -> Result<()> {
    static Z: [u8; 64 << 10] = [0; 64 << 10];
    while n > 0 {
        let k = n.min(Z.len() as u64) as usize;
        o.write_all(&Z[..k]).context("writing standard output")?;
        n -= k as u64;
    }
    Ok(())
}

/// Opens `path` (`-`: standard input) for reading, with its size when it
/// is a regular file.
pub fn open_input(path: &str) -> Result<(Box<dyn Read>, Option<u64>)> {
    if path == "-" {
        return Ok((Box::new(std::io::stdin().lock()), None));
    }
    let f = File::open(Path::new(path)).map_err(|e| anyhow!("cannot read {path}: {e}"))?;
    let meta = f
        .metadata()
        .map_err(|e| anyhow!("cannot read {path}: {e}"))?;
    let size = meta.is_file().then_some(meta.len());
    Ok((Box::new(f), size))
}

/// Reads up to `buf.len()` bytes (fewer only at the end of the input).
pub fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!("reading the input: {e}")),
        }
    }
    Ok(n)
}

/// A progress bar of `total` bytes (`None`: unknown) on standard error,
/// drawn only when standard error is a terminal.
pub fn progress(what: &str, total: Option<u64>) -> ProgressBar {
    let bar = match total {
        Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let template = match total {
        Some(_) => "{msg} [{bar:40}] {bytes}/{total_bytes} ({binary_bytes_per_sec}, {eta})",
        None => "{msg} {bytes} ({binary_bytes_per_sec})",
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
