//! The collector registry's types, shared by the daemon and every collector crate.
//!
//! A collector crate owns its descriptor ([`Collector`]): its name, defaults, `--help` line,
//! settings table ([`TableOptions`], read through [`Table`]), flags ([`Flag`]), how its source
//! is built ([`BuildContext`]) and what of the plan it shares with others ([`Shared`], whose
//! parts it names in [`Collector::shared_inputs`] so a reload restarts it only when they
//! change). The daemon lists the descriptors, turns flags into command-line arguments and
//! tables into configuration, and plans, builds and runs the sources.
//!
//! Deliberately small: it knows nothing of the command line, the layered configuration, the
//! web server or the exposition, so a collector crate that depends on it pulls none of them in.

#![deny(missing_docs)]

mod collector;
mod flag;
mod restart;
mod simulation;
mod table;

pub use collector::{
    BuildContext, Built, Check, Collector, Lasting, Owned, PrepareContext, Prepared, Shared,
    Simulated,
};
pub use flag::{Flag, FlagDefault, FlagKind};
pub use restart::{no_shared_inputs, Fingerprint, RestartKey, SettingsKey, Timing};
pub use simulation::SimulationSettings;
pub use table::{Options, Table, TableOptions, Tables};

pub use dgx_pixels_settings::SettingError;

use std::time::Duration;

/// Default poll interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Default poll deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest poll interval accepted (20 polls a second): shorter ones would keep a core busy
/// polling for readings that libraries refresh far less often.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// Shortest poll deadline accepted.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(10);
