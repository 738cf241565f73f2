//! Property-based fuzzing of the parser and the analyses, and of the unpickler and the memory
//! snapshot reader: mangled traces and snapshots never panic; they parse or fail with an error
//! that names the file. All of it under a memory limit: the test process's heap may not pass
//! [`HEAP_LIMIT`] (an allocation past it aborts the run, which fails it). `PROPTEST_CASES`
//! sets the number of cases of each of the four properties (scripts/fuzz.sh runs many more).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use dgx_pixels_trace::memory::snapshot_from_bytes;
use dgx_pixels_trace::{analyze, parse_bytes, AnalyzeOptions, ParseOptions};
use proptest::prelude::*;

/// The heap of the whole test process (the properties run side by side): 512 MiB. One case
/// takes a few MiB; the hostile pickles of issue 28 took gigabytes from inputs this small.
const HEAP_LIMIT: usize = 512 << 20;

static HEAP: AtomicUsize = AtomicUsize::new(0);

struct Limited;

// SAFETY: forwards to the system allocator; refusing (null) an allocation past the limit is
// allowed by GlobalAlloc's contract and makes the run abort.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if HEAP.fetch_add(l.size(), Ordering::Relaxed) + l.size() > HEAP_LIMIT {
            HEAP.fetch_sub(l.size(), Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Limited = Limited;

/// The committed protocol 4 snapshot (segments, blocks, shared frames, history).
fn snapshot_seed() -> &'static [u8] {
    include_bytes!("fixtures/snapshot_p4.pickle")
}

/// Byte edits: (position, byte, kind) with kind 0 replace, 1 insert, 2 delete, 3 duplicate
/// the 16 bytes from the position (repeats a memo reference or an opcode run).
fn mangle_bytes(seed: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(pos, byte, kind) in edits {
        let i = pos % (b.len() + 1);
        match kind % 4 {
            0 if i < b.len() => b[i] = byte,
            1 => b.insert(i, byte),
            2 if i < b.len() => {
                b.remove(i);
            }
            3 => {
                let end = (i + 16).min(b.len());
                let dup = b[i..end].to_vec();
                b.splice(i..i, dup);
            }
            _ => {}
        }
    }
    b
}

/// A pickle opcode with a small argument, from the subset the reader takes and a few it
/// refuses.
fn opcode() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            b"]".to_vec(),
            b"}".to_vec(),
            b")".to_vec(),
            b"(".to_vec(),
            b"a".to_vec(),
            b"e".to_vec(),
            b"s".to_vec(),
            b"u".to_vec(),
            b"t".to_vec(),
            b"N".to_vec(),
            b"0".to_vec(),
            b"\x94".to_vec(),
            b"\x85".to_vec(),
            b"\x86".to_vec(),
            b"\x87".to_vec(),
            b"\x8f".to_vec(),
            b"\x90".to_vec(),
            b"\x91".to_vec(),
            b"\x88".to_vec(),
            b"K\x05".to_vec(),
            b"\x8c\x01k".to_vec(),
            b"c".to_vec(),
        ]),
        any::<u8>().prop_map(|i| vec![b'h', i % 8]),
        any::<u8>().prop_map(|i| vec![b'q', i % 8]),
        any::<u32>().prop_map(|i| {
            let mut v = vec![b'r'];
            v.extend_from_slice(&i.to_le_bytes());
            v
        }),
        any::<u32>().prop_map(|i| {
            let mut v = vec![b'j'];
            v.extend_from_slice(&(i % 64).to_le_bytes());
            v
        }),
    ]
}

fn check_snapshot(bytes: &[u8]) {
    if let Err(e) = snapshot_from_bytes(bytes, Path::new("fuzz.pickle")) {
        assert!(e.to_string().starts_with("fuzz.pickle: "), "{e}");
    }
}

fn seed() -> &'static str {
    static SEED: OnceLock<&'static str> = OnceLock::new();
    SEED.get_or_init(|| {
        let cfg = dgx_pixels_trace_synth::SynthConfig {
            ranks: 2,
            steps: 2,
            layers: 2,
            cpu_events_per_kernel: 1,
            ..Default::default()
        };
        let mut v = Vec::new();
        dgx_pixels_trace_synth::write_rank(&cfg, 1, &mut v).unwrap_or_default();
        let s = String::from_utf8(v).unwrap_or_default();
        // A small slice of the events keeps each case fast; the tail closes the document.
        let head: String = s.lines().take(40).collect::<Vec<_>>().join("\n");
        Box::leak(format!("{head}\n  ], \"distributedInfo\": {{\"rank\": 1}}\n}}").into_boxed_str())
    })
}

fn check(bytes: &[u8]) {
    let opts = ParseOptions {
        max_value_bytes: 4096,
        ..ParseOptions::default()
    };
    match parse_bytes(bytes, Path::new("fuzz.json"), &opts) {
        Ok(t) => {
            let _ = analyze(&[t], &AnalyzeOptions::default());
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz.json: "), "{e}"),
    }
}

proptest! {
    #[test]
    fn mangled_traces_never_panic(s in dgx_pixels_fuzz::mangled(seed())) {
        check(s.as_bytes());
    }

    #[test]
    fn mangled_snapshots_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..12)
    ) {
        check_snapshot(&mangle_bytes(snapshot_seed(), &edits));
    }

    #[test]
    fn opcode_soup_never_panics(ops in proptest::collection::vec(opcode(), 0..400)) {
        let body = ops.concat();
        for times in [1, 64] {
            // Repeated many times: the 1-byte opcodes' budget and the memo's bounds.
            let mut b = b"\x80\x04".to_vec();
            b.extend(body.repeat(times));
            b.push(b'.');
            check_snapshot(&b);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        check(&b);
        let mut gz = vec![0x1f, 0x8b];
        gz.extend_from_slice(&b);
        check(&gz);
    }
}
