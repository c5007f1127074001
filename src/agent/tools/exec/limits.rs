//! Resource limits of what `exec` starts, so that a command cannot take the gateway (or
//! the machine) down with it: set between fork and exec, lowered and never raised, for the
//! hard limit too (the command cannot raise them back).
//!
//! - processes: [`EXTRA_TASKS`] more than the user runs when the call starts (the kernel
//!   counts every process and thread of the user, the gateway's own among them, so a fixed
//!   number would either stop a busy user's commands or allow nothing). The kernel does not
//!   apply this limit to root: a root gateway's commands are held only by their timeout, at
//!   whose end (or the command's) the supervisor kills them all.
//! - file size: [`MAX_FILE_BYTES`] per file written (past it, the writer gets SIGXFSZ).
//! - data (heap and other private writable memory, `RLIMIT_DATA`): half the machine's memory,
//!   at least [`MIN_DATA_BYTES`], per process. Not the address space (`RLIMIT_AS`): the JVM,
//!   node and Go reserve far more address space than they use, and would not start.
//! - core dumps: none.
//!
//! And each command is the first the kernel's out-of-memory killer picks
//! (`oom_score_adj` 1000), not the gateway. None of these is configurable: `config.toml`
//! has no place for them (DESIGN §8).

use std::io;

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Processes (threads included) a command may add to what its user already runs: room for
/// `make -j`, a JVM's or Go program's threads, and the gateway's own threads coming and
/// going meanwhile; a fork bomb still stops there.
pub const EXTRA_TASKS: u64 = 1024;
/// Largest file a command may write: 4 GiB (a disk image or a video, not an endless loop).
pub const MAX_FILE_BYTES: u64 = 4 << 30;
/// Least data memory a command gets, on a machine with little: 512 MiB.
pub const MIN_DATA_BYTES: u64 = 512 << 20;

/// The limits of one command, worked out in the gateway (it reads `/proc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub tasks: u64,
    pub file_bytes: u64,
    pub data_bytes: u64,
}

impl Limits {
    /// For a command run as `uid`.
    pub fn for_user(uid: u32) -> Self {
        Limits {
            tasks: tasks_of(uid).saturating_add(EXTRA_TASKS),
            file_bytes: MAX_FILE_BYTES,
            data_bytes: (memory_bytes() / 2).max(MIN_DATA_BYTES),
        }
    }

    /// In the child, between fork and exec: apply them. Only system calls, as a forked
    /// child of a threaded parent may make; before the Landlock rules, which make `/proc`
    /// read-only.
    pub fn apply(&self) -> io::Result<()> {
        lower(Resource::Nproc, self.tasks)?;
        lower(Resource::Fsize, self.file_bytes)?;
        lower(Resource::Data, self.data_bytes)?;
        lower(Resource::Core, 0)?;
        #[allow(unsafe_code)]
        // SAFETY: open, write and close on a static path and buffer. Best effort: a kernel
        // without the file leaves the score as it was.
        unsafe {
            let fd = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                libc::write(fd, b"1000".as_ptr().cast(), 4);
                libc::close(fd);
            }
        }
        Ok(())
    }
}

/// Set `resource` to at most `value`, soft and hard (rustix: raw system calls).
fn lower(resource: Resource, value: u64) -> io::Result<()> {
    let now = getrlimit(resource);
    let v = now.maximum.map_or(value, |max| max.min(value));
    let new = Rlimit {
        current: Some(now.current.map_or(v, |cur| cur.min(v))),
        maximum: Some(v),
    };
    setrlimit(resource, new).map_err(io::Error::from)
}

/// Processes and threads of `uid` now (what `RLIMIT_NPROC` counts), from `/proc`.
fn tasks_of(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for entry in dir.flatten() {
        if !entry
            .file_name()
            .as_encoded_bytes()
            .iter()
            .all(u8::is_ascii_digit)
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        // The real uid is what the kernel counts by.
        if field("Uid:") == Some(u64::from(uid)) {
            n += field("Threads:").unwrap_or(1);
        }
    }
    n
}

/// The machine's memory, in bytes.
fn memory_bytes() -> u64 {
    #[allow(unsafe_code)]
    // SAFETY: sysinfo fills a struct owned here.
    unsafe {
        let mut info: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut info) != 0 {
            return 0;
        }
        // `totalram` is a C long: 32 bits on a 32-bit Raspberry Pi OS.
        #[allow(clippy::useless_conversion)]
        let total = u64::from(info.totalram);
        total.saturating_mul(u64::from(info.mem_unit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_limit_is_counted_from_what_the_user_runs() {
        let uid = rustix::process::getuid().as_raw();
        let limits = Limits::for_user(uid);
        // This test's own threads are among them.
        assert!(limits.tasks > EXTRA_TASKS, "{limits:?}");
        assert!(limits.data_bytes >= MIN_DATA_BYTES);
        assert_eq!(limits.file_bytes, 4 << 30);
    }
}
