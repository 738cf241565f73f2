//! A small unpickler for what `torch.cuda.memory._dump_snapshot` writes: Python's pickle
//! protocols 2–5 restricted to dicts, lists, tuples, sets, strings, bytes, ints, floats, bools and
//! None. Memo references are shared (`Rc`), so the frame lists PyTorch shares between thousands
//! of blocks cost nothing to read twice (serde-pickle 1.2 fails on such shared containers).
//!
//! Hostile input is bounded (issue 28): parsing is a loop over opcodes and dropping a value is a
//! loop too, so deep nesting cannot overflow the stack; nesting is limited to [`MAX_DEPTH`]; a
//! memo index is never used to size anything (a far index goes into a map bounded by its
//! entries); a container cannot be changed once it is inside another one, so no value can
//! contain itself (an `Rc` cycle would never be freed); the memory the values take is counted
//! against [`Limits::max_bytes`]; and the loop checks a deadline and a cancel flag.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use self::vm::Vm;

mod vm;

/// Deepest nesting of containers accepted (a snapshot nests about 5 deep; Python's own
/// recursion limit stops its pickler near 1,000).
pub const MAX_DEPTH: u32 = 256;

/// A Python value: 16 bytes, containers and strings behind shared pointers.
#[derive(Debug, Clone)]
pub enum PVal {
    /// None
    None,
    /// bool
    Bool(bool),
    /// int that fits i64
    Int(i64),
    /// int above i64::MAX (saturated at u64::MAX)
    UInt(u64),
    /// float
    Float(f64),
    /// str
    Str(Rc<Box<str>>),
    /// bytes (only the length is kept: a snapshot's numbers never live in bytes)
    Bytes(u64),
    /// list, tuple or set
    List(Rc<Node>),
    /// dict, in insertion order (keys and values alternate in the node)
    Dict(Rc<Node>),
}

/// The items of a container. Dropped by a loop, not by recursion.
#[derive(Debug, Default)]
pub struct Node {
    items: RefCell<Vec<PVal>>,
    /// 1 + the deepest item's depth.
    depth: Cell<u32>,
    /// Put inside another container (or into a tuple): no longer changed, so no cycle can form.
    sealed: Cell<bool>,
}

impl Drop for Node {
    fn drop(&mut self) {
        // Children whose last reference this is are emptied into one work list, so a chain of
        // a million nested lists is freed in a loop on the heap.
        let mut work = std::mem::take(self.items.get_mut());
        while let Some(v) = work.pop() {
            if let PVal::List(rc) | PVal::Dict(rc) = v {
                if let Ok(mut node) = Rc::try_unwrap(rc) {
                    work.append(node.items.get_mut());
                }
            }
        }
    }
}

impl PVal {
    /// `self[key]` for a dict with string keys.
    pub fn get(&self, key: &str) -> Option<PVal> {
        match self {
            PVal::Dict(d) => d
                .items
                .borrow()
                .chunks_exact(2)
                .find(|kv| matches!(&kv[0], PVal::Str(s) if &***s == key))
                .map(|kv| kv[1].clone()),
            _ => None,
        }
    }

    /// How many items a list/tuple/set has (0 otherwise).
    pub fn len(&self) -> usize {
        match self {
            PVal::List(l) => l.items.borrow().len(),
            _ => 0,
        }
    }

    /// Whether [`PVal::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each item of a list/tuple/set (nothing otherwise), without copying
    /// the list; stops early when `f` returns false.
    pub fn each(&self, mut f: impl FnMut(&PVal) -> bool) {
        if let PVal::List(l) = self {
            for v in l.items.borrow().iter() {
                if !f(v) {
                    return;
                }
            }
        }
    }

    /// The items of a list/tuple/set (empty otherwise), as shared references.
    pub fn items(&self) -> Vec<PVal> {
        match self {
            PVal::List(l) => l.items.borrow().clone(),
            _ => Vec::new(),
        }
    }

    /// A non-negative int as u64 (saturating), else None.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            PVal::Int(i) => u64::try_from(*i).ok(),
            PVal::UInt(u) => Some(*u),
            PVal::Bool(b) => Some(u64::from(*b)),
            _ => None,
        }
    }

    /// An int as i64 (saturating), else None.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            PVal::Int(i) => Some(*i),
            PVal::UInt(_) => Some(i64::MAX),
            _ => None,
        }
    }

    /// A str.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            PVal::Str(s) => Some(s),
            _ => None,
        }
    }

    fn depth(&self) -> u32 {
        match self {
            PVal::List(n) | PVal::Dict(n) => n.depth.get(),
            _ => 0,
        }
    }

    fn seal(&self) {
        if let PVal::List(n) | PVal::Dict(n) = self {
            n.sealed.set(true);
        }
    }
}

/// Bounds of one [`loads_with`].
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// Bytes the values may take (as this reader stores them); 0 = [`default_max_bytes`] of
    /// the input's length.
    pub max_bytes: u64,
    /// Deepest nesting accepted; 0 = [`MAX_DEPTH`].
    pub max_depth: u32,
    /// Past this instant the loop stops ([`PickleError::Deadline`]).
    pub deadline: Option<Instant>,
    /// Once set, the loop stops ([`PickleError::Cancelled`]).
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The default budget of the values' memory for an input of `len` bytes: 24 times its size
/// plus 1 MiB. An ordinary snapshot takes about 10 times its size; every opcode is at least a
/// byte, so a hostile file reaches the bound only by building values from 1-byte opcodes.
pub fn default_max_bytes(len: usize) -> u64 {
    (len as u64).saturating_mul(24).saturating_add(1 << 20)
}

/// Why [`loads`] failed: what, and at which byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickleError {
    /// The input ends inside an opcode's argument.
    #[error("truncated at byte {len} (needs {need} more bytes)")]
    Truncated {
        /// The input's length.
        len: usize,
        /// How many bytes the argument needs.
        need: usize,
    },
    /// The input is empty.
    #[error("empty")]
    Empty,
    /// A memo reference to an index never stored.
    #[error("memo {index} missing at byte {at}")]
    MemoMissing {
        /// The index.
        index: usize,
        /// Offset of the opcode.
        at: usize,
    },
    /// An opcode needs more values (or a mark) than the stack has.
    #[error("stack underflow at byte {at}")]
    StackUnderflow {
        /// Offset of the opcode.
        at: usize,
    },
    /// A length that does not fit this machine's address space.
    #[error("length {length} at byte {at}")]
    Length {
        /// The length.
        length: u64,
        /// Offset of the opcode.
        at: usize,
    },
    /// An append whose target is not a list.
    #[error("append to a non-list at byte {at}")]
    AppendToNonList {
        /// Offset of the opcode.
        at: usize,
    },
    /// A setitem whose target is not a dict.
    #[error("setitem on a non-dict at byte {at}")]
    SetitemOnNonDict {
        /// Offset of the opcode.
        at: usize,
    },
    /// A container changed after it was put inside another (what makes a value contain
    /// itself; a snapshot never does).
    #[error("a container changed after it was shared, at byte {at} (a recursive value)")]
    Recursive {
        /// Offset of the opcode.
        at: usize,
    },
    /// Containers nested deeper than [`Limits::max_depth`].
    #[error("nested too deep at byte {at}")]
    TooDeep {
        /// Offset of the opcode.
        at: usize,
    },
    /// The values would take more memory than [`Limits::max_bytes`].
    #[error("the values take more than {limit} bytes at byte {at}")]
    TooLarge {
        /// The budget.
        limit: u64,
        /// Offset of the opcode.
        at: usize,
    },
    /// Past [`Limits::deadline`].
    #[error("deadline exceeded at byte {at}")]
    Deadline {
        /// Offset of the opcode.
        at: usize,
    },
    /// [`Limits::cancel`] was set.
    #[error("cancelled at byte {at}")]
    Cancelled {
        /// Offset of the opcode.
        at: usize,
    },
    /// An opcode outside the subset a snapshot uses (objects, globals, reduce).
    #[error("unsupported pickle opcode 0x{op:02x} at byte {at} (a snapshot holds only dicts, lists, strings and numbers)")]
    UnsupportedOpcode {
        /// The opcode.
        op: u8,
        /// Its offset.
        at: usize,
    },
}

/// Unpickles `b` with the default [`Limits`]; errors say what and at which byte.
pub fn loads(b: &[u8]) -> Result<PVal, PickleError> {
    loads_with(b, &Limits::default())
}

/// Unpickles `b` within `limits`.
pub fn loads_with(b: &[u8], limits: &Limits) -> Result<PVal, PickleError> {
    let budget = if limits.max_bytes == 0 {
        default_max_bytes(b.len())
    } else {
        limits.max_bytes
    };
    let max_depth = if limits.max_depth == 0 {
        MAX_DEPTH
    } else {
        limits.max_depth
    };
    Vm::new(b, max_depth).load(budget, limits)
}

/// A little-endian two's complement int of `s.len()` bytes, saturated to i64 / u64.
fn long(s: &[u8]) -> PVal {
    let neg = s.last().is_some_and(|x| x & 0x80 != 0);
    // Significant bytes: drop the sign extension.
    let fill = if neg { 0xff } else { 0 };
    let sig = s.iter().rposition(|&x| x != fill).map_or(0, |i| i + 1);
    if neg {
        if sig > 8 || (sig == 8 && s[7] & 0x80 == 0) {
            return PVal::Int(i64::MIN);
        }
        let mut a = [0xffu8; 8];
        a[..sig.min(s.len())].copy_from_slice(&s[..sig.min(s.len())]);
        return PVal::Int(i64::from_le_bytes(a));
    }
    if sig > 8 {
        return PVal::UInt(u64::MAX);
    }
    let mut a = [0u8; 8];
    a[..sig].copy_from_slice(&s[..sig]);
    let u = u64::from_le_bytes(a);
    i64::try_from(u).map_or(PVal::UInt(u), PVal::Int)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values() {
        // pickle.dumps({'a': [1, -2, 300, 2**70, 1.5, None, True, 'x'], 'b': (1,)}, protocol=4)
        let b: &[u8] = b"\x80\x04\x959\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffM,\x01\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@G?\xf8\x00\x00\x00\x00\x00\x00N\x88\x8c\x01x\x94e\x8c\x01b\x94K\x01\x85\x94u.";
        let v = loads(b).unwrap();
        let a = v.get("a").unwrap().items();
        assert_eq!(a[0].as_i64(), Some(1));
        assert_eq!(a[1].as_i64(), Some(-2));
        assert_eq!(a[2].as_u64(), Some(300));
        assert_eq!(a[3].as_u64(), Some(u64::MAX), "2**70 saturates");
        assert!(matches!(a[4], PVal::Float(f) if f == 1.5));
        assert!(matches!(a[5], PVal::None));
        assert_eq!(a[7].as_str(), Some("x"));
        assert_eq!(v.get("b").unwrap().items()[0].as_i64(), Some(1));
        assert!(loads(&b[..20]).is_err());
        assert!(loads(b"\x80\x04c__builtin__\neval\n").is_err());
    }

    #[test]
    fn longs_saturate_at_the_64_bit_bounds() {
        // (bytes, as_i64, as_u64): pickle.encode_long of each value.
        let cases: [(&[u8], Option<i64>, Option<u64>); 9] = [
            (b"", Some(0), Some(0)),
            (b"\xff", Some(-1), None),
            (b"\xff\x00", Some(255), Some(255)),
            (b"\x00\x80", Some(-32768), None),
            (
                b"\xff\xff\xff\xff\xff\xff\xff\x7f",
                Some(i64::MAX),
                Some(i64::MAX as u64),
            ),
            (
                b"\x00\x00\x00\x00\x00\x00\x00\x80\x00",
                Some(i64::MAX),
                Some(1 << 63),
            ),
            (b"\x00\x00\x00\x00\x00\x00\x00\x80", Some(i64::MIN), None),
            (
                b"\xff\xff\xff\xff\xff\xff\xff\x7f\xff",
                Some(i64::MIN),
                None,
            ),
            (
                b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01",
                Some(i64::MAX),
                Some(u64::MAX),
            ),
        ];
        for (s, i, u) in cases {
            let v = long(s);
            assert_eq!((v.as_i64(), v.as_u64()), (i, u), "{s:?}");
        }
    }

    #[test]
    fn errors_say_what_and_at_which_byte() {
        let cases: [(&[u8], &str); 10] = [
            (b"", "truncated at byte 0 (needs 1 more bytes)"),
            (b".", "stack underflow at byte 0"),
            (b"Na", "append to a non-list at byte 1"),
            (b"}NNNs", "setitem on a non-dict at byte 4"),
            (b"Nh\x05", "memo 5 missing at byte 1"),
            (b"Nr\xff\xff\xff\x7fj\x00\x00\x00\x00", "memo 0 missing at byte 6"),
            (b"\x80\x04K", "truncated at byte 3 (needs 1 more bytes)"),
            (
                b"]\x94h\x00a.",
                "a container changed after it was shared, at byte 4 (a recursive value)",
            ),
            (
                b"]]a]h\x00a.",
                "memo 0 missing at byte 4",
            ),
            (
                b"\x80\x04c__builtin__\neval\n",
                "unsupported pickle opcode 0x63 at byte 2 (a snapshot holds only dicts, lists, strings and numbers)",
            ),
        ];
        for (b, want) in cases {
            assert_eq!(loads(b).unwrap_err().to_string(), want, "{b:?}");
        }
        assert_eq!(
            loads(b"Na").unwrap_err(),
            PickleError::AppendToNonList { at: 1 }
        );
    }
}
