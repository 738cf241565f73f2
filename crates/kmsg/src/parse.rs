//! Parsing `/dev/kmsg` records and recognising the GPU messages in them, without allocating.
//!
//! A record is `PRIO,SEQ,TIMESTAMP_US,FLAGS[,...];MESSAGE` on one line; the kernel may follow it
//! with continuation lines that start with a space (`SUBSYSTEM=pci`, `DEVICE=+pci:...`), which
//! name the device but never carry an XID. Messages recognised (formats of NVIDIA's drivers seen
//! in the field; see docs/kmsg.md):
//!
//! - `NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`,
//!   with or without `pid=`/`name=`, with `pid='<unknown>'`, with a MIG part
//!   (`(PCI:0000:4b:00 GPU-I:05)` and similar) and in the old form without `PCI:`
//!   (`NVRM: Xid (0000:03:00): 14, Channel 00000001`);
//! - `nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 60 LTSSM Fault Up`
//!   (NVSwitch errors: switches, not GPUs);
//! - `NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.` (and `NVRM: GPU at PCI:0000:3b:00:
//!   GPU has fallen off the bus.`), a lost GPU reported without an XID line of its own: the
//!   whole message in exactly one of these two forms, nothing before or after.
//!
//! Every rule is anchored at the start of the message, and takes the address from where the
//! driver puts it (right after `Xid (`, `SXid (` or `NVRM: GPU `): driver messages that quote
//! user text (the client's version string in `NVRM: API mismatch: the client has the version
//! ...`, a process name after `name=`, a path) carry it after their own fixed words, so it can
//! neither start a message nor supply its address.

/// Longest record accepted, header included. The kernel caps a `/dev/kmsg` record at 8 KiB
/// (`CONSOLE_EXT_LOG_MAX`); a longer line is not a kernel record and is rejected whole.
pub const MAX_RECORD_BYTES: usize = 8192;
/// XID and SXid codes at or above this are not codes (NVIDIA's go up to a few hundred for XIDs
/// and 5 digits for SXids): such a line is malformed, so a garbled line cannot create series.
pub const MAX_XID: u32 = 10_000;
/// SXid codes are 5 digits (`12028`, `20034`): the bound for them.
pub const MAX_SXID: u32 = 100_000;

/// Why a line is not a usable record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Longer than [`MAX_RECORD_BYTES`].
    TooLong,
    /// No `PRIO,SEQ,TIMESTAMP,FLAGS;` header, or one that does not parse.
    Header,
    /// A GPU message (`NVRM: Xid`, `SXid`) whose address or code does not parse or is out of
    /// range.
    Message,
}

/// A record's header and message; the message borrows the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The syslog priority field: `facility * 8 + level`.
    pub priority: u64,
    /// Sequence number: grows by one per record within a boot.
    pub seq: u64,
    /// Microseconds since boot (the kernel's monotonic clock) when the record was logged.
    pub timestamp_us: u64,
    /// The message, bytes as the kernel escaped them (non-printable bytes as `\xNN`).
    pub message: &'a [u8],
}

/// A GPU's PCI address: the type is the metrics crate's, shared with the device view that
/// parses `dgx_pixels_gpu_info`'s `pci_bus_id` once per generation.
pub use dgx_pixels_metrics::device::PciAddress;

/// What a GPU-related message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `NVRM: Xid (PCI:...): CODE, ...`: an XID on the GPU at `pci`.
    Xid {
        /// The GPU.
        pci: PciAddress,
        /// The XID code, below [`MAX_XID`].
        code: u32,
    },
    /// `SXid (PCI:...): CODE, ...`: an NVSwitch error on the switch at `pci`.
    SXid {
        /// The switch, with its function.
        pci: PciAddress,
        /// The PCI function of the switch.
        function: u8,
        /// The SXid code, below [`MAX_SXID`].
        code: u32,
    },
    /// `NVRM: GPU ...: GPU has fallen off the bus.` without an XID.
    FallenOffBus {
        /// The GPU.
        pci: PciAddress,
    },
}

/// Parses the first line of a record (without its newline).
pub fn parse_record(line: &[u8]) -> Result<Record<'_>, Malformed> {
    if line.len() > MAX_RECORD_BYTES {
        return Err(Malformed::TooLong);
    }
    // The header is short; a `;` far into the line is in the message of a line without one.
    let head_end = line
        .iter()
        .take(96)
        .position(|&b| b == b';')
        .ok_or(Malformed::Header)?;
    let mut fields = line[..head_end].split(|&b| b == b',');
    let priority = fields.next().and_then(number).ok_or(Malformed::Header)?;
    let seq = fields.next().and_then(number).ok_or(Malformed::Header)?;
    let timestamp_us = fields.next().and_then(number).ok_or(Malformed::Header)?;
    // Flags: `-`, `c` or `+` in practice; newer kernels may add fields after them.
    fields
        .next()
        .filter(|f| !f.is_empty())
        .ok_or(Malformed::Header)?;
    Ok(Record {
        priority,
        seq,
        timestamp_us,
        message: &line[head_end + 1..],
    })
}

impl Record<'_> {
    /// Whether the kernel itself logged the record (facility 0, `LOG_KERN`). A process writing
    /// to `/dev/kmsg` cannot log at facility 0: the kernel gives such records `LOG_USER` (1) or
    /// the facility the writer names, never 0. So only these can be the driver's.
    pub fn is_kernel(&self) -> bool {
        self.priority < 8
    }
}

/// Decimal digits only (at most 19, so it cannot overflow a u64).
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// The NVIDIA driver's XID prefix: the driver starts the message with it.
const XID_PREFIX: &[u8] = b"NVRM: Xid (";
/// The NVSwitch driver's prefix: `nvidia-nvswitchN: SXid (`.
const NVSWITCH_PREFIX: &[u8] = b"nvidia-nvswitch";
const SXID_AFTER_INSTANCE: &[u8] = b": SXid (";
/// The driver's lost-GPU message: `NVRM: GPU ` then the address in one of two forms, then
/// [`FALLEN_TEXT`] and nothing else.
const GPU_PREFIX: &[u8] = b"NVRM: GPU ";
/// What follows the address in the lost-GPU message, to the end of the message.
const FALLEN_TEXT: &[u8] = b": GPU has fallen off the bus.";
/// Longest MIG part between an XID line's address and its `)`: ` GPU-I:05 GPU-CI:01` and
/// the like are far shorter.
const MAX_MIG_PART: usize = 32;

/// What `message` says about a GPU or switch: `Ok(None)` for the other messages of the kernel
/// log (almost all of them), an error for a GPU message that does not parse.
///
/// Only the drivers' own messages count: each is recognised by the prefix the driver starts
/// it with (`NVRM: Xid (`, `nvidia-nvswitchN: SXid (`, `NVRM: `), never by text further in,
/// which may quote user input (a mount option, a file name). Callers also check that the
/// record is the kernel's ([`Record::is_kernel`]).
pub fn classify(message: &[u8]) -> Result<Option<Event>, Malformed> {
    if let Some(rest) = message.strip_prefix(XID_PREFIX) {
        let (pci, rest) = paren_address(rest).ok_or(Malformed::Message)?;
        let code = code_after(rest, MAX_XID).ok_or(Malformed::Message)?;
        return Ok(Some(Event::Xid { pci: pci.0, code }));
    }
    if let Some(rest) = message.strip_prefix(NVSWITCH_PREFIX) {
        let digits = rest
            .iter()
            .take(4)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > 0 {
            if let Some(rest) = rest[digits..].strip_prefix(SXID_AFTER_INSTANCE) {
                let (pci, rest) = paren_address(rest).ok_or(Malformed::Message)?;
                let code = code_after(rest, MAX_SXID).ok_or(Malformed::Message)?;
                return Ok(Some(Event::SXid {
                    pci: pci.0,
                    function: pci.1,
                    code,
                }));
            }
        }
        return Ok(None);
    }
    if let Some(rest) = message.strip_prefix(GPU_PREFIX) {
        if let Some(pci) = fallen_off_bus(rest) {
            return Ok(Some(Event::FallenOffBus { pci }));
        }
        // The driver's words without an address where the driver puts one: counted as
        // malformed, never an event.
        let said = message.strip_suffix(b" ").unwrap_or(message);
        if said.ends_with(&FALLEN_TEXT[2..]) {
            return Err(Malformed::Message);
        }
    }
    Ok(None)
}

/// `PCI:0000:1b:00 GPU-I:05): 79, ...` or `0000:03:00): 14, ...` (after the `(`): the address
/// (and function) and what follows the closing `)`.
fn paren_address(s: &[u8]) -> Option<((PciAddress, u8), &[u8])> {
    let s = s.strip_prefix(b"PCI:").unwrap_or(s);
    let (address, used) = parse_pci(s)?;
    let rest = &s[used..];
    // Anything up to `)` after the address (a MIG instance: ` GPU-I:05`, ` GPU-CI:01`) is
    // bounded by the record's own length.
    let close = rest
        .iter()
        .take(MAX_MIG_PART + 1)
        .position(|&b| b == b')')?;
    let mig = &rest[..close];
    if !mig.is_empty()
        && (mig[0] != b' '
            || !mig
                .iter()
                .all(|&b| b == b' ' || b == b':' || b == b'-' || b.is_ascii_alphanumeric()))
    {
        return None;
    }
    let function = if s.get(used.wrapping_sub(2)) == Some(&b'.') {
        s.get(used - 1).map_or(0, |b| b - b'0')
    } else {
        0
    };
    Some(((address, function), &rest[close + 1..]))
}

/// The code in `: 79, ...` (or `: 79` at the end), when below `max`.
fn code_after(s: &[u8], max: u32) -> Option<u32> {
    let s = s.strip_prefix(b":")?;
    let s = s.strip_prefix(b" ").unwrap_or(s);
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    let after = s.get(digits);
    if !matches!(after, None | Some(b',') | Some(b' ')) {
        return None;
    }
    let code = number(&s[..digits])?;
    u32::try_from(code).ok().filter(|&c| c < max)
}

/// Parses a PCI address at the start of `s` (see [`PciAddress::parse_prefix`]).
fn parse_pci(s: &[u8]) -> Option<(PciAddress, usize)> {
    PciAddress::parse_prefix(s)
}

/// After `NVRM: GPU `: the address where the driver puts it, in either of its forms
/// (`0000:3b:00.0` or `at PCI:0000:3b:00`), then exactly [`FALLEN_TEXT`] to the end of the
/// message. Anything else is another driver message (`NVRM: GPU at PCI:...: GPU-<uuid>`, the
/// board serial number, ...), never an event: no text a user can put into a message (the
/// client version of `NVRM: API mismatch`, a process name, a path) can make one.
fn fallen_off_bus(rest: &[u8]) -> Option<PciAddress> {
    let (address, used, form_with_function) = match rest.strip_prefix(b"at PCI:") {
        Some(s) => {
            let (a, used) = parse_pci(s)?;
            (a, used + 7, false)
        }
        None => {
            let (a, used) = parse_pci(rest)?;
            (a, used, true)
        }
    };
    // `0000:3b:00.0` has its function; `at PCI:0000:3b:00` has none.
    let has_function = rest.get(used.wrapping_sub(2)) == Some(&b'.');
    if has_function != form_with_function {
        return None;
    }
    let tail = &rest[used..];
    let tail = tail.strip_suffix(b" ").unwrap_or(tail);
    (tail == FALLEN_TEXT).then_some(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pci(domain: u32, bus: u8, device: u8) -> PciAddress {
        PciAddress {
            domain,
            bus,
            device,
        }
    }

    fn event(message: &str) -> Result<Option<Event>, Malformed> {
        classify(message.as_bytes())
    }

    #[test]
    fn records_split_into_header_and_message() {
        let r = parse_record(b"3,2315,1234567890,-;NVRM: Xid (PCI:0000:1b:00): 79, pid=0").unwrap();
        assert_eq!((r.seq, r.timestamp_us), (2315, 1_234_567_890));
        assert_eq!(r.message, b"NVRM: Xid (PCI:0000:1b:00): 79, pid=0");
        // Newer kernels add fields after the flags (caller ids).
        let r = parse_record(b"6,17,5,c,caller=T42;hello; world").unwrap();
        assert_eq!((r.seq, r.message), (17, &b"hello; world"[..]));
        for bad in [
            &b""[..],
            b"no header at all",
            b"6,x,5,-;m",
            b"6,1,5;m",
            b"6,1,5,;m",
            b"6,99999999999999999999,5,-;m",
            b";m",
        ] {
            assert_eq!(parse_record(bad), Err(Malformed::Header), "{bad:?}");
        }
        let huge = [b'a'; MAX_RECORD_BYTES + 1];
        assert_eq!(parse_record(&huge), Err(Malformed::TooLong));
    }

    /// The driver's XID line in the variants seen in the field.
    #[test]
    fn xid_lines_in_every_known_shape() {
        let cases = [
            ("NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.", pci(0, 0x1b, 0), 79),
            ("NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000", pci(0, 1, 0), 32),
            ("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter", pci(0, 0xcb, 0), 13),
            ("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149", pci(0, 0xdc, 0), 45),
            ("NVRM: Xid (PCI:0000:4b:00 GPU-I:05): 43, pid=77, name=train, Ch 00000008", pci(0, 0x4b, 0), 43),
            ("NVRM: Xid (PCI:0000:4B:00 GPU-I:05 GPU-CI:01): 31, pid=77, name=train", pci(0, 0x4b, 0), 31),
            ("NVRM: Xid (0000:03:00): 14, Channel 00000001", pci(0, 3, 0), 14),
            ("NVRM: Xid (PCI:0001:b8:1f): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00", pci(1, 0xb8, 0x1f), 149),
            ("NVRM: Xid (PCI:0000:1b:00): 94", pci(0, 0x1b, 0), 94),
            // An unknown but plausible code still counts under its number.
            ("NVRM: Xid (PCI:0000:1b:00): 9999, something new", pci(0, 0x1b, 0), 9999),
        ];
        for (line, want_pci, want_code) in cases {
            assert_eq!(
                event(line),
                Ok(Some(Event::Xid {
                    pci: want_pci,
                    code: want_code
                })),
                "{line}"
            );
        }
    }

    #[test]
    fn sxid_and_fallen_off_the_bus() {
        assert_eq!(
            event(
                "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 60 LTSSM Fault Up"
            ),
            Ok(Some(Event::SXid {
                pci: pci(0, 0xc6, 0),
                function: 0,
                code: 20034
            }))
        );
        assert_eq!(
            event("nvidia-nvswitch0: SXid (PCI:0000:05:00.1): 12028, Non-fatal, Link 32 egress"),
            Ok(Some(Event::SXid {
                pci: pci(0, 5, 0),
                function: 1,
                code: 12028
            }))
        );
        assert_eq!(
            event("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."),
            Ok(Some(Event::FallenOffBus {
                pci: pci(0, 0x3b, 0)
            }))
        );
        assert_eq!(
            event("NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus."),
            Ok(Some(Event::FallenOffBus {
                pci: pci(0, 0x3b, 0)
            }))
        );
    }

    #[test]
    fn other_kernel_lines_are_not_events() {
        for line in [
            "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
            "NVRM: GPU at PCI:0000:00:05: GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
            "NVRM: GPU Board Serial Number: 1650423013443",
            "Something about Xid in prose",
            "my disk has fallen off the bus",
            "",
        ] {
            assert_eq!(event(line), Ok(None), "{line}");
        }
    }

    /// Hostile input: wrong shapes, huge or negative codes, binary and non-UTF-8 bytes,
    /// truncation at every byte of a valid line; never a panic, never an event of a bad code.
    #[test]
    fn hostile_gpu_lines_are_malformed_never_events() {
        for line in [
            "NVRM: Xid (PCI:0000:1b:00): 10000, too big",
            "NVRM: Xid (PCI:0000:1b:00): 99999999999999999999999, overflow",
            "NVRM: Xid (PCI:0000:1b:00): -1, negative",
            "NVRM: Xid (PCI:0000:1b:00): 79x, glued",
            "NVRM: Xid (PCI:0000:1b:00): , empty",
            "NVRM: Xid (PCI:zzzz:1b:00): 79, bad hex",
            "NVRM: Xid (PCI:0000:1b:00: 79, unclosed",
            "NVRM: Xid (PCI:0000:1b:000): 79, long device",
            "NVRM: Xid (PCI:0000:1b:00 (x)): 79, nested",
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 123456, too big",
            "NVRM: GPU has fallen off the bus.",
        ] {
            assert_eq!(event(line), Err(Malformed::Message), "{line}");
        }
        let full = b"NVRM: Xid (PCI:0000:1b:00): 79, pid=1";
        for n in 0..full.len() {
            let r = classify(&full[..n]);
            assert!(
                !matches!(r, Ok(Some(Event::Xid { code, .. })) if code != 79 && code != 7),
                "{n}: {r:?}"
            );
        }
        let binary: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        assert!(classify(&binary).is_ok());
        let mut non_utf8 = b"NVRM: Xid (PCI:0000:1b:00): 79, name=\xff\xfe\x80".to_vec();
        assert_eq!(
            classify(&non_utf8),
            Ok(Some(Event::Xid {
                pci: pci(0, 0x1b, 0),
                code: 79
            }))
        );
        non_utf8.insert(17, 0xff);
        assert_eq!(classify(&non_utf8), Err(Malformed::Message));
    }

    /// Issue 28, item 10: only the drivers' own messages count, recognised at the start of the
    /// message; a kernel message quoting user input (a mount option, a process name, a file
    /// name) with a driver line inside it is no event, nor malformed.
    #[test]
    fn driver_lines_count_only_at_the_start_of_the_message() {
        for line in [
            "EXT4-fs (sda1): Unrecognized mount option \"NVRM: Xid (PCI:0000:1b:00): 79, x\" or missing value",
            "audit: type=1400 name=\"NVRM: Xid (PCI:0000:1b:00): 95, pid=1\"",
            " NVRM: Xid (PCI:0000:1b:00): 79, leading space",
            "xNVRM: Xid (PCI:0000:1b:00): 79, glued",
            "python3[42]: NVRM: Xid (PCI:0000:1b:00): 48, from a process",
            "usb 1-1: nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal",
            "nvidia-nvswitch: SXid (PCI:0000:c6:00.0): 20034, no instance number",
            "nvidia-nvswitch3 SXid (PCI:0000:c6:00.0): 20034, no colon",
            "my disk: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        ] {
            assert_eq!(event(line), Ok(None), "{line}");
        }
        // The same lines, as the drivers print them, count.
        assert!(matches!(
            event("NVRM: Xid (PCI:0000:1b:00): 79, x"),
            Ok(Some(Event::Xid { code: 79, .. }))
        ));
        assert!(matches!(
            event("nvidia-nvswitch12: SXid (PCI:0000:c6:00.0): 20034, Fatal"),
            Ok(Some(Event::SXid { code: 20034, .. }))
        ));
    }

    /// Issue 42, item 1: a process with GPU access makes the driver print its own 63-byte
    /// string in `NVRM: API mismatch: the client has the version <text>, but ...` (at KERN_ERR,
    /// facility 0). Forged driver words inside it, or inside any other driver message that
    /// quotes user text (a process name, a path), are no event: only the driver's exact forms
    /// count, with the address where the driver puts it.
    #[test]
    fn forged_driver_words_in_user_text_are_no_event() {
        let mismatch = |text: &str| {
            format!(
                "NVRM: API mismatch: the client has the version {text}, but\\x0aNVRM: this kernel module has the version 550.54.15.  Please\\x0aNVRM: make sure that this kernel module and all NVIDIA driver\\x0aNVRM: components have the same version."
            )
        };
        let forged = [
            mismatch("GPU 0000:18:00.0: GPU has fallen off the bus."),
            mismatch("x: GPU at PCI:0000:18:00: GPU has fallen off the bus."),
            mismatch("NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."),
            // The record's own line ends after the user text (a file a helper wrote without
            // the kernel's escaping of the driver's newlines).
            "NVRM: API mismatch: the client has the version 0000:18:00.0: GPU has fallen off the bus.".to_string(),
            // Inside other driver messages that quote a process name or a path.
            "NVRM: Xid (PCI:0000:1b:00): 13, pid=9, name=GPU 0000:18:00.0: GPU has fallen off the bus., Graphics Exception".to_string(),
            "NVRM: nvidia-smi[1234]: failed to open /tmp/GPU 0000:18:00.0: GPU has fallen off the bus.".to_string(),
            "NVRM: GPU at PCI:0000:18:00: GPU-efbdfde9-5798-a6e7-4c46-12518fa15375 GPU has fallen off the bus.".to_string(),
            "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus. name=0000:3b:00.0".to_string(),
            "NVRM: GPU 0000:18:00.0: name=x: GPU has fallen off the bus.".to_string(),
            "NVRM: GPU at PCI:0000:18:00.0: GPU has fallen off the bus.".to_string(),
            "NVRM: GPU 0000:18:00: GPU has fallen off the bus.".to_string(),
            "NVRM: GPU Board Serial Number: 0000:18:00.0: GPU has fallen off the bus".to_string(),
        ];
        for line in &forged {
            assert!(
                !matches!(event(line), Ok(Some(Event::FallenOffBus { .. }))),
                "{line}: {:?}",
                event(line)
            );
        }
        // The Xid line with a forged address in its process name counts under the driver's
        // address (the one after `Xid (`), never the forged one.
        assert_eq!(
            event(&forged[4]),
            Ok(Some(Event::Xid {
                pci: pci(0, 0x1b, 0),
                code: 13
            }))
        );
        // A forged Xid inside a process name or a MIG part: not the driver's address or code.
        assert_eq!(
            event("NVRM: Xid (PCI:0000:1b:00): 13, pid=9, name=NVRM: Xid (PCI:0000:18:00): 79, x"),
            Ok(Some(Event::Xid {
                pci: pci(0, 0x1b, 0),
                code: 13
            }))
        );
        assert_eq!(
            event("NVRM: Xid (PCI:0000:1b:00 name=x, GPU 0000:18:00.0): 79, pid=1"),
            Err(Malformed::Message)
        );
        // The driver's own forms still count.
        for line in [
            "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.",
            "NVRM: GPU at PCI:0000:18:00: GPU has fallen off the bus.",
            "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus. ",
        ] {
            assert_eq!(
                event(line),
                Ok(Some(Event::FallenOffBus {
                    pci: pci(0, 0x18, 0)
                })),
                "{line}"
            );
        }
    }

    /// The priority field says who logged the record: facility 0 (`priority` 0-7) is the
    /// kernel; a process writing to /dev/kmsg gets facility 1 (`LOG_USER`, 8-15) or another.
    #[test]
    fn only_kernel_facility_records_are_the_kernels() {
        for (prio, kernel) in [
            (0, true),
            (3, true),
            (4, true),
            (7, true),
            (8, false),
            (11, false),
            (12, false),
            (14, false),
            (30, false),
            (191, false),
        ] {
            let line = format!("{prio},1,1,-;NVRM: Xid (PCI:0000:1b:00): 79, x");
            let r = parse_record(line.as_bytes()).unwrap();
            assert_eq!((r.priority, r.is_kernel()), (prio, kernel), "{line}");
        }
    }

    #[test]
    fn nvml_and_kernel_addresses_normalise_alike() {
        let kernel = PciAddress::parse("0000:1b:00").unwrap();
        assert_eq!(PciAddress::parse("00000000:1B:00.0"), Some(kernel));
        assert_eq!(PciAddress::parse("0000:1b:00.0"), Some(kernel));
        assert_eq!(kernel.to_string(), "0000:1b:00");
        assert_eq!(PciAddress::parse("1b:00.0"), None);
        assert_eq!(PciAddress::parse("000000000:1b:00.0"), None);
    }
}
