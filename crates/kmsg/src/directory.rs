//! Which GPU has which PCI address: the kernel log names GPUs by PCI address, the exporter's
//! series by index and uuid.

use std::sync::Arc;

use dgx_pixels_metrics::view::DeviceViews;

use crate::parse::PciAddress;

/// A GPU as the GPU sources see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownGpu {
    /// Its PCI address.
    pub pci: PciAddress,
    /// Its index (`gpu` label).
    pub index: u32,
    /// Its uuid.
    pub uuid: String,
}

/// Which GPU has which PCI address: the exporter answers with a [`ViewDirectory`].
pub trait GpuDirectory: Send {
    /// The GPUs known now; `None` while no GPU source has been read (events wait until then).
    fn gpus(&self) -> Option<Vec<KnownGpu>>;
}

/// The GPUs of the current generation's device view that have a PCI address (from the
/// `dgx_pixels_gpu_info` of every source that is up).
pub struct ViewDirectory(pub Arc<dyn DeviceViews>);

impl GpuDirectory for ViewDirectory {
    fn gpus(&self) -> Option<Vec<KnownGpu>> {
        let view = self.0.current()?;
        let gpus: Vec<KnownGpu> = view
            .gpus()
            .filter_map(|g| {
                Some(KnownGpu {
                    pci: g.pci()?,
                    index: g.index(),
                    uuid: g.uuid().to_string(),
                })
            })
            .collect();
        (!gpus.is_empty()).then_some(gpus)
    }
}
