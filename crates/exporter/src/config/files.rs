//! Checks of settings against the filesystem and the network, and strict reading of the config
//! file, so that a mistake is reported in one line naming the file, the line and the key.

use std::path::Path;
use std::time::Duration;

use super::{ConfigError, Settings};

/// Refuses a duration under `min` (e.g. an interval of 1ns, which would keep a core busy).
pub(super) fn check_min(key: &str, d: Option<Duration>, min: Duration) -> Result<(), ConfigError> {
    match d {
        Some(d) if d < min => Err(ConfigError(format!(
            "{key}: {} is below the minimum of {}",
            humantime::format_duration(d),
            humantime::format_duration(min)
        ))),
        _ => Ok(()),
    }
}

/// Refuses a duration over `max` (a longer one would overflow the clock when added to it).
pub(super) fn check_max(key: &str, d: Option<Duration>, max: Duration) -> Result<(), ConfigError> {
    match d {
        Some(d) if d > max => Err(ConfigError(format!(
            "{key}: {} is over the maximum of {}",
            humantime::format_duration(d),
            humantime::format_duration(max)
        ))),
        _ => Ok(()),
    }
}

/// Checks `nvml.power_sample_interval` (0 for off, else 10 ms to 1 s: faster costs CPU for
/// nothing NVML refreshes, slower is what the 1 s average already gives) and
/// `nvml.power_window` (1 s to 10 min, which bounds the samples kept per GPU).
pub(super) fn check_power_sampling(nvml: &dgx_pixels_nvml::NvmlOptions) -> Result<(), ConfigError> {
    let (interval, window) = (nvml.power_sample_interval, nvml.power_window);
    let fmt = |d: Duration| humantime::format_duration(d).to_string();
    if !interval.is_zero()
        && !(Duration::from_millis(10)..=Duration::from_secs(1)).contains(&interval)
    {
        return Err(ConfigError(format!(
            "nvml.power_sample_interval: {} is outside 10ms to 1s (0s turns fast power sampling off)",
            fmt(interval)
        )));
    }
    if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&window) {
        return Err(ConfigError(format!(
            "nvml.power_window: {} is outside 1s to 10m",
            fmt(window)
        )));
    }
    Ok(())
}

/// Checks `dcgm.hostengine`: a unix socket path, or HOST[:PORT].
pub(super) fn check_hostengine(address: &str) -> Result<(), ConfigError> {
    let bad = |why: &str| {
        ConfigError(format!(
            "dcgm.hostengine: {address:?} {why}; expected HOST:PORT or a unix socket path"
        ))
    };
    if address.starts_with('/') {
        return Ok(());
    }
    let (host, port) = match address.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (address, None),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad("has no host"));
    }
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        return Err(bad("has an invalid port"));
    }
    Ok(())
}

/// Reads and parses `dcgm.field_list`.
pub fn read_field_list(path: &Path) -> Result<dgx_pixels_dcgm::fields::FieldList, ConfigError> {
    let text = read_text(path).map_err(|e| {
        ConfigError(format!(
            "dcgm.field_list: cannot read {}: {e}",
            path.display()
        ))
    })?;
    dgx_pixels_dcgm::fields::parse_field_list(&text, &path.display().to_string())
        .map_err(|e| ConfigError(format!("dcgm.field_list: {e}")))
}

/// Line (1-based) of byte `offset` in `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The dotted key at `line`: the nearest `[table]` header above it plus the line's own key.
pub(super) fn key_at(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let own = lines.get(line.checked_sub(1)?)?.trim();
    let leaf = own
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string());
    let table = lines[..line - 1].iter().rev().find_map(|l| {
        let l = l.trim();
        (l.starts_with('[') && !l.starts_with("[["))
            .then(|| l.trim_matches(['[', ']']).trim().to_string())
    });
    if own.starts_with('[') {
        return Some(own.trim_matches(['[', ']']).trim().to_string());
    }
    match (table, leaf) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k),
        (t, None) => t,
    }
}

/// Reads a config or field-list file: a regular file (a FIFO in its place must not hang a
/// reload), of a sane size, in UTF-8.
pub(super) fn read_text(path: &Path) -> Result<String, String> {
    let bytes = dgx_pixels_web::read_regular(path, dgx_pixels_web::MAX_CONFIG_FILE_BYTES)
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())
}

/// Reads and parses a config file strictly, for error messages that name the file, line and
/// key; returns its text for the layered parse.
pub(super) fn check_file(path: &Path) -> Result<String, ConfigError> {
    let text = read_text(path)
        .map_err(|e| ConfigError(format!("config file {}: cannot read: {e}", path.display())))?;
    match toml::from_str::<Settings>(&text) {
        Ok(s) => s
            .validate()
            .map(|()| text)
            .map_err(|e| ConfigError(format!("config file {}: {e}", path.display()))),
        Err(e) => {
            let line = e.span().map(|s| line_of(&text, s.start));
            let mut msg = format!("config file {}", path.display());
            if let Some(line) = line {
                msg.push_str(&format!(" line {line}"));
                if let Some(key) = key_at(&text, line) {
                    msg.push_str(&format!(" key {key}"));
                }
            }
            msg.push_str(": ");
            msg.push_str(e.message().trim());
            Err(ConfigError(msg.replace('\n', " ")))
        }
    }
}
