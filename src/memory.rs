//! Giving freed heap memory back to the system. glibc's allocator keeps what a burst freed
//! in its arenas (one per thread that allocated), so without this the gateway's RSS stays
//! at its peak long after the chats that caused it went quiet.

/// Return free heap pages to the operating system (glibc; a no-op with other allocators).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: `malloc_trim` has no preconditions: it takes the allocator's own locks and
    // only releases pages that hold no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}
