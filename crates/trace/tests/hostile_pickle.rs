//! Hostile memory snapshots (issue 28, items 1 and 2): each attack is generated here, run
//! with its variants, and its heap use measured by a counting allocator (per thread, so tests
//! running side by side do not mix).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use dgx_pixels_trace::memory::snapshot_from_bytes;
use dgx_pixels_trace::pickle::{loads, loads_with, Limits, PickleError};
use dgx_pixels_trace::TraceError;

struct Counting;

thread_local! {
    static NOW: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn add(n: i64) {
    // `try_with`: the allocator runs while a thread's locals are torn down too.
    let _ = NOW.try_with(|c| {
        let v = c.get() + n;
        c.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only
// observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        add(l.size() as i64);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        add(-(l.size() as i64));
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        add(new as i64 - l.size() as i64);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Runs `f` and returns its result, the peak heap it added and the heap still held after
/// the result was dropped (0 unless something leaked).
fn measure<T>(f: impl FnOnce() -> T) -> (i64, i64) {
    let base = NOW.with(Cell::get);
    PEAK.with(|p| p.set(base));
    drop(f());
    let peak = PEAK.with(Cell::get) - base;
    let kept = NOW.with(Cell::get) - base;
    (peak, kept)
}

/// N levels of nested lists: `]` N times, then N-1 appends (2 bytes a level).
fn nested_lists(levels: usize) -> Vec<u8> {
    let mut b = b"\x80\x04".to_vec();
    b.extend(std::iter::repeat_n(b']', levels));
    b.extend(std::iter::repeat_n(b'a', levels - 1));
    b.push(b'.');
    b
}

/// N levels of dicts `{"k": {"k": ...}}` (8 bytes a level).
fn nested_dicts(levels: usize) -> Vec<u8> {
    let mut b = b"\x80\x04".to_vec();
    for _ in 0..levels {
        b.extend_from_slice(b"}X\x01\x00\x00\x00k");
    }
    b.push(b'}');
    b.extend(std::iter::repeat_n(b's', levels));
    b.push(b'.');
    b
}

/// N levels of 1-tuples (1 byte a level).
fn nested_tuples(levels: usize) -> Vec<u8> {
    let mut b = b"\x80\x04N".to_vec();
    b.extend(std::iter::repeat_n(0x85u8, levels));
    b.push(b'.');
    b
}

#[test]
fn deep_nesting_is_refused_and_dropping_never_recurses() {
    for (name, gen, bytes_per_level) in [
        ("lists", nested_lists as fn(usize) -> Vec<u8>, 2),
        ("dicts", nested_dicts, 8),
        ("tuples", nested_tuples, 1),
    ] {
        for size in [10_000, 100_000, 400_000] {
            let b = gen(size / bytes_per_level);
            // The default bounds (depth, or the values' memory first where the levels are
            // built before they nest): a clear error, on a 256 KiB stack.
            let e = std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || loads(&b).map(|_| ()).unwrap_err())
                .unwrap()
                .join()
                .unwrap();
            assert!(
                matches!(
                    e,
                    PickleError::TooDeep { .. } | PickleError::TooLarge { .. }
                ),
                "{name} {size}: {e}"
            );
        }
    }
    // Without the limit, a million levels are built and freed on a 256 KiB stack: the drop is a
    // loop (the old reader's recursive drop overflowed the stack at 100 KB).
    for (gen, levels) in [
        (nested_lists as fn(usize) -> Vec<u8>, 1_000_000),
        (nested_dicts, 200_000),
        (nested_tuples, 1_000_000),
    ] {
        let b = gen(levels);
        let (_, kept) = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || {
                let limits = Limits {
                    max_depth: u32::MAX,
                    max_bytes: u64::MAX,
                    ..Limits::default()
                };
                measure(|| loads_with(&b, &limits).unwrap())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(kept, 0, "{levels} levels freed");
    }
}

#[test]
fn a_memo_index_never_sizes_an_allocation() {
    // PUT (1-byte index), LONG_BINPUT (4-byte index) far past the memo, and MEMOIZE after a
    // far index; the old reader grew the memo to each index (154 bytes took 994 MB).
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for step in [1u32 << 20, 1 << 24, u32::MAX / 31] {
        let mut b = b"\x80\x04]".to_vec();
        for i in 1..=30u32 {
            b.push(b'r');
            b.extend_from_slice(&i.wrapping_mul(step).wrapping_sub(1).to_le_bytes());
        }
        b.extend_from_slice(b"\x94j\xff\xff\x0f\x00.");
        cases.push(b);
    }
    cases.push(b"\x80\x02]q\xffq\x00h\xff.".to_vec());
    for b in cases {
        let (peak, kept) = measure(|| loads(&b));
        assert!(peak < 64 << 10, "{} bytes peaked at {peak} bytes", b.len());
        assert_eq!(kept, 0);
    }
    // A far index is still found again (Python allows any index).
    let v = loads(b"\x80\x04K\x07r\x00\x00\x00\x40j\x00\x00\x00\x40\x86.").unwrap();
    assert_eq!(v.items()[1].as_u64(), Some(7));
}

/// A snapshot whose `k` segments all share one list of `k` blocks (`k*k` blocks to walk in
/// about `16 k` bytes).
fn shared_blocks(k: usize) -> Vec<u8> {
    let mut b = b"\x80\x02}(X\x08\x00\x00\x00segments](".to_vec();
    b.extend_from_slice(b"}(X\x06\x00\x00\x00blocks]q\x00(");
    for _ in 0..k {
        b.extend_from_slice(b"}(X\x04\x00\x00\x00sizeK\x01u");
    }
    b.extend_from_slice(b"eu");
    for _ in 1..k {
        b.extend_from_slice(b"}(X\x06\x00\x00\x00blocksh\x00u");
    }
    b.extend_from_slice(b"eu.");
    b
}

/// The same with `device_traces`: one list of `k` entries shared by `k` devices' histories.
fn shared_history(k: usize) -> Vec<u8> {
    let mut b = b"\x80\x02}(X\x0d\x00\x00\x00device_traces](]q\x00(".to_vec();
    for _ in 0..k {
        b.extend_from_slice(b"}(X\x06\x00\x00\x00actionX\x05\x00\x00\x00allocu");
    }
    b.push(b'e');
    for _ in 1..k {
        b.extend_from_slice(b"h\x00");
    }
    b.extend_from_slice(b"eu.");
    b
}

#[test]
fn shared_references_are_not_copied_and_their_walk_is_bounded() {
    for k in [1_000, 5_000, 13_000] {
        for (name, b) in [("blocks", shared_blocks(k)), ("history", shared_history(k))] {
            let started = Instant::now();
            let (peak, kept) = measure(|| {
                let e = snapshot_from_bytes(&b, Path::new("s.pickle")).unwrap_err();
                assert!(matches!(e, TraceError::OverLimit { .. }), "{name} {k}: {e}");
            });
            // The old reader copied the shared list per reference: 202 KB went past 4 GB.
            assert!(
                peak < 64 * b.len() as i64 + (1 << 20),
                "{name} {k}: {} bytes peaked at {peak}",
                b.len()
            );
            assert_eq!(kept, 0);
            assert!(started.elapsed().as_secs() < 20, "{name} {k}");
        }
    }
    // A few references (as PyTorch's shared frame lists are) are fine.
    let rep = snapshot_from_bytes(&shared_blocks(20), Path::new("s.pickle")).unwrap();
    assert_eq!(rep.devices[0].blocks, 400);
}

#[test]
fn a_value_can_never_contain_itself() {
    // Appended into itself by APPEND, APPENDS, SETITEM, SETITEMS and ADDITEMS, directly and
    // through another container.
    let cases: [&[u8]; 7] = [
        b"\x80\x04]\x94h\x00a.",
        b"\x80\x04]\x94(h\x00h\x00e.",
        b"\x80\x04}\x94X\x01\x00\x00\x00kh\x00s.",
        b"\x80\x04}\x94(X\x01\x00\x00\x00kh\x00u.",
        b"\x80\x04\x8f\x94(h\x00\x90.",
        b"\x80\x04]\x94]\x94h\x00ah\x01a.",
        b"\x80\x04]\x94h\x00\x85\x94h\x00h\x01a.",
    ];
    for b in cases {
        // The old reader built an Rc cycle: 8 files of 1 MB kept 250 MB for ever.
        let (_, kept) = measure(|| {
            let e = loads(b).unwrap_err();
            assert!(matches!(e, PickleError::Recursive { .. }), "{b:?}: {e}");
        });
        assert_eq!(kept, 0, "{b:?}");
    }
    // Sharing without a cycle stays allowed: [x, x] and {'a': x, 'b': x}.
    assert_eq!(
        loads(b"\x80\x04]\x94]\x940h\x01h\x01\x86a.").unwrap().len(),
        1
    );
}

#[test]
fn one_byte_opcodes_cannot_outgrow_the_budget() {
    // Empty lists, dicts and memoized copies: 1 to 2 bytes each, 80+ bytes of values each.
    for (op, n) in [
        (&b"]"[..], 2_000_000),
        (b"}", 1_000_000),
        (b"]\x94", 1_000_000),
    ] {
        let mut b = b"\x80\x04".to_vec();
        for _ in 0..n {
            b.extend_from_slice(op);
        }
        b.push(b'.');
        let budget = dgx_pixels_trace::pickle::default_max_bytes(b.len()) as i64;
        let (peak, kept) = measure(|| {
            let e = loads(&b).unwrap_err();
            assert!(matches!(e, PickleError::TooLarge { .. }), "{op:?}: {e}");
        });
        assert!(
            peak < 2 * budget,
            "{op:?} x {n}: peak {peak}, budget {budget}"
        );
        assert_eq!(kept, 0);
    }
}

#[test]
fn the_loop_stops_at_the_deadline_or_when_cancelled() {
    let b = nested_lists(3);
    let mut big = b"\x80\x04]".to_vec();
    for _ in 0..100_000 {
        big.extend_from_slice(b"Na");
    }
    big.push(b'.');
    assert!(loads(&b).is_ok());
    let late = Limits {
        deadline: Some(Instant::now()),
        ..Limits::default()
    };
    let e = loads_with(&big, &late).unwrap_err();
    assert!(matches!(e, PickleError::Deadline { .. }), "{e}");
    let cancel = Limits {
        cancel: Some(Arc::new(AtomicBool::new(true))),
        ..Limits::default()
    };
    let e = loads_with(&big, &cancel).unwrap_err();
    assert!(matches!(e, PickleError::Cancelled { .. }), "{e}");
    assert!(loads_with(&big, &Limits::default()).is_ok());
}
