//! Who holds the store's lock, for a process that waits for it: the lock's holder writes its pid
//! and command line into the `LOCK` file once its open has succeeded (the file holds nothing
//! else; an open that is refused, and a read-only open, write nothing to it) and empties it when
//! it lets go (`core::StoreLock`'s drop). A waiter reads it to say whom it waits for
//! ([`lock_holder`]). The record is a hint for people, never used to decide anything: the lock
//! itself is the `flock`.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// The longest command line recorded (bytes); longer ones are cut at a character boundary.
const MAX_COMMAND: usize = 200;

/// The process that holds a store's lock, as it recorded itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockHolder {
    /// Its process id.
    pub pid: u32,
    /// Its command line, arguments separated by spaces (cut at 200 bytes).
    pub command: String,
}

/// Writes this process as the holder into the lock file it holds exclusively. Best effort: a
/// failure only means a waiter cannot name the holder.
pub(crate) fn record(lock: &File) {
    // The program by its name (`oncelake put ...`), not the path it was started by.
    let mut command = std::env::args_os()
        .enumerate()
        .map(|(i, a)| match Path::new(&a).file_name() {
            Some(name) if i == 0 => name.to_string_lossy().into_owned(),
            _ => a.to_string_lossy().into_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ");
    if command.len() > MAX_COMMAND {
        let mut end = MAX_COMMAND;
        while !command.is_char_boundary(end) {
            end -= 1;
        }
        command.truncate(end);
        command.push('…');
    }
    let text = format!(
        "pid {}\n{}\n",
        std::process::id(),
        command.replace('\n', " ")
    );
    let _ = lock.set_len(0).and_then(|()| {
        let mut f = lock;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0))?;
        f.write_all(text.as_bytes())
    });
}

/// The process recorded as holding the store's lock at `store`, if a live process other than
/// this one is recorded. `None` also when nothing is recorded: a read-only holder records
/// nothing, and a holder that died without letting go (the kernel released its lock) is left
/// out where this system shows which processes live (`/proc`).
pub fn lock_holder(store: &Path) -> Option<LockHolder> {
    let text = std::fs::read_to_string(store.join(crate::layout::LOCK_FILE)).ok()?;
    let mut lines = text.lines();
    let pid: u32 = lines.next()?.strip_prefix("pid ")?.trim().parse().ok()?;
    let command = lines.next().unwrap_or("").to_string();
    if pid == std::process::id() || !alive(pid) {
        return None;
    }
    Some(LockHolder { pid, command })
}

fn alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record names this process, which `lock_holder` leaves out (it never waits for
    /// itself); another live pid is named, a dead or empty record is not.
    #[test]
    fn the_record_names_the_holder_until_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(crate::layout::LOCK_FILE);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        record(&f);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(&format!("pid {}\n", std::process::id())),
            "{text}"
        );
        assert_eq!(lock_holder(dir.path()), None, "this process is left out");
        // pid 1 lives wherever /proc exists.
        std::fs::write(&path, "pid 1\ninit\n").unwrap();
        assert_eq!(
            lock_holder(dir.path()),
            Some(LockHolder {
                pid: 1,
                command: "init".into()
            })
        );
        // A holder empties it when it lets go (`StoreLock`'s drop).
        f.set_len(0).unwrap();
        assert_eq!(lock_holder(dir.path()), None);
    }
}
