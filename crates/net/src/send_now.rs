//! Sending without a loop turn: when a connection's writer task is parked
//! with nothing queued, the task that has a frame ready writes it to the
//! socket itself with one non-blocking `sendmsg`. At queue depth 1 this
//! saves, per message, the writer's wake-up, a submission and its
//! completion (an `io_uring_enter` that would otherwise return at once).
//! Whatever the socket does not take goes to the writer as before, so
//! order and back-pressure are unchanged.

use std::io::{self, IoSlice};

use compio::net::TcpStream;

/// Most pieces one immediate send takes; messages in more pieces go to
/// the writer.
pub(crate) const MAX_PARTS: usize = 8;

/// What an immediate send did with a message.
pub(crate) enum Sent {
    /// The socket took all of it.
    All,
    /// The socket took none of it (its buffer is full, or it failed: the
    /// writer meets the error).
    Nothing,
    /// The socket took part of it; this is the rest.
    Rest(Vec<u8>),
}

/// Sends the message made of `parts` (at most [`MAX_PARTS`]) as far as the
/// socket takes it now, without waiting.
pub(crate) fn send_parts(stream: &TcpStream, parts: &[&[u8]]) -> Sent {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    match send_now(stream, parts) {
        Ok(n) if n == total => Sent::All,
        Ok(0) | Err(_) => Sent::Nothing,
        Ok(n) => Sent::Rest(remainder(parts, n)),
    }
}

/// Writes as much of `parts` (at most [`MAX_PARTS`]) as the socket takes
/// now, without waiting. `Ok(0)` when it takes nothing (its buffer is
/// full); an error is the socket's and is left for the writer to meet.
fn send_now(stream: &TcpStream, parts: &[&[u8]]) -> io::Result<usize> {
    assert!(parts.len() <= MAX_PARTS);
    let mut iov = [IoSlice::new(&[]); MAX_PARTS];
    for (slot, part) in iov.iter_mut().zip(parts) {
        *slot = IoSlice::new(part);
    }
    let sock = socket2::SockRef::from(stream);
    match sock
        .send_vectored_with_flags(&iov[..parts.len()], libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    {
        Ok(n) => Ok(n),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

/// What is left of `parts` after the first `sent` bytes, as one vector
/// (a partial immediate send is rare: the remainder is copied once).
fn remainder(parts: &[&[u8]], mut sent: usize) -> Vec<u8> {
    let mut rest = Vec::new();
    for p in parts {
        if sent >= p.len() {
            sent -= p.len();
        } else {
            rest.extend_from_slice(&p[sent..]);
            sent = 0;
        }
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::remainder;

    #[test]
    fn remainder_skips_whole_and_partial_parts() {
        let parts: [&[u8]; 3] = [b"abc", b"de", b"fgh"];
        assert_eq!(remainder(&parts, 0), b"abcdefgh");
        assert_eq!(remainder(&parts, 2), b"cdefgh");
        assert_eq!(remainder(&parts, 3), b"defgh");
        assert_eq!(remainder(&parts, 6), b"gh");
        assert_eq!(remainder(&parts, 8), b"");
    }
}
