//! Landlock confinement of what `exec` starts, with `agent.restrict_to_workspace` (the
//! default): commands read and run only in the workspace and the system's folders (`/usr`,
//! `/proc`…), and write only in the workspace and the temp folders. What sits beside the
//! workspace, such as the data dir (the store, `admin.token`), and the rest of the home
//! folder (`~/.ssh`) are out of their reach, even for a command the deny list lets through.
//! A system folder that holds the workspace is left out (tests keep theirs in `/tmp`, where
//! the data dir sits beside it).
//!
//! Of `/etc`, commands read only what every user may read: not `/etc/shadow`, the SSH host
//! keys, TLS private keys or a service's 0600 environment file (which a root gateway's
//! commands, as their owner, could read despite having no capability). Of `/dev`, only the
//! devices commands use ([`DEVICES`], `/dev/pts`, `/dev/shm`): never a disk, whose raw
//! blocks hold every file. `/dev/fd` and `/dev/std*` need no rule: they lead through
//! `/proc/self/fd` to the command's own descriptors (pipes, or files its rules allow).
//!
//! From Linux 6.12 (Landlock ABI 6) commands also cannot signal processes outside their
//! sandbox (the gateway: `kill $PPID`) nor connect to abstract Unix sockets. Of `/run`,
//! only the resolver's folders are readable (`/etc/resolv.conf` often points there): it
//! also holds container secrets (`/run/secrets`) and the user's sockets.
//!
//! Commands hold no capability, for root neither ([`drop_capabilities`]): root's
//! `CAP_DAC_OVERRIDE` would pass by every file's permissions, `CAP_SYS_PTRACE` read the
//! gateway's environment through `/proc`, and none can be regained at exec. A root gateway
//! whose workspace another user owns runs its commands as that user ([`run_as`]), who can
//! write there. Otherwise a root gateway's commands are still uid 0, the owner of root's
//! files: one within their rules (in `/tmp`, `/opt`…) is theirs to read whatever its mode,
//! and they may `chmod` root's files, which Landlock does not govern (a command could make
//! a file of `/etc` public for the next call's rules). A private mount namespace with the
//! system's folders read-only would close that; it is not done here.
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
    "/opt",
    "/nix",
    "/proc",
    "/sys",
    "/run/systemd/resolve",
    "/run/resolvconf",
    "/run/NetworkManager",
    "/run/netconfig",
    "/run/connman",
    "/tmp",
    "/var/tmp",
];
/// Of those, the ones commands may also write in.
const SCRATCH: [&str; 2] = ["/tmp", "/var/tmp"];
/// The folder of which commands read only what every user may read (see [`public`]).
const CONFIG: &str = "/etc";
/// Entries of [`CONFIG`] looked at, at most: past them, the rest is out of reach.
const CONFIG_ENTRIES: usize = 20_000;
/// Character devices commands may use, and whether they may write to them. A name that is
/// not a character device here is left out.
pub const DEVICES: [(&str, bool); 7] = [
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/full", true),
    ("/dev/tty", true),
    ("/dev/ptmx", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
];
/// The pseudo-terminals opened through `/dev/ptmx` (glibc's `openpty` opens the new one by
/// its name, so `script` and Python's `pty` need them). The user's other terminals are
/// there too: a gateway started from a terminal leaves that one within reach.
const PTS: &str = "/dev/pts";
/// Shared memory (POSIX `shm_open`, Python's multiprocessing): scratch, like `/tmp`.
const SHM: &str = "/dev/shm";

// Access rights (linux/landlock.h), by the ABI version that brought them.
const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
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
pub fn ruleset(workspace: &Path, data_dir: Option<&Path>) -> std::io::Result<Option<OwnedFd>> {
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
    let data_dir = data_dir.and_then(|d| d.canonicalize().ok());
    for (path, access) in allowed(&workspace, data_dir.as_deref(), handled) {
        // Paths this system does not have are skipped. `O_PATH`: a device is not opened
        // (`/dev/ptmx` would make a terminal), and a file its owner alone may read is named.
        let Ok(dir) = open_path(&path) else {
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

/// `path` opened as a handle (`O_PATH`), following symlinks (`/bin` → `usr/bin`).
fn open_path(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    #[allow(unsafe_code)]
    // SAFETY: `c` is a NUL-terminated path; the descriptor returned is owned by nothing else.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// What a command may reach and how: the workspace fully; the system's folders read-only
/// (the scratch ones fully); of `/etc` what every user may read; the devices it uses. A
/// system path that holds the workspace is left out, and so is one that holds the data dir
/// (`/opt/switchboard/data`: all of `/opt`, as a rule reaches everything beneath it) or
/// lies in it.
fn allowed(workspace: &Path, data_dir: Option<&Path>, all: u64) -> Vec<(PathBuf, u64)> {
    let mut rules: Vec<(PathBuf, u64)> = SYSTEM
        .iter()
        .map(|dir| {
            let access = if SCRATCH.contains(dir) {
                all
            } else {
                READ_ONLY
            };
            (PathBuf::from(dir), access)
        })
        .collect();
    let mut budget = CONFIG_ENTRIES;
    rules.extend(public(Path::new(CONFIG), &mut budget));
    rules.extend(devices(all));
    // A symlink (`/bin` → `usr/bin`): what it points to is what must not hold it.
    rules.retain(|(path, _)| {
        let real = path.canonicalize().unwrap_or_else(|_| path.clone());
        let data = data_dir.is_some_and(|d| d.starts_with(&real) || real.starts_with(d));
        if data && SYSTEM.contains(&path.to_string_lossy().as_ref()) {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(folder = %path.display(),
                    "exec: commands cannot read this system folder, as it holds the data dir (the store, admin.token); move gateway.data_dir elsewhere (e.g. /var/lib/switchboard) to give it back to them");
            });
        }
        !workspace.starts_with(&real) && !data
    });
    rules.insert(0, (workspace.to_path_buf(), all));
    rules
}

/// Rules to read what every user may read beneath `dir`: a folder all of whose contents
/// others may read is one rule; in one that holds something only its owner or group may
/// read (`/etc/shadow`, 0640 root:shadow), each other entry is a rule of its own, and
/// `dir` itself may be listed. Symlinks need none: what they lead to is checked where it
/// is.
fn public(dir: &Path, budget: &mut usize) -> Vec<(PathBuf, u64)> {
    match walk(dir, 0, budget) {
        Some(mut rules) => {
            rules.push((dir.to_path_buf(), READ_DIR));
            rules
        }
        None => vec![(dir.to_path_buf(), READ_ONLY)],
    }
}

/// `None` when others may read all beneath `dir`, else the rules for what they may.
fn walk(dir: &Path, depth: usize, budget: &mut usize) -> Option<Vec<(PathBuf, u64)>> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Some(Vec::new());
    };
    let mut rules = Vec::new();
    let mut all_public = true;
    for entry in entries.flatten() {
        if *budget == 0 || depth >= 16 {
            all_public = false;
            break;
        }
        *budget -= 1;
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            all_public = false;
            continue;
        };
        let mode = meta.permissions().mode();
        let kind = meta.file_type();
        if kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            // Others may neither list nor enter it: nothing in it is for them.
            if mode & 0o005 != 0o005 {
                all_public = false;
                continue;
            }
            match walk(&path, depth + 1, budget) {
                None => rules.push((path, READ_ONLY)),
                Some(inner) => {
                    all_public = false;
                    rules.extend(inner);
                }
            }
        } else if mode & 0o004 != 0 {
            rules.push((path, EXECUTE | READ_FILE));
        } else {
            all_public = false;
        }
    }
    if all_public { None } else { Some(rules) }
}

/// Rules for `/dev`: list it, use the [`DEVICES`] that are character devices, open
/// terminals ([`PTS`]) and share memory ([`SHM`]). No block device: `/dev/sda` or
/// `/dev/loop0` would read and write a whole disk.
fn devices(all: u64) -> Vec<(PathBuf, u64)> {
    use std::os::unix::fs::FileTypeExt;
    let read_write = (READ_FILE | WRITE_FILE | TRUNCATE) & all;
    let mut rules = vec![(PathBuf::from("/dev"), READ_DIR)];
    for (path, write) in DEVICES {
        // Followed, as the command would: a name leading to anything else gets no rule.
        if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device()) {
            let access = if write { read_write } else { READ_FILE };
            rules.push((PathBuf::from(path), access));
        }
    }
    for (dir, access) in [(PTS, read_write | READ_DIR), (SHM, all)] {
        if std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
            rules.push((PathBuf::from(dir), access));
        }
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

/// The user a root gateway's commands run as: the owner of its workspace when that is not
/// root (a workspace mounted from the host, owned by `pi`), so they can write there without
/// `CAP_DAC_OVERRIDE`, which would pass by every file's permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// [`RunAs`] for a command in `workspace`: `None` unless the gateway is root and another
/// user owns the workspace. Its group, unless that is root's (then `nogroup`, 65534).
pub fn run_as(workspace: &Path) -> Option<RunAs> {
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let meta = std::fs::metadata(workspace).ok()?;
    // Without CAP_SETUID and CAP_SETGID (a hardened container) there is no changing user.
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    let effective = u64::from_str_radix(effective.trim(), 16).ok()?;
    let setuid_setgid = (1 << 6) | (1 << 7);
    (meta.uid() != 0 && effective & setuid_setgid == setuid_setgid).then(|| RunAs {
        uid: meta.uid(),
        gid: if meta.gid() == 0 { 65534 } else { meta.gid() },
    })
}

/// In the child, between fork and exec: give up every capability, for this process and what
/// it starts, root's too (`CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH` pass by file
/// permissions, `CAP_FOWNER` changes any file's mode, `CAP_SYS_PTRACE` reads the gateway's
/// environment through `/proc` despite its being non-dumpable, `CAP_SYS_RAWIO`,
/// `CAP_SYS_ADMIN`, `CAP_MKNOD` reach devices…), from the bounding set too. Ambient
/// capabilities (systemd's `AmbientCapabilities=`) are cleared for every user. A root
/// without `CAP_SETPCAP` (a hardened container) keeps its bounding set; `no_new_privs` then
/// stops exec from raising anything past the empty permitted set. With `run_as`, the
/// process then becomes that user (and only that user's group). Only system calls, as a
/// forked child of a threaded parent may make.
pub fn drop_capabilities(run_as: Option<RunAs>) -> std::io::Result<()> {
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
    let capset = |keep: u64| -> std::io::Result<()> {
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
    // SAFETY: plain system calls on integers and `gid`, alive for the call.
    unsafe {
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
        if libc::geteuid() == 0 {
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    // EINVAL: past the last capability this kernel knows. EPERM: no
                    // CAP_SETPCAP (see above).
                    break;
                }
            }
        }
        // Groups first: changing them takes the capabilities that the user change ends.
        if let Some(RunAs { uid, gid }) = run_as {
            if libc::setgroups(1, &gid) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    // Lowering is always allowed.
    capset(0)
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

    fn access(rules: &[(PathBuf, u64)], p: &str) -> Option<u64> {
        rules.iter().find(|(q, _)| q == Path::new(p)).map(|r| r.1)
    }

    #[test]
    fn a_system_folder_that_holds_the_workspace_is_left_out() {
        let rules = allowed(Path::new("/tmp/sb/workspace"), None, ABI1_ALL);
        let paths: Vec<&Path> = rules.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(paths[0], Path::new("/tmp/sb/workspace"));
        assert!(!paths.contains(&Path::new("/tmp")));
        assert!(paths.contains(&Path::new("/usr")));
        // Of `/run`, only the resolver's folders (not `/run/secrets`, nor user sockets).
        assert!(!paths.contains(&Path::new("/run")));
        assert!(paths.contains(&Path::new("/run/systemd/resolve")));
        assert_eq!(access(&rules, "/usr"), Some(READ_ONLY));
        assert_eq!(access(&rules, "/var/tmp"), Some(ABI1_ALL));
        let rules = allowed(Path::new("/home/pi/sb/workspace"), None, ABI1_ALL);
        assert!(rules.iter().any(|(p, _)| p == Path::new("/tmp")));
        assert!(!rules.iter().any(|(p, _)| p.starts_with("/home/pi/sb/data")));
    }

    #[test]
    fn a_system_folder_that_holds_the_data_dir_is_left_out() {
        let ws = Path::new("/home/pi/sb/workspace");
        let rules = allowed(ws, Some(Path::new("/opt/sb/data")), ABI1_ALL);
        assert!(!rules.iter().any(|(p, _)| p == Path::new("/opt")));
        assert!(rules.iter().any(|(p, _)| p == Path::new("/usr")));
        // Of `/etc`, only the rules that hold or lie in it go.
        let rules = allowed(ws, Some(Path::new("/etc/sb-data")), ABI1_ALL);
        assert!(!rules.iter().any(|(p, _)| p == Path::new("/etc")));
        assert!(rules.iter().any(|(p, _)| p.starts_with("/etc/")));
        assert!(rules.iter().any(|(p, _)| p == Path::new("/usr")));
    }

    #[test]
    fn of_dev_only_the_devices_commands_use_and_never_a_disk() {
        use std::os::unix::fs::FileTypeExt;
        let rules = allowed(Path::new("/home/pi/sb/workspace"), None, ABI1_ALL);
        assert_eq!(access(&rules, "/dev"), Some(READ_DIR));
        assert_eq!(access(&rules, "/dev/null"), Some(READ_FILE | WRITE_FILE));
        assert_eq!(access(&rules, "/dev/urandom"), Some(READ_FILE));
        assert_eq!(access(&rules, "/dev/shm"), Some(ABI1_ALL));
        for (path, access) in rules.iter().filter(|(p, _)| p.starts_with("/dev")) {
            let meta = std::fs::metadata(path).unwrap();
            assert!(!meta.file_type().is_block_device(), "{path:?}");
            // A rule on a file may hold only file rights (or the kernel refuses it).
            if !meta.is_dir() {
                assert_eq!(access & !(READ_FILE | WRITE_FILE | TRUNCATE), 0, "{path:?}");
            }
        }
    }

    #[test]
    fn of_a_config_folder_only_what_every_user_may_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path();
        std::fs::create_dir_all(etc.join("open/deep")).unwrap();
        std::fs::create_dir_all(etc.join("ssh")).unwrap();
        std::fs::create_dir_all(etc.join("private")).unwrap();
        for (file, mode) in [
            ("passwd", 0o644),
            ("shadow", 0o640),
            ("open/deep/a.conf", 0o644),
            ("ssh/ssh_config", 0o644),
            ("ssh/ssh_host_ed25519_key", 0o600),
            ("private/any", 0o644),
        ] {
            std::fs::write(etc.join(file), "x").unwrap();
            std::fs::set_permissions(etc.join(file), PermissionsExt::from_mode(mode)).unwrap();
        }
        std::fs::set_permissions(etc.join("private"), PermissionsExt::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("/root/.ssh", etc.join("link")).unwrap();
        std::fs::set_permissions(etc, PermissionsExt::from_mode(0o755)).unwrap();
        let mut budget = 100;
        let mut rules = public(etc, &mut budget);
        rules.sort();
        let got: Vec<(String, u64)> = rules
            .iter()
            .map(|(p, a)| (p.strip_prefix(etc).unwrap().display().to_string(), *a))
            .collect();
        assert_eq!(
            got,
            [
                ("".into(), READ_DIR),
                ("open".into(), READ_ONLY),
                ("passwd".into(), EXECUTE | READ_FILE),
                ("ssh/ssh_config".into(), EXECUTE | READ_FILE),
            ]
        );
        // All public: one rule.
        let open = etc.join("open");
        assert_eq!(public(&open, &mut 100), [(open.clone(), READ_ONLY)]);
        // Past the budget, nothing more is reachable.
        let mut none = 0;
        assert_eq!(public(&open, &mut none), [(open, READ_DIR)]);
    }
}
