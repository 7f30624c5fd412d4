//! Waiting for the store's process lock: a waiter wakes when a holder lets go, not on a timer.
//!
//! A holder releases the lock by closing the lock file (the store's `StoreLock` unlocks and then
//! closes it; a process that dies has it closed by the kernel). On Linux the waiter watches the
//! lock file with inotify for `IN_CLOSE_*` *before* each attempt, so a release between a failed
//! attempt and the wait is a queued event, never a lost wakeup; each event (any close of the file
//! — spurious ones only cost one more attempt) is followed by another attempt. A slow safety net
//! (`SAFETY_NET`) covers the one release that closes late: a descriptor copy held by a child
//! between its fork and exec, where the lock is already free but the close event comes at the
//! exec. Elsewhere, or when inotify is unavailable (no watches left), the waiter polls every 20 ms
//! as before.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest a Linux waiter sleeps without an event before trying again anyway.
const SAFETY_NET: Duration = Duration::from_millis(500);
/// The polling interval where no release can be watched.
const POLL: Duration = Duration::from_millis(20);

/// What woke the waiter before the attempt that got the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The first attempt got it.
    Immediately,
    /// A close of the lock file (a holder's release).
    ByRelease,
    /// The timer (safety net, or polling without a watch).
    ByTimer,
}

/// Takes the lock on `file` (at `path`), shared or exclusive, waiting until `deadline`.
/// `Ok(None)` when the deadline passed or `stop` said to stop (asked after each wake-up that did
/// not get the lock); `waiting` is called once before the first wait. With `stop`, files created
/// or renamed into the lock file's directory wake the waiter too: what `stop` looks for (a
/// server's address file) appears there, and no timer has to find it.
pub(crate) fn acquire(
    file: &File,
    path: &Path,
    deadline: Instant,
    shared: bool,
    waiting: &dyn Fn(),
    stop: Option<&dyn Fn() -> bool>,
) -> std::io::Result<Option<Woken>> {
    let watch = Watch::new(path, stop.is_some());
    let mut woken = Woken::Immediately;
    loop {
        let got = if shared {
            file.try_lock_shared()
        } else {
            file.try_lock()
        };
        match got {
            Ok(()) => return Ok(Some(woken)),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(e),
        }
        let now = Instant::now();
        if now >= deadline || stop.is_some_and(|stop| stop()) {
            return Ok(None);
        }
        if woken == Woken::Immediately {
            waiting();
        }
        let left = deadline - now;
        woken = match &watch {
            Some(w) => w.wait(left.min(SAFETY_NET)),
            None => {
                std::thread::sleep(left.min(POLL));
                Woken::ByTimer
            }
        };
    }
}

/// Waits until no handle in this process holds the store whose lock file is `path` (in `store`)
/// any more: true once its lock is free or another process holds it, false when `deadline`
/// passed first or the lock file cannot be read. See [`super::Store::wait_closed`].
pub(crate) fn closed(store: &Path, path: &Path, deadline: Instant) -> bool {
    let Ok(file) = File::open(path) else {
        // No lock file: the store was never opened here (a store always has one once open).
        return !path.exists();
    };
    // Our own closing handle records nothing new; another process that took the store after
    // the close records itself, so the lock being held again is not a close still under way.
    let taken_by_another = || super::holder::lock_holder(store).is_some();
    match acquire(&file, path, deadline, true, &|| {}, Some(&taken_by_another)) {
        Ok(Some(_)) => {
            let _ = file.unlock();
            true
        }
        Ok(None) => taken_by_another(),
        Err(_) => false,
    }
}

#[cfg(target_os = "linux")]
use linux::Watch;

#[cfg(target_os = "linux")]
mod linux {
    use super::Woken;
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::fd::OwnedFd;
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    use std::path::Path;
    use std::time::Duration;

    /// An inotify watch for closes of the lock file.
    pub(crate) struct Watch {
        fd: OwnedFd,
    }

    impl Watch {
        /// `None` when no watch can be set up (the caller then polls). With `dir`, also files
        /// created or renamed into `path`'s directory.
        pub(crate) fn new(path: &Path, dir: bool) -> Option<Watch> {
            let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
            inotify::add_watch(
                &fd,
                path,
                WatchFlags::CLOSE_WRITE | WatchFlags::CLOSE_NOWRITE,
            )
            .ok()?;
            if dir {
                let parent = path.parent()?;
                inotify::add_watch(&fd, parent, WatchFlags::CREATE | WatchFlags::MOVED_TO).ok()?;
            }
            Some(Watch { fd })
        }

        /// Waits for a close of the file or the timeout; drains the queued events.
        pub(crate) fn wait(&self, timeout: Duration) -> Woken {
            let ts = Timespec {
                tv_sec: timeout.as_secs() as _,
                tv_nsec: timeout.subsec_nanos() as _,
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, Some(&ts)) {
                Ok(n) if n > 0 => {
                    let mut buf = [0u8; 4096];
                    // Non-blocking: read until the queue is empty (EAGAIN).
                    while matches!(rustix::io::read(&self.fd, &mut buf), Ok(n) if n > 0) {}
                    Woken::ByRelease
                }
                _ => Woken::ByTimer,
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
struct Watch;

#[cfg(not(target_os = "linux"))]
impl Watch {
    fn new(_: &Path, _: bool) -> Option<Watch> {
        None
    }
    fn wait(&self, _: Duration) -> Woken {
        Woken::ByTimer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    /// A store is closed once its last handle is dropped, on whichever thread that happens; until
    /// then `wait_closed` says it is not, and once it says so the store opens again at once.
    #[test]
    fn wait_closed_sees_a_close_on_another_thread() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("lake");
        let store = crate::Store::open(&dir).unwrap();
        let short = Duration::from_millis(50);
        assert!(!crate::Store::wait_closed(&dir, short), "open here");
        let last = store.clone();
        drop(store);
        assert!(!crate::Store::wait_closed(&dir, short), "a handle is left");
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(last);
        });
        assert!(crate::Store::wait_closed(&dir, Duration::from_secs(30)));
        closer.join().unwrap();
        let options = crate::Options {
            lock_wait: Duration::ZERO,
            ..crate::Options::default()
        };
        drop(crate::Store::open_with(&dir, options).expect("the lock was let go"));
        assert!(crate::Store::wait_closed(tmp.path().join("never"), short));
    }

    fn open(path: &Path) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    /// A thread that takes the lock at `path` (held elsewhere), `shared` or not, waiting up to an
    /// hour unless `stop` says to give up: what tells that it is about to wait, and the thread,
    /// whose answer is what the attempt got and the file it holds the lock through.
    #[cfg(target_os = "linux")]
    fn waiter(
        path: &Path,
        shared: bool,
        stop: Option<Box<dyn Fn() -> bool + Send>>,
    ) -> (
        std::sync::mpsc::Receiver<()>,
        std::thread::JoinHandle<(Option<Woken>, File)>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        let waiter = std::thread::spawn(move || {
            let f = open(&path);
            let deadline = Instant::now() + Duration::from_secs(3600);
            let got = acquire(
                &f,
                &path,
                deadline,
                shared,
                &|| tx.send(()).unwrap(),
                stop.as_deref().map(|s| s as &dyn Fn() -> bool),
            );
            (got.unwrap(), f)
        });
        (rx, waiter)
    }

    /// The waiter blocks until the holder closes the lock file, and the attempt that gets the
    /// lock follows the release event, not a timer. (With the watch disabled — the old polling
    /// — the same run reports `ByTimer`.) No timing is asserted: the deadline is an hour.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_waiter_wakes_on_the_holders_release() {
        for shared in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("LOCK");
            let holder = open(&path);
            holder.try_lock().unwrap();
            let (rx, waiter) = waiter(&path, shared, None);
            // The waiter found the lock held and is about to wait.
            rx.recv().unwrap();
            drop(holder);
            let (woken, f) = waiter.join().unwrap();
            assert_eq!(woken, Some(Woken::ByRelease), "shared {shared}");
            // It really holds the lock now.
            let other = open(&path);
            assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
            drop(f);
        }
    }

    /// A waiter with `stop` wakes when a file appears beside the lock file (a server's address
    /// file, renamed into place) and gives up at once when `stop` says so, long before its
    /// deadline; the lock is still held by the other side.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_waiter_wakes_on_a_new_file_beside_the_lock_and_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let announced = dir.path().join("serve.json");
        let holder = open(&path);
        holder.try_lock().unwrap();
        let seen = announced.clone();
        let (rx, waiter) = waiter(&path, false, Some(Box::new(move || seen.exists())));
        rx.recv().unwrap();
        let tmp = dir.path().join("serve.json.tmp");
        std::fs::write(&tmp, "{}").unwrap();
        std::fs::rename(&tmp, &announced).unwrap();
        let (got, _) = waiter.join().unwrap();
        assert_eq!(got, None, "it stopped instead of getting the lock");
        assert!(matches!(
            open(&path).try_lock(),
            Err(TryLockError::WouldBlock)
        ));
        // What woke it: the rename's event, not the safety net (without the directory watch the
        // wait below ends by its timer).
        let w = Watch::new(&path, true).unwrap();
        std::fs::write(&tmp, "{}").unwrap();
        std::fs::rename(&tmp, &announced).unwrap();
        assert_eq!(w.wait(Duration::from_secs(5)), Woken::ByRelease);
        let w = Watch::new(&path, false).unwrap();
        std::fs::write(&tmp, "{}").unwrap();
        std::fs::rename(&tmp, &announced).unwrap();
        assert_eq!(w.wait(Duration::from_millis(50)), Woken::ByTimer);
    }

    #[test]
    fn a_passed_deadline_gives_up_and_a_free_lock_is_taken_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let holder = open(&path);
        holder.try_lock().unwrap();
        let f = open(&path);
        assert_eq!(
            acquire(&f, &path, Instant::now(), false, &|| {}, None).unwrap(),
            None
        );
        drop(holder);
        assert_eq!(
            acquire(&f, &path, Instant::now(), false, &|| {}, None).unwrap(),
            Some(Woken::Immediately)
        );
    }
}
