//! The supervisor of one `exec` call: nothing a command starts outlives the call.
//!
//! The process the gateway forks for a command does not run it: it marks itself a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), forks again, and the new process runs the shell.
//! Every process the command starts stays beneath the supervisor, whatever it does: one
//! that daemonizes (`(cmd &)`, `nohup cmd &`, a double fork) or leaves the process group
//! and session (`setsid cmd`) is orphaned to the supervisor, not to init. When the shell
//! exits, or when the gateway closes the supervisor's stdin (the call timed out, its turn
//! was stopped, or the gateway itself ended), the supervisor kills everything beneath it
//! and then exits with the shell's status.
//!
//! What still escapes: a process started by something outside the tree on the command's
//! behalf (`systemd-run --user`, `at`, a D-Bus activation), and, on kernels before Landlock
//! ABI 6 (Linux 6.12), where a confined command may signal its supervisor, a command that
//! kills or stops the supervisor first: the gateway then kills the process group, which a
//! `setsid` process has left. A cgroup (`cgroup.kill`) would close both, but needs root or
//! a delegated cgroup; it is not used.
//!
//! Everything here runs in a child forked from the threaded gateway, between fork and
//! exec: only system calls, no allocation.

use std::io;

/// The supervised command is this process: `Ok(())` returns in the process that goes on
/// to exec the shell. The supervisor never returns from here.
///
/// Call it first in `pre_exec`, so the sandbox that follows confines the command (and,
/// from Landlock ABI 6, keeps it from signalling the supervisor, which stays outside).
pub fn split() -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: system calls only, on values owned here; the raw `clone` (not glibc's `fork`,
    // which runs atfork handlers and takes locks) duplicates this single-threaded child.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // SIGCHLD is blocked before the command exists, so its end cannot be missed: the
        // supervisor reads it from a signalfd.
        let mut chld: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut before);
        let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0);
        if pid < 0 {
            let e = io::Error::last_os_error();
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            return Err(e);
        }
        if pid == 0 {
            // The command: the signal mask it had, and no way to reach the supervisor's
            // control pipe (its stdin is /dev/null, as `exec` has always given).
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if null < 0 || libc::dup2(null, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(null);
            return Ok(());
        }
        supervise(pid as libc::pid_t, &chld)
    }
}

/// Wait for the shell `command` to end or for stdin to close, end every process beneath
/// this one, and exit as the shell did.
#[allow(unsafe_code)]
unsafe fn supervise(command: libc::pid_t, chld: &libc::sigset_t) -> ! {
    // SAFETY (whole function): system calls on descriptors and buffers owned here.
    unsafe {
        // Only the control pipe stays: the copies of the output pipes would keep the
        // gateway reading after the command ended, and the others are the gateway's.
        close_from(1);
        // The gateway's signal handlers (tokio's, for SIGTERM and the like) came along with
        // the fork; they write to a pipe `close_from` just closed. Default ones: a SIGTERM
        // ends the supervisor (the command, its child, goes on to be ended by the gateway).
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_DFL);
        }
        let sfd = libc::signalfd(-1, chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        let mut status = None;
        loop {
            let mut st = 0;
            loop {
                let pid = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if pid <= 0 {
                    break;
                }
                if pid == command {
                    status = Some(st);
                }
            }
            if status.is_some() {
                break;
            }
            let mut fds = [
                libc::pollfd {
                    fd: 0,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Without a signalfd (it failed), look again every 50 ms.
            let (n, timeout) = if sfd < 0 { (1, 50) } else { (2, -1) };
            if libc::poll(fds.as_mut_ptr(), n, timeout) < 0 {
                if interrupted() {
                    continue;
                }
                break;
            }
            if fds[0].revents != 0 {
                // The gateway closed the control pipe: the call is over.
                break;
            }
            if fds[1].revents != 0 {
                let mut info = [0u8; 128];
                while libc::read(sfd, info.as_mut_ptr().cast(), info.len()) > 0 {}
            }
        }
        end_all_beneath();
        match status {
            Some(st) if libc::WIFEXITED(st) => libc::_exit(libc::WEXITSTATUS(st)),
            // Killed (by a signal, by the cut-off, or the call ended first): "killed".
            _ => {
                libc::kill(libc::getpid(), libc::SIGKILL);
                libc::_exit(137)
            }
        }
    }
}

/// The last system call failed with EINTR.
fn interrupted() -> bool {
    io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// Close every descriptor from `first` on: `close_range` (Linux 5.9), else one by one up to
/// the descriptor limit.
#[allow(unsafe_code)]
unsafe fn close_from(first: u32) {
    // SAFETY (whole function): system calls on integers and a limit struct owned here.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) == 0 {
            return;
        }
        let mut lim: libc::rlimit = std::mem::zeroed();
        let last = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 20) as i32
        } else {
            1024
        };
        for fd in first as i32..last {
            libc::close(fd);
        }
    }
}

/// Kill this process's children until it has none: each one killed hands its own
/// children to this subreaper, and the next round kills them.
#[allow(unsafe_code)]
unsafe fn end_all_beneath() {
    // SAFETY (whole function): system calls on integers and a status owned here.
    unsafe {
        let me = libc::getpid();
        loop {
            kill_children(me);
            let mut st = 0;
            // Blocks until one ends; ECHILD when none is left.
            if libc::waitpid(-1, &mut st, 0) < 0 && !interrupted() {
                return;
            }
        }
    }
}

/// SIGKILL every process whose parent is `me`, found in `/proc`.
#[allow(unsafe_code)]
unsafe fn kill_children(me: libc::pid_t) {
    // SAFETY (whole function): system calls on descriptors and stack buffers owned here;
    // every read of `buf` stays within what the kernel wrote.
    unsafe {
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let n = n as usize;
            let mut at = 0;
            // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name (NUL-ended).
            while at + 19 < n {
                let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                if reclen == 0 || at + reclen > n {
                    break;
                }
                let name = &buf[at + 19..at + reclen];
                if let Some(pid) = parse_pid(name) {
                    if pid != me && parent_of(pid) == Some(me) {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
                at += reclen;
            }
        }
        libc::close(dir);
    }
}

/// The pid a `/proc` entry name stands for (digits up to the NUL).
fn parse_pid(name: &[u8]) -> Option<libc::pid_t> {
    let mut pid: libc::pid_t = 0;
    let mut digits = 0;
    for &b in name {
        match b {
            0 => break,
            b'0'..=b'9' => {
                pid = pid
                    .checked_mul(10)?
                    .checked_add((b - b'0') as libc::pid_t)?;
                digits += 1;
            }
            _ => return None,
        }
    }
    (digits > 0).then_some(pid)
}

/// The parent of `pid`, from `/proc/<pid>/stat` (`pid (comm) state ppid …`).
#[allow(unsafe_code)]
unsafe fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let mut path = *b"/proc/\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    let mut at = 6;
    let mut digits = [0u8; 12];
    let mut n = 0;
    let mut p = pid;
    loop {
        digits[n] = b'0' + (p % 10) as u8;
        n += 1;
        p /= 10;
        if p == 0 {
            break;
        }
    }
    while n > 0 {
        n -= 1;
        path[at] = digits[n];
        at += 1;
    }
    path[at..at + 5].copy_from_slice(b"/stat");
    let mut stat = [0u8; 512];
    // SAFETY: `path` is NUL-terminated (zeros past the name); `stat` is ours.
    let len = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let len = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        len
    };
    let stat = &stat[..usize::try_from(len).ok()?];
    // The name may hold anything, `)` too: the fields follow its last `)`.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let _state = fields.next()?;
    parse_pid(fields.next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_from_proc() {
        let me = std::process::id() as libc::pid_t;
        #[allow(unsafe_code)]
        // SAFETY: reads /proc only.
        let parent = unsafe { parent_of(me) };
        assert_eq!(
            parent,
            Some(std::os::unix::process::parent_id() as libc::pid_t)
        );
        assert_eq!(parse_pid(b"123\0\0"), Some(123));
        assert_eq!(parse_pid(b"self\0"), None);
    }
}
