//! A catalog row's OpenMetrics names, sliced out of its exposed name at compile time, so a row
//! whose name breaks the naming rules does not compile (and no name is stripped at run time).

use super::{Kind, Unit};

/// The OpenMetrics family name of a catalog row and that name without its unit suffix,
/// `(family, base)`, sliced out of the exposed `name` in const context. A row that breaks the
/// naming rules panics here, and since the catalog is a `static` that is a compile error: a
/// counter whose name does not end in `_total`, another type whose name does, or a name that
/// does not end in `_<unit>` when the row has a unit.
///
/// ```
/// use dgx_pixels_metrics::catalog::{openmetrics_names, Kind, Unit};
/// const NAMES: (&str, &str) =
///     openmetrics_names("dgx_pixels_gpu_energy_joules_total", Kind::Counter, Unit::Joules);
/// assert_eq!(NAMES, ("dgx_pixels_gpu_energy_joules", "dgx_pixels_gpu_energy"));
/// ```
///
/// A row whose name does not end in its unit does not compile:
///
/// ```compile_fail
/// use dgx_pixels_metrics::catalog::{openmetrics_names, Kind, Unit};
/// const NAMES: (&str, &str) = openmetrics_names("dgx_pixels_gpu_power", Kind::Gauge, Unit::Watts);
/// ```
///
/// Nor does a counter without `_total`:
///
/// ```compile_fail
/// use dgx_pixels_metrics::catalog::{openmetrics_names, Kind, Unit};
/// const NAMES: (&str, &str) = openmetrics_names("dgx_pixels_polls", Kind::Counter, Unit::None);
/// ```
pub const fn openmetrics_names(
    name: &'static str,
    kind: Kind,
    unit: Unit,
) -> (&'static str, &'static str) {
    let family = match kind {
        Kind::Counter => match strip_suffix(name, "_total") {
            Some(family) => family,
            None => panic!("a counter's name must end in _total"),
        },
        Kind::Gauge | Kind::Histogram => {
            if strip_suffix(name, "_total").is_some() {
                panic!("only counters' names end in _total");
            }
            name
        }
    };
    let base = match unit.suffix() {
        None => family,
        Some(suffix) => match strip_suffix(family, suffix) {
            Some(rest) => match strip_suffix(rest, "_") {
                Some(base) if !base.is_empty() => base,
                _ => panic!("the unit must follow an underscore at the end of the name"),
            },
            None => panic!("the name must end in its unit (before _total)"),
        },
    };
    (family, base)
}

/// The families every Prometheus client library serves about its own process, under the names
/// client_golang's process collector gives them on Linux: the catalog's one exception to the
/// `dgx_pixels_` prefix, name by name (a dashboard or alert written for any exporter's
/// `process_*` series works on this one). Not a prefix: `process_foo` is no catalog name.
pub const STANDARD_PROCESS_NAMES: &[&str] = &[
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_virtual_memory_bytes",
    "process_virtual_memory_max_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
];

/// Whether a catalog row may be named `name`: under `dgx_pixels_`, or one of
/// [`STANDARD_PROCESS_NAMES`] exactly. Checked on every row at compile time.
///
/// ```
/// use dgx_pixels_metrics::catalog::allowed_name;
/// assert!(allowed_name("dgx_pixels_gpu_power_watts"));
/// assert!(allowed_name("process_open_fds"));
/// assert!(!allowed_name("process_threads"));
/// assert!(!allowed_name("go_goroutines"));
/// ```
pub const fn allowed_name(name: &str) -> bool {
    if starts_with(name, "dgx_pixels_") {
        return true;
    }
    let mut i = 0;
    while i < STANDARD_PROCESS_NAMES.len() {
        let standard = STANDARD_PROCESS_NAMES[i];
        if standard.len() == name.len() && starts_with(name, standard) {
            return true;
        }
        i += 1;
    }
    false
}

/// Whether `s` starts with `prefix`, in const context.
const fn starts_with(s: &str, prefix: &str) -> bool {
    let (s, prefix) = (s.as_bytes(), prefix.as_bytes());
    if prefix.len() > s.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if s[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `s` without `suffix`, in const context (`str::strip_suffix` is not const).
const fn strip_suffix(s: &'static str, suffix: &str) -> Option<&'static str> {
    let (bytes, suffix) = (s.as_bytes(), suffix.as_bytes());
    if suffix.len() > bytes.len() {
        return None;
    }
    let (head, tail) = bytes.split_at(bytes.len() - suffix.len());
    let mut i = 0;
    while i < suffix.len() {
        if tail[i] != suffix[i] {
            return None;
        }
        i += 1;
    }
    // The suffixes are ASCII, so `head` ends on a character boundary.
    match core::str::from_utf8(head) {
        Ok(head) => Some(head),
        Err(_) => None,
    }
}

// The const fn at work on a row of each shape (`CATALOG` is checked the same way).
const _: () = {
    let (family, base) = openmetrics_names("x_watts", Kind::Gauge, Unit::Watts);
    assert!(family.len() == 7 && base.len() == 1);
    let (family, base) = openmetrics_names("x_errors_total", Kind::Counter, Unit::None);
    assert!(family.len() == 8 && base.len() == 8);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_const_fn_rejects_names_that_break_the_rules() {
        let rejected = |name: &'static str, kind, unit| {
            std::panic::catch_unwind(|| openmetrics_names(name, kind, unit)).is_err()
        };
        assert!(rejected("dgx_pixels_gpu_power", Kind::Gauge, Unit::Watts));
        assert!(rejected(
            "dgx_pixels_gpu_powerwatts",
            Kind::Gauge,
            Unit::Watts
        ));
        assert!(rejected("watts", Kind::Gauge, Unit::Watts));
        assert!(rejected("dgx_pixels_polls", Kind::Counter, Unit::None));
        assert!(rejected(
            "dgx_pixels_energy_total",
            Kind::Counter,
            Unit::Joules
        ));
        assert!(rejected("dgx_pixels_level_total", Kind::Gauge, Unit::None));
        assert!(!rejected("dgx_pixels_level", Kind::Gauge, Unit::None));
        assert!(!rejected(
            "dgx_pixels_probe_duration_seconds",
            Kind::Histogram,
            Unit::Seconds
        ));
    }

    #[test]
    fn only_the_standard_process_names_go_without_the_prefix() {
        for name in STANDARD_PROCESS_NAMES {
            assert!(allowed_name(name), "{name}");
            // Exactly the name: neither a longer nor a shorter one passes on its back.
            assert!(!allowed_name(&format!("{name}_x")), "{name}_x");
            assert!(!allowed_name(&name[..name.len() - 1]), "{name} cut short");
        }
        for name in [
            "process_threads",
            "process_",
            "process_cpu_seconds",
            "go_goroutines",
            "dgx_pixels",
            "pixels_gpu_power_watts",
            "",
        ] {
            assert!(!allowed_name(name), "{name}");
        }
        assert!(allowed_name("dgx_pixels_gpu_power_watts"));
    }
}
