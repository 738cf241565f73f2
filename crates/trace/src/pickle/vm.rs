//! The pickle machine behind [`super::loads_with`]: its state, the opcode loop, and one small
//! method per group of opcodes.
//!
//! Separate from the value types because it is the part that reads hostile bytes: every bound
//! (the input's end, the memory budget, the deadline, the depth, the memo) is checked here.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{long, Limits, Node, PVal, PickleError};

/// Approximate heap cost of one stored value (its slot, and for a container its node).
const VALUE_BYTES: u64 = 16;
const NODE_BYTES: u64 = 64;

/// The memo: dense while indices come in order (as Python's pickler writes them), a map
/// bounded by its entries otherwise, so an index never sizes an allocation.
#[derive(Default)]
struct Memo {
    dense: Vec<PVal>,
    sparse: HashMap<u64, PVal>,
}

impl Memo {
    fn len(&self) -> u64 {
        (self.dense.len() + self.sparse.len()) as u64
    }

    fn put(&mut self, idx: u64, v: PVal) {
        match usize::try_from(idx) {
            Ok(i) if i < self.dense.len() => self.dense[i] = v,
            Ok(i) if i == self.dense.len() && self.sparse.is_empty() => self.dense.push(v),
            _ => {
                self.sparse.insert(idx, v);
            }
        }
    }

    fn get(&self, idx: u64) -> Option<&PVal> {
        usize::try_from(idx)
            .ok()
            .and_then(|i| self.dense.get(i))
            .or_else(|| self.sparse.get(&idx))
    }
}

/// Whether the loop may go on: before [`Limits::deadline`] and not [`Limits::cancel`]led.
fn check_time(limits: &Limits, at: usize) -> Result<(), PickleError> {
    if limits.deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(PickleError::Deadline { at });
    }
    if limits
        .cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
    {
        return Err(PickleError::Cancelled { at });
    }
    Ok(())
}

/// The machine's state while it reads `b`.
pub(super) struct Vm<'b> {
    b: &'b [u8],
    /// Offset of the next byte to read.
    pos: usize,
    /// Offset of the opcode being run (what errors name).
    at: usize,
    stack: Vec<PVal>,
    /// Stack lengths at each MARK.
    marks: Vec<usize>,
    memo: Memo,
    /// Bytes the values take so far, counted against the budget.
    used: u64,
    max_depth: u32,
}

impl<'b> Vm<'b> {
    pub(super) fn new(b: &'b [u8], max_depth: u32) -> Self {
        Vm {
            b,
            pos: 0,
            at: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Memo::default(),
            used: 0,
            max_depth,
        }
    }

    /// Runs the opcodes until STOP, within `budget` bytes and the deadline and cancel flag
    /// of `limits`.
    pub(super) fn load(mut self, budget: u64, limits: &Limits) -> Result<PVal, PickleError> {
        let mut ops: u32 = 0;
        loop {
            let at = self.pos;
            ops = ops.wrapping_add(1);
            if ops % 4096 == 0 {
                check_time(limits, at)?;
            }
            if self.used > budget {
                return Err(PickleError::TooLarge { limit: budget, at });
            }
            self.at = at;
            let op = *self.take(1)?.first().ok_or(PickleError::Empty)?;
            self.used += VALUE_BYTES;
            if let Some(v) = self.run(op)? {
                return Ok(v);
            }
        }
    }

    /// Runs opcode `op`; returns the result once it is STOP. Inlined into the loop: it runs
    /// once per byte or so.
    #[inline]
    fn run(&mut self, op: u8) -> Result<Option<PVal>, PickleError> {
        match op {
            // PROTO and FRAME: their arguments are skipped.
            0x80 => self.skip(1)?,
            0x95 => self.skip(8)?,
            b'.' => return self.pop().map(Some),
            b'}' => self.empty_container(true),
            b']' | 0x8f => self.empty_container(false),
            b')' => self.push_tuple(Vec::new())?,
            b'(' => self.marks.push(self.stack.len()),
            b'0' => {
                self.pop()?;
            }
            b'N' => self.stack.push(PVal::None),
            0x88 => self.stack.push(PVal::Bool(true)),
            0x89 => self.stack.push(PVal::Bool(false)),
            b'J' | b'K' | b'M' | 0x8a | 0x8b => self.int(op)?,
            b'G' => self.float()?,
            b'X' | 0x8c | 0x8d | b'C' | b'B' | 0x8e | 0x96 => self.str_or_bytes(op)?,
            0x85..=0x87 => {
                let items = self.split_top(usize::from(op - 0x84))?;
                self.push_tuple(items)?;
            }
            b't' | 0x91 => {
                let items = self.split_at_mark()?;
                self.push_tuple(items)?;
            }
            b'a' | b'e' | 0x90 => self.append(op)?,
            b's' | b'u' => self.setitems(op)?,
            0x94 | b'q' | b'r' => self.memo_put(op)?,
            b'h' | b'j' => self.memo_get(op)?,
            other => {
                return Err(PickleError::UnsupportedOpcode {
                    op: other,
                    at: self.at,
                })
            }
        }
        Ok(None)
    }

    /// The next `n` bytes of the input.
    fn take(&mut self, n: usize) -> Result<&'b [u8], PickleError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(PickleError::Truncated {
                len: self.b.len(),
                need: n,
            })?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn skip(&mut self, n: usize) -> Result<(), PickleError> {
        self.take(n).map(|_| ())
    }

    /// An unsigned little-endian int of `n` bytes.
    fn le(&mut self, n: usize) -> Result<u64, PickleError> {
        let s = self.take(n)?;
        Ok(s.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
    }

    /// A length of `n` bytes, which must fit this machine's address space.
    fn length(&mut self, n: usize) -> Result<usize, PickleError> {
        let length = self.le(n)?;
        usize::try_from(length).map_err(|_| PickleError::Length {
            length,
            at: self.at,
        })
    }

    fn underflow(&self) -> PickleError {
        PickleError::StackUnderflow { at: self.at }
    }

    fn pop(&mut self) -> Result<PVal, PickleError> {
        self.stack.pop().ok_or_else(|| self.underflow())
    }

    /// The top `n` values, taken off the stack.
    fn split_top(&mut self, n: usize) -> Result<Vec<PVal>, PickleError> {
        if self.stack.len() < n {
            return Err(self.underflow());
        }
        Ok(self.stack.split_off(self.stack.len() - n))
    }

    /// The values above the last MARK, taken off the stack with the mark.
    fn split_at_mark(&mut self) -> Result<Vec<PVal>, PickleError> {
        let m = self.marks.pop().ok_or_else(|| self.underflow())?;
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    /// EMPTY_DICT, or EMPTY_LIST / EMPTY_SET.
    fn empty_container(&mut self, dict: bool) {
        self.used += NODE_BYTES;
        let n = Rc::new(Node {
            items: RefCell::new(Vec::new()),
            depth: Cell::new(1),
            sealed: Cell::new(false),
        });
        self.stack
            .push(if dict { PVal::Dict(n) } else { PVal::List(n) });
    }

    /// A tuple (or frozenset) of `items`.
    fn push_tuple(&mut self, items: Vec<PVal>) -> Result<(), PickleError> {
        self.used += NODE_BYTES;
        items.iter().for_each(PVal::seal);
        let deepest = items.iter().map(PVal::depth).max().unwrap_or(0);
        if deepest >= self.max_depth {
            return Err(PickleError::TooDeep { at: self.at });
        }
        self.stack.push(PVal::List(Rc::new(Node {
            items: RefCell::new(items),
            depth: Cell::new(deepest.saturating_add(1)),
            sealed: Cell::new(true),
        })));
        Ok(())
    }

    /// BININT, BININT1, BININT2, LONG1 and LONG4.
    fn int(&mut self, op: u8) -> Result<(), PickleError> {
        let v = match op {
            b'J' => {
                let s = self.take(4)?;
                PVal::Int(i64::from(i32::from_le_bytes([s[0], s[1], s[2], s[3]])))
            }
            b'K' => PVal::Int(i64::from(self.take(1)?[0])),
            b'M' => {
                let s = self.take(2)?;
                PVal::Int(i64::from(u16::from_le_bytes([s[0], s[1]])))
            }
            _ => {
                let n = self.length(if op == 0x8a { 1 } else { 4 })?;
                long(self.take(n)?)
            }
        };
        self.stack.push(v);
        Ok(())
    }

    /// BINFLOAT: a big-endian f64.
    fn float(&mut self) -> Result<(), PickleError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        self.stack.push(PVal::Float(f64::from_be_bytes(a)));
        Ok(())
    }

    /// The strings (kept, lossily decoded) and the bytes (only their length), by the size of
    /// their length: 1, 4 or 8 bytes.
    fn str_or_bytes(&mut self, op: u8) -> Result<(), PickleError> {
        let n = self.length(match op {
            0x8c | b'C' => 1,
            b'X' | b'B' => 4,
            _ => 8,
        })?;
        let s = self.take(n)?;
        if matches!(op, b'X' | 0x8c | 0x8d) {
            self.used += 48 + n as u64;
            let s = String::from_utf8_lossy(s);
            self.stack.push(PVal::Str(Rc::new(Box::from(s.as_ref()))));
        } else {
            self.stack.push(PVal::Bytes(n as u64));
        }
        Ok(())
    }

    /// APPEND (one value) or APPENDS / ADDITEMS (the values above the mark).
    fn append(&mut self, op: u8) -> Result<(), PickleError> {
        let items = if op == b'a' {
            vec![self.pop()?]
        } else {
            self.split_at_mark()?
        };
        self.extend(items, false)
    }

    /// SETITEM (one pair) or SETITEMS (the pairs above the mark).
    fn setitems(&mut self, op: u8) -> Result<(), PickleError> {
        let items = if op == b's' {
            self.split_top(2)?
        } else {
            self.split_at_mark()?
        };
        self.extend(items, true)
    }

    /// Puts `items` into the container on top of the stack (a list, or a dict when `dict`).
    fn extend(&mut self, items: Vec<PVal>, dict: bool) -> Result<(), PickleError> {
        let at = self.at;
        let target = match (self.stack.last(), dict) {
            (Some(PVal::List(n)), false) | (Some(PVal::Dict(n)), true) => n,
            _ if dict => return Err(PickleError::SetitemOnNonDict { at }),
            _ => return Err(PickleError::AppendToNonList { at }),
        };
        // Seal first: a container appended into itself is then refused too.
        items.iter().for_each(PVal::seal);
        if target.sealed.get() {
            return Err(PickleError::Recursive { at });
        }
        let deepest = items.iter().map(PVal::depth).max().unwrap_or(0);
        if deepest >= self.max_depth {
            return Err(PickleError::TooDeep { at });
        }
        target
            .depth
            .set(target.depth.get().max(deepest.saturating_add(1)));
        let mut v = target.items.borrow_mut();
        if dict {
            // An odd item out (a key without value) is dropped, as before.
            let even = items.len() & !1;
            v.extend(items.into_iter().take(even));
        } else {
            v.extend(items);
        }
        Ok(())
    }

    /// MEMOIZE (at the next index), BINPUT and LONG_BINPUT: the top value into the memo.
    fn memo_put(&mut self, op: u8) -> Result<(), PickleError> {
        let idx = match op {
            0x94 => None,
            b'q' => Some(self.le(1)?),
            _ => Some(self.le(4)?),
        };
        let v = self.stack.last().cloned().ok_or_else(|| self.underflow())?;
        match idx {
            None => self.memo.put(self.memo.len(), v),
            Some(idx) => {
                // A sparse entry costs a map slot.
                self.used += 32;
                self.memo.put(idx, v);
            }
        }
        Ok(())
    }

    /// BINGET and LONG_BINGET.
    fn memo_get(&mut self, op: u8) -> Result<(), PickleError> {
        let idx = self.le(if op == b'h' { 1 } else { 4 })?;
        // A shared reference: the value is not copied, only its pointer.
        let v = self
            .memo
            .get(idx)
            .cloned()
            .ok_or(PickleError::MemoMissing {
                index: idx as usize,
                at: self.at,
            })?;
        self.stack.push(v);
        Ok(())
    }
}
