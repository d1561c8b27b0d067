//! kascade's allocator settings made at run time, read back from jemalloc.

/// `kascade frontend` has freed pages returned after a second: the setting
/// names must be jemalloc's (a misspelt one is an error, not a no-op), and
/// both the arenas to come and those already made must take it.
#[test]
fn freed_pages_are_returned_after_the_time_asked() {
    // What the harness may set would be left alone (and this test moot).
    assert!(std::env::var_os("_RJEM_MALLOC_CONF").is_none());
    // SAFETY: an `ssize_t` setting read as `isize`.
    let before: isize = unsafe { tikv_jemalloc_ctl::raw::read(b"arena.0.dirty_decay_ms\0") }
        .expect("arena 0's decay");
    assert_eq!(before, 10_000, "jemalloc's default, before");
    assert_eq!(
        kascade::test_support::return_freed_pages_after(1000).unwrap(),
        1000
    );
    let existing: isize = unsafe { tikv_jemalloc_ctl::raw::read(b"arena.0.dirty_decay_ms\0") }
        .expect("arena 0's decay");
    assert_eq!(existing, 1000, "an arena made before the call");
}
