//! The typed device key: which GPU (and which MIG instance of it) a series describes.
//!
//! A device series carries its key beside its other label values instead of as the first
//! label strings, for two reasons. No consumer parses labels by position: the attribution join
//! and the probe scheduler's utilization lookup ask the key, and the NVML/DCGM ownership filter
//! compares a sample's own labels, which no longer start with the device's. And one key is shared by every sample of a GPU (an [`Arc`]), so the
//! uuid is not copied into each of the GPU's ~100 series on every poll.
//!
//! The catalog says which rows are device series ([`Scope`], derived from each row's leading
//! label names, so the rows keep listing every label in exposition order); the encoders write
//! the key's labels first.

use std::sync::Arc;

/// One MIG instance of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigInstance {
    /// The GPU instance id (`gpu_instance` label).
    pub gpu_instance: u32,
    /// The compute instance id (`compute_instance` label); NVML may name a process's GPU
    /// instance without its compute instance, and the GPU instance alone still says which
    /// pod's instance it runs in.
    pub compute_instance: Option<u32>,
}

/// A GPU by index and uuid, optionally one MIG instance of it. Immutable (its fields are read
/// through methods), so the label text rendered when it is made always matches it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceKey {
    gpu: u32,
    uuid: Arc<str>,
    mig: Option<MigInstance>,
    /// The label values as written, rendered once per key rather than once per encoded sample.
    text: [Box<str>; 3],
}

impl DeviceKey {
    /// The key of a whole GPU.
    pub fn gpu(gpu: u32, uuid: impl Into<Arc<str>>) -> DeviceKey {
        DeviceKey::new(gpu, uuid.into(), None)
    }

    /// The key of a GPU's series about one MIG instance, or about none (`mig` `None`: a
    /// process-level series on a GPU that is not in MIG mode; its instance labels are empty).
    pub fn new(gpu: u32, uuid: Arc<str>, mig: Option<MigInstance>) -> DeviceKey {
        let id = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
        let text = [
            gpu.to_string().into(),
            id(mig.map(|m| m.gpu_instance)).into(),
            id(mig.and_then(|m| m.compute_instance)).into(),
        ];
        DeviceKey {
            gpu,
            uuid,
            mig,
            text,
        }
    }

    /// The GPU's index (`gpu` label): NVML's enumeration order.
    pub fn index(&self) -> u32 {
        self.gpu
    }

    /// The GPU's uuid (`GPU-...`), never a MIG device's.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// The MIG instance, for a series of one instance (or of a process running in one).
    pub fn mig(&self) -> Option<MigInstance> {
        self.mig
    }

    /// The same GPU, one MIG instance of it (or the whole GPU for `None`).
    pub fn with_mig(&self, mig: Option<MigInstance>) -> DeviceKey {
        DeviceKey::new(self.gpu, Arc::clone(&self.uuid), mig)
    }

    /// The label pairs this key contributes to a series of `scope`, in exposition order.
    pub fn labels(&self, scope: Scope) -> DeviceLabels<'_> {
        let [gpu, gi, ci] = &self.text;
        let all: [(&str, &str); 4] = [
            ("gpu", &**gpu),
            ("uuid", &*self.uuid),
            ("gpu_instance", &**gi),
            ("compute_instance", &**ci),
        ];
        all.into_iter().take(scope.label_count())
    }
}

/// The iterator of [`DeviceKey::labels`]: a concrete type, so a label iterator that holds one
/// needs no boxing.
pub type DeviceLabels<'a> = std::iter::Take<std::array::IntoIter<(&'a str, &'a str), 4>>;

/// A PCI address as the kernel log and NVML name it, reduced to what names a GPU: domain, bus
/// and device (the function is always 0 for a GPU, and the kernel log often leaves it out).
/// Part of a GPU's identity in the device view, parsed once per generation from
/// `dgx_pixels_gpu_info`'s `pci_bus_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus.
    pub bus: u8,
    /// Device.
    pub device: u8,
}

impl PciAddress {
    /// Parses `0000:1b:00`, `0000:1b:00.0` (kernel log) or `00000000:1B:00.0` (NVML): hex,
    /// any case, a domain of 4 to 8 digits, the function ignored.
    pub fn parse(s: &str) -> Option<PciAddress> {
        PciAddress::parse_prefix(s.as_bytes()).map(|(a, _)| a)
    }

    /// Parses a PCI address at the start of `s`: DOMAIN(4-8 hex):BUS(2):DEVICE(2)[.FUNCTION],
    /// any case. Returns it and the bytes used (what a kernel-log line goes on from).
    pub fn parse_prefix(s: &[u8]) -> Option<(PciAddress, usize)> {
        fn hex(b: u8) -> Option<u32> {
            (b as char).to_digit(16)
        }
        let domain_len = s.iter().take(9).take_while(|&&b| hex(b).is_some()).count();
        if !(4..=8).contains(&domain_len) || s.get(domain_len) != Some(&b':') {
            return None;
        }
        let domain = s[..domain_len]
            .iter()
            .try_fold(0u32, |n, &b| Some(n * 16 + hex(b)?))?;
        let two = |i: usize| -> Option<u8> {
            let hi = hex(*s.get(i)?)?;
            let lo = hex(*s.get(i + 1)?)?;
            u8::try_from(hi * 16 + lo).ok()
        };
        let bus = two(domain_len + 1)?;
        if s.get(domain_len + 3) != Some(&b':') {
            return None;
        }
        let device = two(domain_len + 4)?;
        let mut used = domain_len + 6;
        if s.get(used) == Some(&b'.') && s.get(used + 1).is_some_and(|b| (b'0'..=b'7').contains(b))
        {
            used += 2;
        }
        // An address ends here: a seventh hex digit would make it something else.
        if s.get(used).is_some_and(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some((
            PciAddress {
                domain,
                bus,
                device,
            },
            used,
        ))
    }
}

impl std::fmt::Display for PciAddress {
    /// The kernel log's spelling: `0000:1b:00`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}",
            self.domain, self.bus, self.device
        )
    }
}

/// What a catalog row's series are about, from its leading label names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Not a device series (the exporter's own metrics, textfile status): labels only.
    None,
    /// A GPU: `gpu` and `uuid` come from the sample's [`DeviceKey`].
    Gpu,
    /// A MIG instance of a GPU: `gpu`, `uuid`, `gpu_instance` and `compute_instance` come from
    /// the key (the instance labels empty for a key without one).
    Mig,
}

impl Scope {
    /// The scope of a row with these label names.
    pub const fn of(labels: &[&str]) -> Scope {
        if starts_with(labels, &["gpu", "uuid", "gpu_instance", "compute_instance"]) {
            Scope::Mig
        } else if starts_with(labels, &["gpu", "uuid"]) {
            Scope::Gpu
        } else {
            Scope::None
        }
    }

    /// How many of the row's leading labels the key provides.
    pub const fn label_count(self) -> usize {
        match self {
            Scope::None => 0,
            Scope::Gpu => 2,
            Scope::Mig => 4,
        }
    }
}

/// Whether `labels` begins with `names` (const: the catalog computes each row's scope at compile
/// time).
const fn starts_with(labels: &[&str], names: &[&str]) -> bool {
    if labels.len() < names.len() {
        return false;
    }
    let mut i = 0;
    while i < names.len() {
        if !str_eq(labels[i], names[i]) {
            return false;
        }
        i += 1;
    }
    true
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_come_from_the_leading_labels() {
        assert_eq!(Scope::of(&["gpu", "uuid"]), Scope::Gpu);
        assert_eq!(Scope::of(&["gpu", "uuid", "sensor"]), Scope::Gpu);
        assert_eq!(
            Scope::of(&["gpu", "uuid", "gpu_instance", "compute_instance", "x"]),
            Scope::Mig
        );
        assert_eq!(Scope::of(&["gpu", "uuid", "gpu_instance", "x"]), Scope::Gpu);
        assert_eq!(Scope::of(&["source"]), Scope::None);
        assert_eq!(Scope::of(&["uuid", "gpu"]), Scope::None);
        assert_eq!(Scope::of(&[]), Scope::None);
    }

    #[test]
    fn a_key_renders_the_labels_of_its_scope() {
        let mig = MigInstance {
            gpu_instance: 3,
            compute_instance: Some(0),
        };
        let key = DeviceKey::new(1, "GPU-b".into(), Some(mig));
        let got: Vec<_> = key.labels(Scope::Mig).collect();
        assert_eq!(
            got,
            [
                ("gpu", "1"),
                ("uuid", "GPU-b"),
                ("gpu_instance", "3"),
                ("compute_instance", "0")
            ]
        );
        assert_eq!(key.labels(Scope::Gpu).count(), 2);
        assert_eq!(key.labels(Scope::None).count(), 0);
        let whole = key.with_mig(None);
        let got: Vec<_> = whole.labels(Scope::Mig).map(|(_, v)| v).collect();
        assert_eq!(got, ["1", "GPU-b", "", ""]);
    }
}
