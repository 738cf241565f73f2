//! What the fake driver libraries (crates/fake-nvml, fake-dcgm, fake-cuda, fake-nccl) and the
//! tests that load them share, written once:
//!
//! - [`library`]: build a fake `cdylib` (`cargo test` builds none), find it beside the running
//!   test, and install it under the names the real library is opened by;
//! - [`env`]: the `FAKE_*` environment parsing the fakes have in common (scenario clock,
//!   errors that name the variable, seconds, switches, windows, reading a test's list);
//! - [`calls`]: the call counter, busy time and panic guard around every export;
//! - [`process`]: the process's age, the running scenario clock;
//! - [`child`]: a test's body alone in a child process with its own `FAKE_*` variables.
//!
//! Dev-only: the fakes and tests depend on it, the shipped binary never does
//! (scripts/check-crate-deps.sh).
#![deny(missing_docs)]

pub mod calls;
pub mod child;
pub mod env;
pub mod library;
pub mod process;

pub use calls::CallStats;
pub use env::{ClockMode, ConfigError, FromVars};
pub use library::Fake;
