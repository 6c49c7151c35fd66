//! Exclusive use of a data device: one OSD (or one `pontoon osd create`)
//! per device, refused at once if another process has it.
//!
//! Every device is locked with `flock(LOCK_EX | LOCK_NB)`, which another
//! Pontoon process sees (and whose holder `/proc/locks` names). A block
//! device is also opened `O_EXCL`, which the kernel refuses while the device
//! is mounted, part of a RAID or device-mapper volume, or held exclusively
//! by any other program (mkfs, another OSD); the shards' own `O_DIRECT`
//! opens are not exclusive and are unaffected. Both last as long as the
//! [`DeviceLock`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use pontoon_store::probe::{self, Contents};

/// Why a device could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another Pontoon process holds the device's lock.
    #[error("device {path} in use: another process{} has it open as an OSD", pid_text(*.pid))]
    InUse {
        /// The device.
        path: PathBuf,
        /// The holder, when `/proc/locks` names it.
        pid: Option<u32>,
    },
    /// The kernel refused an exclusive open of the block device.
    #[error(
        "device {path} in use: it is mounted, part of another volume, or held open exclusively by another program (O_EXCL: device busy)"
    )]
    Busy {
        /// The device.
        path: PathBuf,
    },
    /// The device does not exist and no size was given to create it as a file.
    #[error("device {path} does not exist (give a size to create it as a file)")]
    Missing {
        /// The device.
        path: PathBuf,
    },
    /// Another error opening, creating or locking it.
    #[error("device {path}: {what}: {source}")]
    Io {
        /// The device.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn pid_text(pid: Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

/// A data device held exclusively by this process (see the module docs).
#[derive(Debug)]
pub struct DeviceLock {
    path: PathBuf,
    /// Read-write, flock-ed.
    file: File,
    /// The `O_EXCL` open of a block device.
    _excl: Option<File>,
    block: bool,
    created: bool,
}

impl DeviceLock {
    /// Locks the device at `path`. If it does not exist and `create_size`
    /// is given, creates it first as a file of that many bytes (all blocks
    /// written, see [`pontoon_store::FileDevice::create_file`]).
    pub fn acquire(path: &Path, create_size: Option<u64>) -> Result<Self, LockError> {
        let io_err = |what, source| LockError::Io {
            path: path.to_path_buf(),
            what,
            source,
        };
        let mut created = false;
        if !path.exists() {
            let size = create_size.ok_or_else(|| LockError::Missing {
                path: path.to_path_buf(),
            })?;
            pontoon_store::FileDevice::create_file(path, size)
                .map_err(|e| io_err("creating it", e))?;
            created = true;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io_err("opening it", e))?;
        // SAFETY: flock on a descriptor this function owns.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let pid = file.metadata().ok().and_then(|m| {
                    lock_holder(
                        &std::fs::read_to_string("/proc/locks").unwrap_or_default(),
                        m.dev(),
                        m.ino(),
                    )
                });
                return Err(LockError::InUse {
                    path: path.to_path_buf(),
                    pid,
                });
            }
            return Err(io_err("locking it", e));
        }
        let block = file
            .metadata()
            .map_err(|e| io_err("reading its type", e))?
            .file_type()
            .is_block_device();
        let excl = if block {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
                .open(path)
            {
                Ok(f) => Some(f),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(LockError::Busy {
                        path: path.to_path_buf(),
                    });
                }
                Err(e) => return Err(io_err("opening it exclusively", e)),
            }
        } else {
            None
        };
        Ok(Self {
            path: path.to_path_buf(),
            file,
            _excl: excl,
            block,
            created,
        })
    }

    /// The device's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The locked device, open read-write (buffered).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether it is a block device (else a regular file).
    pub fn is_block_device(&self) -> bool {
        self.block
    }

    /// Whether [`acquire`](Self::acquire) created it as a new file.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The device's size in bytes: BLKGETSIZE64 for a block device, the
    /// length of a file.
    pub fn size(&self) -> io::Result<u64> {
        pontoon_store::device::device_size(&self.path)
    }

    /// What the device holds (see [`pontoon_store::probe`]).
    pub fn probe(&self) -> io::Result<Contents> {
        probe::probe(&self.file)
    }

    /// Zeroes the places other programs keep their signatures (before a
    /// format destroys the device's contents anyway).
    pub fn wipe_signatures(&self) -> io::Result<()> {
        probe::wipe_signatures(&self.file, self.size()?)
    }
}

/// The pid holding a `FLOCK` on the file `(dev, ino)`, from the text of
/// `/proc/locks` (lines like `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0
/// EOF`, device numbers in hex). Matched by device and inode; by inode
/// alone when exactly one flock has it (overlay filesystems report another
/// device number than `stat`).
pub fn lock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let mut by_ino = Vec::new();
    for line in locks.lines() {
        // "1:" FLOCK ADVISORY WRITE pid maj:min:ino start end; a blocked
        // waiter's line ("1: -> FLOCK ...") holds nothing.
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let Ok(pid) = f[4].parse::<u32>() else {
            continue;
        };
        let mut parts = f[5].split(':');
        let (Some(ma), Some(mi), Some(i)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(ma), Ok(mi), Ok(i)) = (
            u32::from_str_radix(ma, 16),
            u32::from_str_radix(mi, 16),
            i.parse::<u64>(),
        ) else {
            continue;
        };
        if i != ino {
            continue;
        }
        if ma == major && mi == minor {
            return Some(pid);
        }
        by_ino.push(pid);
    }
    match by_ino.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("osd.img");
        let missing = DeviceLock::acquire(&path, None).unwrap_err();
        assert!(matches!(missing, LockError::Missing { .. }), "{missing}");
        let first = DeviceLock::acquire(&path, Some(1 << 20)).unwrap();
        assert!(first.created());
        assert!(!first.is_block_device());
        assert_eq!(first.size().unwrap(), 1 << 20);
        assert_eq!(first.probe().unwrap(), Contents::Unrecognized);
        // flock conflicts between two open files, even in one process.
        let e = DeviceLock::acquire(&path, Some(1 << 20)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("in use"), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        match e {
            LockError::InUse { pid, .. } => assert_eq!(pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        drop(first);
        let again = DeviceLock::acquire(&path, None).unwrap();
        assert!(!again.created());
    }

    #[test]
    fn proc_locks_lines_are_parsed() {
        let dev = libc::makedev(0x08, 0x11);
        let locks = "1: POSIX  ADVISORY  WRITE 99 08:11:1234 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4321 08:11:1234 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 555 08:11:1234 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 77 00:2f:999 0 EOF\n";
        assert_eq!(lock_holder(locks, dev, 1234), Some(4321));
        // Another device number (an overlay): the one flock on the inode.
        assert_eq!(lock_holder(locks, libc::makedev(0, 0x30), 999), Some(77));
        assert_eq!(lock_holder(locks, dev, 5), None);
        assert_eq!(lock_holder("garbage\n\n", dev, 1234), None);
    }
}
