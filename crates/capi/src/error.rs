//! Errors as the C API reports them: a negative errno from the call and a
//! message in the calling thread's last-error buffer; every entry point
//! runs under [`catch_unwind`] so no panic crosses the FFI boundary.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use pontoon_client::ClientError;
use pontoon_client::locate::LocateError;
use pontoon_volume::VolumeError;

/// A failed call: the errno (positive) and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fail {
    /// The errno, returned negated.
    pub errno: i32,
    /// The message `pontoon_last_error` shows.
    pub msg: String,
}

impl Fail {
    /// A failure with `errno` and `msg`.
    pub fn new(errno: i32, msg: impl Into<String>) -> Self {
        Self {
            errno,
            msg: msg.into(),
        }
    }

    /// `-EINVAL` with `msg`.
    pub fn inval(msg: impl Into<String>) -> Self {
        Self::new(libc::EINVAL, msg)
    }
}

/// The errno for a client error (see the header's table).
pub(crate) fn client_errno(e: &ClientError) -> i32 {
    match e {
        ClientError::NotFound(_) => libc::ENOENT,
        ClientError::InvalidArgument(_) => libc::EINVAL,
        ClientError::NoSpace(_) => libc::ENOSPC,
        ClientError::Checksum(_) | ClientError::Io(_) => libc::EIO,
        ClientError::Timeout { .. } => libc::ETIMEDOUT,
        ClientError::Protocol(_) => libc::EPROTO,
        ClientError::PermissionDenied(_) => libc::EACCES,
        ClientError::Cluster(m) => cluster_errno(m),
        ClientError::ReadOnly(_) => libc::EROFS,
    }
}

/// The errno for a failure to load the cluster map: the client library
/// reports those as text only.
pub(crate) fn cluster_errno(msg: &str) -> i32 {
    if msg.contains("cannot reach etcd") {
        if msg.contains("no answer within") {
            libc::ETIMEDOUT
        } else {
            libc::EHOSTUNREACH
        }
    } else if msg.contains("invalid argument") {
        libc::EINVAL
    } else {
        libc::EIO
    }
}

impl From<ClientError> for Fail {
    fn from(e: ClientError) -> Self {
        Self::new(client_errno(&e), e.to_string())
    }
}

impl From<VolumeError> for Fail {
    fn from(e: VolumeError) -> Self {
        let errno = match &e {
            VolumeError::InvalidArgument(_) => libc::EINVAL,
            VolumeError::NoSpace(_) => libc::ENOSPC,
            VolumeError::ReadOnly => libc::EROFS,
            VolumeError::PermissionDenied(_) => libc::EACCES,
            VolumeError::Unavailable(_) => libc::ETIMEDOUT,
            VolumeError::DataLoss(_) | VolumeError::Io(_) => libc::EIO,
        };
        Self::new(errno, e.to_string())
    }
}

impl From<LocateError> for Fail {
    fn from(e: LocateError) -> Self {
        let errno = match &e {
            LocateError::NoClusterFile { .. } => libc::ENOENT,
            LocateError::Read { source, .. } | LocateError::Write { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            LocateError::Parse(_)
            | LocateError::Malformed { .. }
            | LocateError::NoEndpoint(_)
            | LocateError::NoCluster => libc::EINVAL,
        };
        Self::new(errno, e.to_string())
    }
}

impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Self {
        Self::new(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
    }
}

thread_local! {
    /// The thread's last error message, NUL-terminated (just a NUL when
    /// the last call succeeded).
    static LAST_ERROR: RefCell<Vec<u8>> = RefCell::new(vec![0]);
}

/// Forgets the thread's last error (every call starts with this).
pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut()
            && l.len() > 1
        {
            l.clear();
            l.push(0);
        }
    });
}

/// Sets the thread's last error message.
pub(crate) fn set_last_error(msg: &str) {
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.clear();
            l.extend(msg.bytes().map(|b| if b == 0 { b'?' } else { b }));
            l.push(0);
        }
    });
}

/// The thread's last error message, valid until its next call.
pub(crate) fn last_error_ptr() -> *const c_char {
    static EMPTY: &[u8] = b"\0";
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr().cast::<c_char>())
        .unwrap_or(EMPTY.as_ptr().cast())
}

/// The text of a panic's payload.
pub(crate) fn panic_text(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Values a C entry point returns: a count or 0, or a negative errno.
pub(crate) trait Ret: Copy {
    /// `-errno`.
    fn neg(errno: i32) -> Self;
}

impl Ret for i32 {
    fn neg(errno: i32) -> Self {
        -errno
    }
}

impl Ret for i64 {
    fn neg(errno: i32) -> Self {
        -i64::from(errno)
    }
}

/// Runs an entry point's body: clears the last error, catches panics
/// (`-EIO`, "internal error"), and turns a [`Fail`] into its negated errno
/// with the message recorded.
pub(crate) fn entry<R: Ret>(body: impl FnOnce() -> Result<R, Fail>) -> R {
    clear_last_error();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            set_last_error(&f.msg);
            R::neg(f.errno)
        }
        Err(p) => {
            set_last_error(&format!("internal error: {}", panic_text(&*p)));
            R::neg(libc::EIO)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: the pointer is to the thread's NUL-terminated buffer.
        unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn entry_maps_failures_and_panics_and_clears_on_success() {
        assert_eq!(
            entry::<i32>(|| Err(Fail::inval("bad thing"))),
            -libc::EINVAL
        );
        assert_eq!(last(), "bad thing");
        assert_eq!(entry::<i64>(|| Ok(4096)), 4096);
        assert_eq!(last(), "");
        assert_eq!(entry::<i32>(|| panic!("boom")), -libc::EIO);
        assert!(last().contains("boom"), "{}", last());
        set_last_error("a\0b");
        assert_eq!(last(), "a?b");
    }

    #[test]
    fn errors_map_to_the_documented_errnos() {
        let e = |c: ClientError| Fail::from(c).errno;
        assert_eq!(e(ClientError::NotFound("v".into())), libc::ENOENT);
        assert_eq!(e(ClientError::InvalidArgument("x".into())), libc::EINVAL);
        assert_eq!(e(ClientError::NoSpace("x".into())), libc::ENOSPC);
        assert_eq!(e(ClientError::Checksum("x".into())), libc::EIO);
        assert_eq!(
            e(ClientError::Timeout {
                what: "x".into(),
                last: "y".into()
            }),
            libc::ETIMEDOUT
        );
        assert_eq!(
            cluster_errno("etcd: cannot reach etcd at http://x: http://x: transport error"),
            libc::EHOSTUNREACH
        );
        assert_eq!(
            cluster_errno("cannot reach etcd at http://x: http://x: no answer within 5s"),
            libc::ETIMEDOUT
        );
        let missing = LocateError::NoClusterFile {
            path: "/x/cluster.toml".into(),
            dir: "/x".into(),
        };
        assert_eq!(Fail::from(missing).errno, libc::ENOENT);
        assert_eq!(
            Fail::from(VolumeError::DataLoss("x".into())).errno,
            libc::EIO
        );
    }
}
