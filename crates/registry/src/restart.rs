//! What a reload compares: a source's timing and the settings it was built from.

use std::any::Any;
use std::time::Duration;

use crate::Shared;

/// Timing of one source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Time between poll starts.
    pub interval: Duration,
    /// Deadline of one poll.
    pub timeout: Duration,
}

/// A collector's effective settings as a comparable value of any type (its settings structs
/// derive `PartialEq`): equality is the settings' own, not a formatting of them.
pub trait SettingsKey: Any + Send + Sync {
    /// Whether `other` holds the same settings (of the same type).
    fn same_as(&self, other: &dyn SettingsKey) -> bool;
    /// For the downcast in `same_as`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + PartialEq + Send + Sync> SettingsKey for T {
    fn same_as(&self, other: &dyn SettingsKey) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A boxed [`SettingsKey`].
pub type RestartKey = Box<dyn SettingsKey>;

/// [`crate::Collector::shared_inputs`] of a collector that reads nothing but its own table.
pub fn no_shared_inputs(_: &Shared) -> RestartKey {
    Box::new(())
}

/// What a running source was built from: its timing and its settings key. A reload restarts
/// the source when the new fingerprint differs.
pub struct Fingerprint {
    timing: Timing,
    settings: RestartKey,
}

impl Fingerprint {
    /// The fingerprint of a source with `timing` built from `settings`.
    pub fn new(timing: Timing, settings: RestartKey) -> Fingerprint {
        Fingerprint { timing, settings }
    }
}

impl PartialEq for Fingerprint {
    fn eq(&self, other: &Fingerprint) -> bool {
        self.timing == other.timing && self.settings.same_as(other.settings.as_ref())
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fingerprint")
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_keys_compare_by_value_and_type() {
        let a: RestartKey = Box::new((1u32, "x".to_string()));
        assert!(a.same_as(&(1u32, "x".to_string())));
        assert!(!a.same_as(&(2u32, "x".to_string())));
        assert!(!a.same_as(&1u32), "another type is never the same");
    }
}
