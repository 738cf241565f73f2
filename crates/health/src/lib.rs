//! A health verdict and a recommended action per GPU, from documented rules over the readings
//! the other sources already serve.
//!
//! Why over served samples rather than inside the NVML source: the verdict must use every way
//! a fault reaches us (NVML, DCGM, the kernel log, the simulated node) through one set of rules,
//! and a rule must not care which source owns a series. The `health` collector's
//! [`HealthSource`] reads the current generation's device view (`dgx_pixels_metrics::view`: the
//! same served samples `/metrics` encodes, per GPU, with their holders), hands them to a
//! [`HealthTracker`], and publishes what it returns:
//!
//! - `dgx_pixels_gpu_health_state{state}`: one 0/1 series per [`Verdict`];
//! - `dgx_pixels_gpu_health_action_info{action,reason}`: the most severe action pending and the
//!   rule behind it;
//! - for each GPU a pod or job holds ([`held_gpus`]), the time it stays idle and the energy it
//!   draws meanwhile ([`IdleTracker`]).
//!
//! [`rules::RULES`] is the table of rules (condition, verdict, action, how it clears, where the
//! reading comes from); `docs/health.md` is rendered from it by [`rules::markdown`].
//!
//! ```
//! use std::time::{Duration, Instant};
//! use dgx_pixels_health::HealthTracker;
//! use dgx_pixels_metrics::{Metric, Sample};
//!
//! let mut tracker = HealthTracker::new(Duration::from_secs(300));
//! let readings = [
//!     Sample::for_gpu(0, "GPU-0", Metric::GpuUp, &[], 1.0),
//!     Sample::for_gpu(0, "GPU-0", Metric::GpuXidErrors, &["48"], 1.0),
//! ];
//! let out = tracker.evaluate(readings.iter(), Instant::now());
//! let action = out.iter().find(|s| s.metric == Metric::GpuHealthAction).unwrap();
//! assert_eq!(action.label("action"), Some("reset_gpu"));
//! assert_eq!(action.label("reason"), Some("xid_48"));
//! ```
#![deny(missing_docs)]

pub mod collector;
pub mod expected;
mod facts;
mod settings;
pub use settings::HealthSettings;
mod source;
pub use source::{held_gpus, HealthMemory, HealthSource};
pub mod idle;
pub mod rules;
mod tracker;
pub mod xid_policy;

pub use expected::ExpectedGpus;
pub use idle::{HeldGpu, IdleTracker};
pub use rules::{action_rank, Clears, Rule, Verdict, RULES};
pub use tracker::HealthTracker;
pub use xid_policy::{Treatment, XidPolicy, XidRule};
