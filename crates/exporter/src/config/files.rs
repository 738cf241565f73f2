//! Checks of settings against the filesystem and the network, and strict reading of the config
//! file, so that a mistake is reported in one line naming the file, the line and the key.

use std::path::Path;
use std::time::Duration;

use super::{ConfigError, Settings};

/// Refuses a duration under `min` (e.g. an interval of 1ns, which would keep a core busy).
pub(super) fn check_min(key: &str, d: Option<Duration>, min: Duration) -> Result<(), ConfigError> {
    Ok(dgx_pixels_settings::check_min(key, d, min)?)
}

/// Refuses a duration over `max` (a longer one would overflow the clock when added to it).
pub(super) fn check_max(key: &str, d: Option<Duration>, max: Duration) -> Result<(), ConfigError> {
    Ok(dgx_pixels_settings::check_max(key, d, max)?)
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
    match Settings::from_toml(&text) {
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
