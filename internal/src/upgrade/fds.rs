//! The handover channel's wire (SPEC section 13): length-prefixed frames ([`write_frame`],
//! [`read_frame`]) and listening sockets passed with `SCM_RIGHTS` ([`send_fds`], [`recv_fds`]).
//!
//! A frame is a 4-byte big-endian length and its bytes, read with exact reads so that a read never
//! takes a byte past the frame: on a Unix stream socket the descriptors ride on the bytes after the
//! handover frame (one marker byte per batch), and a read that swallowed a marker byte would drop its
//! descriptors. Descriptors go in batches of [`FDS_PER_MESSAGE`], below the kernel's limit of 253
//! per message (`SCM_MAX_FD`). Received descriptors are close-on-exec. Safe code throughout:
//! rustix hands received descriptors over as `OwnedFd`.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;

/// Descriptors per `sendmsg` (the kernel takes at most 253, `SCM_MAX_FD`).
pub const FDS_PER_MESSAGE: usize = 64;

/// Largest frame read: a store of a million bindings is about 100 MB of JSON; a larger length
/// prefix is a broken peer, refused before anything is allocated.
pub const MAX_FRAME: usize = 512 * 1024 * 1024;

/// The byte each batch of descriptors rides on.
const FD_MARKER: u8 = b'F';

/// Writes `payload` as one frame.
///
/// # Errors
/// The socket's write error; `InvalidInput` for a payload over [`MAX_FRAME`].
pub async fn write_frame(s: &mut UnixStream, payload: &[u8]) -> io::Result<()> {
    if payload.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "frame too large",
        ));
    }
    let len = u32::try_from(payload.len()).expect("MAX_FRAME fits in u32");
    s.write_all(&len.to_be_bytes()).await?;
    s.write_all(payload).await?;
    s.flush().await
}

/// Reads one frame.
///
/// # Errors
/// The socket's read error (`UnexpectedEof` when the peer closed); `InvalidData` for a length
/// over [`MAX_FRAME`].
pub async fn read_frame(s: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes announced (at most {MAX_FRAME})"),
        ));
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Sends `fds` in batches of [`FDS_PER_MESSAGE`], each on one marker byte.
///
/// # Errors
/// The socket's `sendmsg` error.
pub async fn send_fds(s: &UnixStream, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    for batch in fds.chunks(FDS_PER_MESSAGE) {
        let mut space =
            vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(batch.len()))];
        loop {
            s.writable().await?;
            let sent = s.try_io(Interest::WRITABLE, || {
                let mut control = SendAncillaryBuffer::new(&mut space);
                if !control.push(SendAncillaryMessage::ScmRights(batch)) {
                    return Err(io::Error::other("ancillary buffer too small"));
                }
                let iov = [io::IoSlice::new(&[FD_MARKER])];
                rustix::net::sendmsg(s, &iov, &mut control, SendFlags::NOSIGNAL)
                    .map_err(io::Error::from)
            });
            match sent {
                Ok(1) => break,
                Ok(_) => return Err(io::Error::other("descriptor batch not sent")),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Receives `n` descriptors sent by [`send_fds`].
///
/// # Errors
/// The socket's `recvmsg` error; `UnexpectedEof` when the peer closed first; `InvalidData` for a
/// batch without descriptors, a truncated one, or more than announced.
pub async fn recv_fds(s: &UnixStream, n: usize) -> io::Result<Vec<OwnedFd>> {
    let mut fds = Vec::with_capacity(n);
    let mut space =
        vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE))];
    while fds.len() < n {
        s.readable().await?;
        let got = s.try_io(Interest::READABLE, || {
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut byte = [0u8; 1];
            let mut iov = [io::IoSliceMut::new(&mut byte)];
            let msg = rustix::net::recvmsg(s, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)
                .map_err(io::Error::from)?;
            let mut batch = Vec::new();
            for m in control.drain() {
                if let RecvAncillaryMessage::ScmRights(it) = m {
                    batch.extend(it);
                }
            }
            let truncated = msg.flags.contains(rustix::net::ReturnFlags::CTRUNC);
            Ok((msg.bytes, byte[0], batch, truncated))
        });
        let (bytes, byte, batch, truncated) = match got {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if bytes == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if byte != FD_MARKER || batch.is_empty() || truncated {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a descriptor batch without descriptors, or truncated",
            ));
        }
        fds.extend(batch);
    }
    if fds.len() > n {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} descriptors received, {n} announced", fds.len()),
        ));
    }
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[tokio::test]
    async fn frames_and_descriptors_cross_in_order() {
        let (mut a, mut b) = UnixStream::pair().expect("pair");
        let listeners: Vec<std::net::TcpListener> = (0..(FDS_PER_MESSAGE + 3))
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let addrs: Vec<_> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr"))
            .collect();
        write_frame(&mut a, b"hello").await.expect("frame");
        let borrowed: Vec<BorrowedFd<'_>> = listeners.iter().map(|l| l.as_fd()).collect();
        send_fds(&a, &borrowed).await.expect("fds");
        write_frame(&mut a, b"after").await.expect("frame");
        assert_eq!(read_frame(&mut b).await.expect("read"), b"hello");
        let got = recv_fds(&b, listeners.len()).await.expect("recv");
        let got: Vec<_> = got
            .into_iter()
            .map(|fd| std::net::TcpListener::from(fd).local_addr().expect("addr"))
            .collect();
        assert_eq!(got, addrs);
        assert_eq!(read_frame(&mut b).await.expect("read"), b"after");
        drop(a);
        assert!(read_frame(&mut b).await.is_err());
    }
}
