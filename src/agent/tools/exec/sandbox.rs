//! Landlock confinement of what `exec` starts, with `agent.restrict_to_workspace` (the
//! default): commands read and run only in the workspace and the system's folders (`/usr`,
//! `/etc`, `/proc`…), and write only in the workspace and the temp folders. What sits
//! beside the workspace, such as the data dir (the store, `admin.token`), and the rest of
//! the home folder (`~/.ssh`) are out of their reach, even for a command the deny list lets
//! through. A system folder that holds the workspace is left out (tests keep theirs in
//! `/tmp`, where the data dir sits beside it).
//!
//! From Linux 6.12 (Landlock ABI 6) commands also cannot signal processes outside their
//! sandbox (the gateway: `kill $PPID`) nor connect to abstract Unix sockets. Of `/run`,
//! only the resolver's folders are readable (`/etc/resolv.conf` often points there): it
//! also holds container secrets (`/run/secrets`) and the user's sockets.
//!
//! A gateway run as root starts its commands without any capability (their bounding and
//! inheritable sets are emptied), so root's `CAP_SYS_PTRACE` cannot read the gateway's
//! environment through `/proc` and `CAP_DAC_OVERRIDE` cannot pass by file permissions.
//!
//! Landlock is Linux's unprivileged sandbox (5.13 and later, when enabled). Where it is
//! missing, commands run unconfined and the gateway says so once in its log.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Folders commands may read and run programs from.
const SYSTEM: [&str; 18] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/proc",
    "/sys",
    "/dev",
    "/run/systemd/resolve",
    "/run/resolvconf",
    "/run/NetworkManager",
    "/tmp",
    "/var/tmp",
];
/// Of those, the ones commands may also write in.
const SCRATCH: [&str; 3] = ["/dev", "/tmp", "/var/tmp"];

// Access rights (linux/landlock.h), by the ABI version that brought them.
const EXECUTE: u64 = 1 << 0;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
/// ABI 1: everything from `EXECUTE` to `MAKE_SYM`.
const ABI1_ALL: u64 = (1 << 13) - 1;
/// ABI 2: `REFER` (link or rename into another folder).
const REFER: u64 = 1 << 13;
/// ABI 3: `TRUNCATE`.
const TRUNCATE: u64 = 1 << 14;
const READ_ONLY: u64 = EXECUTE | READ_FILE | READ_DIR;

/// ABI 6: the sandbox may not reach outside it through abstract Unix sockets or signals.
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;

/// `struct landlock_ruleset_attr`; kernels before ABI 6 are given only its first field.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version this kernel offers, 0 without Landlock.
pub fn abi() -> i64 {
    #[allow(unsafe_code)]
    // SAFETY: with the VERSION flag the kernel reads no attribute (null, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    v.max(0)
}

/// The rules for a command run in `workspace`, ready for [`restrict`]; `None` without
/// Landlock.
pub fn ruleset(workspace: &Path) -> std::io::Result<Option<OwnedFd>> {
    let abi = abi();
    if abi < 1 {
        return Ok(None);
    }
    let mut handled = ABI1_ALL;
    if abi >= 2 {
        handled |= REFER;
    }
    if abi >= 3 {
        handled |= TRUNCATE;
    }
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: 0,
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    let size = if abi >= 6 {
        std::mem::size_of::<RulesetAttr>()
    } else {
        std::mem::size_of::<u64>()
    };
    #[allow(unsafe_code)]
    // SAFETY: `attr` is a valid ruleset attribute at least `size` bytes long; the kernel
    // copies that much.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(unsafe_code)]
    // SAFETY: the kernel just returned this descriptor (close-on-exec) and nothing else
    // owns it.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let workspace = workspace.canonicalize()?;
    for (path, access) in allowed(&workspace, handled) {
        // Folders this system does not have are skipped.
        let Ok(dir) = std::fs::File::open(&path) else {
            continue;
        };
        let rule = PathBeneathAttr {
            allowed_access: access,
            parent_fd: dir.as_raw_fd(),
        };
        #[allow(unsafe_code)]
        // SAFETY: both descriptors are open; the kernel copies `rule`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                RULE_PATH_BENEATH,
                &rule as *const PathBeneathAttr,
                0u32,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(Some(ruleset))
}

/// The folders a command may reach and how: the workspace fully, the system's folders
/// that do not hold it read-only (the scratch ones fully).
fn allowed(workspace: &Path, all: u64) -> Vec<(PathBuf, u64)> {
    let mut rules = vec![(workspace.to_path_buf(), all)];
    for dir in SYSTEM {
        let path = Path::new(dir);
        // A symlink (`/bin` → `usr/bin`): what it points to is what must not hold it.
        let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if workspace.starts_with(&real) {
            continue;
        }
        let access = if SCRATCH.contains(&dir) {
            all
        } else {
            READ_ONLY
        };
        rules.push((path.to_path_buf(), access));
    }
    rules
}

/// In the child, between fork and exec: descriptors past stdin, stdout and stderr close at
/// exec. The gateway's own are close-on-exec already; this also catches any it inherited
/// without the flag (from whatever started it: a socket, a secrets file), which the command
/// would otherwise get. Linux 5.11 and later; a no-op before.
pub fn close_inherited() {
    #[allow(unsafe_code)]
    // SAFETY: a plain system call on integers.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
}

/// In the child, between fork and exec, as root: give up every capability, for this process
/// and what it starts (the bounding set, then the permitted, effective and inheritable
/// sets, and the ambient ones). A no-op for other users, who hold none. Only system calls,
/// as a forked child of a threaded parent may make.
pub fn drop_root_capabilities() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    #[allow(unsafe_code)]
    // SAFETY: plain system calls; `capset` reads the header and two data structs, which
    // live on this stack for the call.
    unsafe {
        if libc::geteuid() != 0 {
            return Ok(());
        }
        // Capabilities this kernel does not know answer EINVAL: past the last one.
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINVAL) {
                    break;
                }
                return Err(e);
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let none = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header as *const Header, none.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In the child, between fork and exec: confine this process (and all it starts) to
/// `ruleset`. Only system calls, as a forked child of a threaded parent may make.
pub fn restrict(ruleset: i32) -> std::io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: plain system calls on integers; `no_new_privs` is required for an
    // unprivileged process to restrict itself and only ever narrows what it may do.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_folder_that_holds_the_workspace_is_left_out() {
        let rules = allowed(Path::new("/tmp/sb/workspace"), ABI1_ALL);
        let paths: Vec<&Path> = rules.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(paths[0], Path::new("/tmp/sb/workspace"));
        assert!(!paths.contains(&Path::new("/tmp")));
        assert!(paths.contains(&Path::new("/usr")));
        // Of `/run`, only the resolver's folders (not `/run/secrets`, nor user sockets).
        assert!(!paths.contains(&Path::new("/run")));
        assert!(paths.contains(&Path::new("/run/systemd/resolve")));
        let access = |p: &str| rules.iter().find(|(q, _)| q == Path::new(p)).unwrap().1;
        assert_eq!(access("/usr"), READ_ONLY);
        assert_eq!(access("/var/tmp"), ABI1_ALL);
        let rules = allowed(Path::new("/home/pi/sb/workspace"), ABI1_ALL);
        assert!(rules.iter().any(|(p, _)| p == Path::new("/tmp")));
        assert!(!rules.iter().any(|(p, _)| p.starts_with("/home/pi/sb/data")));
    }
}
