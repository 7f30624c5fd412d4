//! The connections: a Unix socket (polled before each read) or loopback TCP, with timeouts.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Whether `pid` is a live process (signal 0: delivered nowhere, only checked).
pub(crate) fn process_running(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only reports whether the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A Unix socket connection, within `timeout` when there is one: `connect` waits while the
/// server's queue of connections not yet accepted is full (a hung server's fills), for ever
/// unless the socket has a send timeout, which std's `UnixStream::connect` cannot set first.
pub(crate) fn unix_connect(
    path: &Path,
    timeout: Option<Duration>,
) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let Some(t) = timeout else {
        return std::os::unix::net::UnixStream::connect(path);
    };
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        // What std says of such a path; its own connect reports it the same way.
        return std::os::unix::net::UnixStream::connect(path);
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments; the descriptor is owned right below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A zero send timeout means none at all: at least a millisecond.
    let t = t.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(t.subsec_micros() as i32),
    };
    // SAFETY: a timeval of the size given, read during the call only.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a sockaddr_un whose path is NUL-terminated within `len` bytes.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        // A full queue past the send timeout is EAGAIN: say what it is.
        return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the server accepted no connection within {t:?}"),
            )
        } else {
            e
        });
    }
    Ok(std::os::unix::net::UnixStream::from(fd))
}

/// A TCP connection, within `timeout` when there is one (a listener whose queue is full
/// otherwise keeps `connect` waiting for minutes).
pub(crate) fn tcp_connect(
    address: &str,
    timeout: Option<Duration>,
) -> std::io::Result<std::net::TcpStream> {
    use std::net::ToSocketAddrs;
    let Some(t) = timeout else {
        return std::net::TcpStream::connect(address);
    };
    let mut last = None;
    for a in address.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&a, t) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{address} names no address"),
        )
    }))
}

/// A connection of either kind.
pub(crate) trait Conn: Read + Write + Send {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()>;
    /// The connection is open and nothing is waiting to be read on it (what an idle
    /// connection the server still keeps looks like).
    fn idle_open(&self) -> bool;
}

/// Peeks without blocking (one `recv(MSG_PEEK | MSG_DONTWAIT)`, where switching the socket to
/// non-blocking and back took two more system calls per request): `EAGAIN` is the only answer
/// of a healthy idle connection; end of stream is a connection the server closed, and a byte
/// is one nobody asked for (the connection is dropped either way).
pub(crate) fn idle_open_fd(fd: std::os::fd::RawFd) -> bool {
    let mut b = 0u8;
    // SAFETY: `fd` is the open socket of a stream we borrow for the call; one byte into `b`.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && {
        let e = std::io::Error::last_os_error().kind();
        e == std::io::ErrorKind::WouldBlock
    }
}

impl Conn for std::os::unix::net::UnixStream {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
    fn idle_open(&self) -> bool {
        idle_open_fd(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

/// A Unix stream whose reads wait in `poll(POLLIN)` rather than in a blocking `recv`.
///
/// Why: when the server reads our request, the kernel frees its buffer and signals "writable"
/// on our socket (`unix_write_space`), which wakes a thread blocked in `recv` on it whatever it
/// waits for — a wake-up and a context switch for nothing on every request, while the answer is
/// still being made. A `poll` for readability is woken only by data (BENCHMARKS.md, "Server").
pub(crate) struct PollFirst {
    pub(crate) stream: std::os::unix::net::UnixStream,
    /// The read timeout, kept here for `poll` (the socket's own bounds the `recv` after it).
    pub(crate) timeout: std::cell::Cell<Option<Duration>>,
}

impl PollFirst {
    pub(crate) fn new(stream: std::os::unix::net::UnixStream) -> PollFirst {
        PollFirst {
            stream,
            timeout: std::cell::Cell::new(None),
        }
    }

    /// Waits until the socket is readable (data, end of stream or an error), or the timeout.
    fn wait_readable(&self) -> std::io::Result<()> {
        let ms = match self.timeout.get() {
            None => -1,
            Some(t) => libc::c_int::try_from(t.as_millis().max(1)).unwrap_or(libc::c_int::MAX),
        };
        let mut fd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.stream),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one pollfd, ours, for the duration of the call.
            let n = unsafe { libc::poll(&mut fd, 1, ms) };
            if n > 0 {
                return Ok(());
            }
            if n == 0 {
                // What the socket's own timeout gives a blocking `recv`.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "timed out waiting for the server's answer",
                ));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Read for PollFirst {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.wait_readable()?;
        self.stream.read(buf)
    }
}

impl Write for PollFirst {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.stream.write_vectored(bufs)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

impl Conn for PollFirst {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.stream.set_timeouts(t)?;
        self.timeout.set(t);
        Ok(())
    }
    fn idle_open(&self) -> bool {
        self.stream.idle_open()
    }
}

impl Conn for std::net::TcpStream {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
    fn idle_open(&self) -> bool {
        idle_open_fd(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

impl Conn for Box<dyn Conn> {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        (**self).set_timeouts(t)
    }
    fn idle_open(&self) -> bool {
        (**self).idle_open()
    }
}
