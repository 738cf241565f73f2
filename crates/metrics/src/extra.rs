//! Families outside the static catalog, defined at run time from user input (a dcgm-exporter
//! field list naming DCGM fields the catalog has no row for). A source returns their samples
//! from [`crate::Source::take_extra`]; the encoders write them after the catalog's families.

use std::sync::Arc;

use crate::catalog::{Kind, CATALOG};

/// A family defined at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFamily {
    /// Exposed name (a counter's ends in `_total`).
    pub name: String,
    /// Gauge or counter.
    pub kind: Kind,
    /// One-line help text.
    pub help: String,
    /// Label names, in the order sample label values are given.
    pub labels: &'static [&'static str],
}

impl ExtraFamily {
    /// A family, checked against the catalog's naming rules: a valid name under
    /// `dgx_pixels_`, no clash with a catalog row, `_total` on counters and only on them, and a
    /// help text of one line.
    pub fn new(
        name: &str,
        kind: Kind,
        help: &str,
        labels: &'static [&'static str],
    ) -> Result<ExtraFamily, String> {
        let valid = name.starts_with("dgx_pixels_")
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(format!("{name:?} is not a valid dgx_pixels_ metric name"));
        }
        if CATALOG
            .iter()
            .any(|d| d.name == name || d.family_name() == name)
        {
            return Err(format!("{name} is already a catalog metric"));
        }
        if (kind == Kind::Counter) != name.ends_with("_total") {
            return Err(format!("{name}: counters and only counters end in _total"));
        }
        let help = help.trim();
        if help.contains(['\n', '\\']) {
            return Err(format!("{name}: help must be one line without backslashes"));
        }
        Ok(ExtraFamily {
            name: name.to_string(),
            kind,
            help: if help.is_empty() {
                name.to_string()
            } else {
                help.to_string()
            },
            labels,
        })
    }

    /// The OpenMetrics family name: without a counter's `_total`.
    pub fn family_name(&self) -> &str {
        match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(&self.name),
            Kind::Gauge => &self.name,
        }
    }
}

/// One series of an [`ExtraFamily`].
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraSample {
    /// Its family.
    pub family: Arc<ExtraFamily>,
    /// Label values, one per label name of the family.
    pub labels: Vec<String>,
    /// The value.
    pub value: f64,
}

impl ExtraSample {
    /// Whether the label count matches the family and the value is a number.
    pub fn is_well_formed(&self) -> bool {
        self.labels.len() == self.family.labels.len() && !self.value.is_nan()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_catalog_rules() {
        let ok = ExtraFamily::new(
            "dgx_pixels_dcgm_dev_xid_errors",
            Kind::Gauge,
            " Last XID ",
            &["gpu"],
        );
        assert_eq!(ok.map(|f| f.help), Ok("Last XID".to_string()));
        for (name, kind) in [
            ("dcgm_dev_xid_errors", Kind::Gauge),
            ("dgx_pixels_dcgm_X", Kind::Gauge),
            ("dgx_pixels_gpu_power_watts", Kind::Gauge),
            ("dgx_pixels_dcgm_replays", Kind::Counter),
            ("dgx_pixels_dcgm_replays_total", Kind::Gauge),
        ] {
            assert!(ExtraFamily::new(name, kind, "h", &[]).is_err(), "{name}");
        }
        let c = ExtraFamily::new("dgx_pixels_dcgm_replays_total", Kind::Counter, "", &[]);
        assert_eq!(
            c.as_ref().map(|f| f.family_name()),
            Ok("dgx_pixels_dcgm_replays")
        );
    }
}
