//! A small unpickler for what `torch.cuda.memory._dump_snapshot` writes: Python's pickle
//! protocols 2–5 restricted to dicts, lists, tuples, sets, strings, bytes, ints, floats, bools and
//! None. Memo references are shared (`Rc`), so the frame lists PyTorch shares between thousands
//! of blocks cost nothing to read twice (serde-pickle 1.2 fails on such shared containers).
//! Parsing is a loop over opcodes, not recursion: deep nesting cannot overflow the stack.

use std::cell::RefCell;
use std::rc::Rc;

/// A Python value.
#[derive(Debug, Clone)]
pub enum PVal {
    /// None
    None,
    /// bool
    Bool(bool),
    /// int (up to 128 bits)
    Int(i128),
    /// float
    Float(f64),
    /// str
    Str(Rc<str>),
    /// bytes
    Bytes(Rc<[u8]>),
    /// list, tuple or set
    List(Rc<RefCell<Vec<PVal>>>),
    /// dict, in insertion order
    Dict(Rc<RefCell<Vec<(PVal, PVal)>>>),
}

impl PVal {
    /// `self[key]` for a dict with string keys.
    pub fn get(&self, key: &str) -> Option<PVal> {
        match self {
            PVal::Dict(d) => d
                .borrow()
                .iter()
                .find(|(k, _)| matches!(k, PVal::Str(s) if &**s == key))
                .map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    /// The items of a list/tuple/set (empty otherwise).
    pub fn items(&self) -> Vec<PVal> {
        match self {
            PVal::List(l) => l.borrow().clone(),
            _ => Vec::new(),
        }
    }

    /// A non-negative int as u64 (saturating), else None.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            PVal::Int(i) if *i >= 0 => Some(u64::try_from(*i).unwrap_or(u64::MAX)),
            PVal::Bool(b) => Some(u64::from(*b)),
            _ => None,
        }
    }

    /// An int as i64 (saturating), else None.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            PVal::Int(i) => Some((*i).clamp(i64::MIN as i128, i64::MAX as i128) as i64),
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
    /// A memo index far beyond the memo (a hostile file's allocation bomb).
    #[error("memo index {index} out of range")]
    MemoOutOfRange {
        /// The index.
        index: usize,
    },
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
    /// An opcode outside the subset a snapshot uses (objects, globals, reduce).
    #[error("unsupported pickle opcode 0x{op:02x} at byte {at} (a snapshot holds only dicts, lists, strings and numbers)")]
    UnsupportedOpcode {
        /// The opcode.
        op: u8,
        /// Its offset.
        at: usize,
    },
}

/// Unpickles `b`; errors say what and at which byte.
pub fn loads(b: &[u8]) -> Result<PVal, PickleError> {
    let mut pos = 0usize;
    let mut stack: Vec<PVal> = Vec::new();
    let mut marks: Vec<usize> = Vec::new();
    let mut memo: Vec<Option<PVal>> = Vec::new();
    let take = |pos: &mut usize, n: usize| -> Result<&[u8], PickleError> {
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= b.len())
            .ok_or(PickleError::Truncated {
                len: b.len(),
                need: n,
            })?;
        let s = &b[*pos..end];
        *pos = end;
        Ok(s)
    };
    let le = |s: &[u8]| s.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x));
    let put = |memo: &mut Vec<Option<PVal>>, idx: usize, v: PVal| -> Result<(), PickleError> {
        if idx > memo.len() + (1 << 20) {
            return Err(PickleError::MemoOutOfRange { index: idx });
        }
        if memo.len() <= idx {
            memo.resize(idx + 1, None);
        }
        memo[idx] = Some(v);
        Ok(())
    };
    loop {
        let at = pos;
        let op = *take(&mut pos, 1)?.first().ok_or(PickleError::Empty)?;
        let underflow = || PickleError::StackUnderflow { at };
        match op {
            0x80 => {
                take(&mut pos, 1)?;
            }
            0x95 => {
                take(&mut pos, 8)?;
            }
            b'.' => return stack.pop().ok_or_else(underflow),
            b'}' => stack.push(PVal::Dict(Rc::new(RefCell::new(Vec::new())))),
            b']' | b')' | 0x8f => stack.push(PVal::List(Rc::new(RefCell::new(Vec::new())))),
            b'(' => marks.push(stack.len()),
            b'N' => stack.push(PVal::None),
            0x88 => stack.push(PVal::Bool(true)),
            0x89 => stack.push(PVal::Bool(false)),
            b'J' => {
                let s = take(&mut pos, 4)?;
                stack.push(PVal::Int(i128::from(i32::from_le_bytes([
                    s[0], s[1], s[2], s[3],
                ]))));
            }
            b'K' => stack.push(PVal::Int(i128::from(take(&mut pos, 1)?[0]))),
            b'M' => {
                let s = take(&mut pos, 2)?;
                stack.push(PVal::Int(i128::from(u16::from_le_bytes([s[0], s[1]]))));
            }
            0x8a | 0x8b => {
                let n = if op == 0x8a {
                    take(&mut pos, 1)?[0] as usize
                } else {
                    le(take(&mut pos, 4)?) as usize
                };
                let s = take(&mut pos, n)?;
                if n > 16 {
                    // Larger than 128 bits: keep the sign, saturate.
                    let neg = s.last().is_some_and(|x| x & 0x80 != 0);
                    stack.push(PVal::Int(if neg { i128::MIN } else { i128::MAX }));
                } else {
                    let mut v: i128 = 0;
                    for (i, &x) in s.iter().enumerate() {
                        v |= i128::from(x) << (8 * i);
                    }
                    if n > 0 && n < 16 && s[n - 1] & 0x80 != 0 {
                        v -= 1i128 << (8 * n);
                    }
                    stack.push(PVal::Int(v));
                }
            }
            b'G' => {
                let s = take(&mut pos, 8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(s);
                stack.push(PVal::Float(f64::from_be_bytes(a)));
            }
            b'X' | 0x8c | 0x8d | b'C' | b'B' | 0x8e | 0x96 => {
                let n = match op {
                    0x8c | b'C' => take(&mut pos, 1)?[0] as u64,
                    b'X' | b'B' => le(take(&mut pos, 4)?),
                    _ => le(take(&mut pos, 8)?),
                };
                let n = usize::try_from(n).map_err(|_| PickleError::Length { length: n, at })?;
                let s = take(&mut pos, n)?;
                if matches!(op, b'X' | 0x8c | 0x8d) {
                    let s = String::from_utf8_lossy(s);
                    stack.push(PVal::Str(Rc::from(s.as_ref())));
                } else {
                    stack.push(PVal::Bytes(Rc::from(s)));
                }
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if stack.len() < n {
                    return Err(underflow());
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(PVal::List(Rc::new(RefCell::new(items))));
            }
            b't' | 0x91 => {
                let m = marks.pop().ok_or_else(underflow)?.min(stack.len());
                let items = stack.split_off(m);
                stack.push(PVal::List(Rc::new(RefCell::new(items))));
            }
            b'a' | b'e' | 0x90 => {
                let items = if op == b'a' {
                    vec![stack.pop().ok_or_else(underflow)?]
                } else {
                    let m = marks.pop().ok_or_else(underflow)?.min(stack.len());
                    stack.split_off(m)
                };
                match stack.last() {
                    Some(PVal::List(l)) => l.borrow_mut().extend(items),
                    _ => return Err(PickleError::AppendToNonList { at }),
                }
            }
            b's' | b'u' => {
                let items = if op == b's' {
                    if stack.len() < 2 {
                        return Err(underflow());
                    }
                    stack.split_off(stack.len() - 2)
                } else {
                    let m = marks.pop().ok_or_else(underflow)?.min(stack.len());
                    stack.split_off(m)
                };
                match stack.last() {
                    Some(PVal::Dict(d)) => {
                        let mut d = d.borrow_mut();
                        let mut it = items.into_iter();
                        while let (Some(k), Some(v)) = (it.next(), it.next()) {
                            d.push((k, v));
                        }
                    }
                    _ => return Err(PickleError::SetitemOnNonDict { at }),
                }
            }
            0x94 => {
                let v = stack.last().cloned().ok_or_else(underflow)?;
                let idx = memo.len();
                put(&mut memo, idx, v)?;
            }
            b'q' | b'r' => {
                let idx = if op == b'q' {
                    take(&mut pos, 1)?[0] as usize
                } else {
                    le(take(&mut pos, 4)?) as usize
                };
                let v = stack.last().cloned().ok_or_else(underflow)?;
                put(&mut memo, idx, v)?;
            }
            b'h' | b'j' => {
                let idx = if op == b'h' {
                    take(&mut pos, 1)?[0] as usize
                } else {
                    le(take(&mut pos, 4)?) as usize
                };
                let v = memo
                    .get(idx)
                    .cloned()
                    .flatten()
                    .ok_or(PickleError::MemoMissing { index: idx, at })?;
                stack.push(v);
            }
            other => return Err(PickleError::UnsupportedOpcode { op: other, at }),
        }
    }
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
    fn errors_say_what_and_at_which_byte() {
        let cases: [(&[u8], &str); 8] = [
            (b"", "truncated at byte 0 (needs 1 more bytes)"),
            (b".", "stack underflow at byte 0"),
            (b"Na", "append to a non-list at byte 1"),
            (b"}NNNs", "setitem on a non-dict at byte 4"),
            (b"Nh\x05", "memo 5 missing at byte 1"),
            (b"Nr\xff\xff\xff\x7f", "memo index 2147483647 out of range"),
            (b"\x80\x04K", "truncated at byte 3 (needs 1 more bytes)"),
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
