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
//! Commands hold no capability, but for a root gateway's [`ROOT_KEEPS`] (files in the
//! sandbox owned by another user): root's `CAP_SYS_PTRACE` cannot read the gateway's
//! environment through `/proc`, and none can be regained at exec.
//!
//! Landlock is Linux's unprivileged sandbox (5.13 and later, when enabled). Where it is
//! missing, commands run unconfined and the gateway says so once in its log.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Folders commands may read and run programs from.
const SYSTEM: [&str; 20] = [
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
    "/run/netconfig",
    "/run/connman",
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

/// Capabilities a command run by a root gateway keeps: reaching files in its sandbox that
/// another user owns (a workspace mounted from the host). `CAP_DAC_OVERRIDE`, `CAP_FOWNER`.
pub const ROOT_KEEPS: u64 = (1 << 1) | (1 << 3);

/// In the child, between fork and exec: give up capabilities, for this process and what it
/// starts. Root keeps only [`ROOT_KEEPS`]; every other (`CAP_SYS_PTRACE`, which reads the
/// gateway's environment through `/proc` despite its being non-dumpable, `CAP_SYS_ADMIN`,
/// `CAP_NET_ADMIN`…) goes, from the bounding set too. Ambient capabilities (systemd's
/// `AmbientCapabilities=`) are cleared for every user. A root without `CAP_SETPCAP` (a
/// hardened container) keeps its bounding set; `no_new_privs` then stops exec from raising
/// anything past the permitted set cut here. Only system calls, as a forked child of a
/// threaded parent may make.
pub fn drop_capabilities() -> std::io::Result<()> {
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
    let capset = |keep: u64| {
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let word = |w: u32| Data {
            effective: w,
            permitted: w,
            inheritable: 0,
        };
        let data = [word(keep as u32), word((keep >> 32) as u32)];
        #[allow(unsafe_code)]
        // SAFETY: `capset` reads the header and two data structs, alive for the call.
        let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    #[allow(unsafe_code)]
    // SAFETY: plain system calls on integers.
    let root = unsafe {
        // Older kernels have no ambient set (EINVAL): nothing to clear.
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let root = libc::geteuid() == 0;
        if root {
            for cap in 0..64 {
                if ROOT_KEEPS & (1 << cap) != 0 {
                    continue;
                }
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    // EINVAL: past the last capability this kernel knows. EPERM: no
                    // CAP_SETPCAP (see above).
                    break;
                }
            }
        }
        root
    };
    // Lowering is always allowed; keeping what this process lacks is not (EPERM).
    match capset(if root { ROOT_KEEPS } else { 0 }) {
        Err(e) if root && e.raw_os_error() == Some(libc::EPERM) => capset(0),
        r => r,
    }
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
