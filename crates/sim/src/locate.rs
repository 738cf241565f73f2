//! Mapping between byte offsets / line numbers in a scenario file and key paths such as
//! `gpus[2].power_limit_watts`, so that every error names both the line and the key.
//!
//! This is a deliberately small line scanner for the subset of TOML scenario files use
//! (top-level `[table]` and `[[array]]` headers, `key = value` lines, multi-line arrays). When it
//! cannot tell, it returns `None` and the error simply leaves that part out.

/// 1-based line number of a byte offset.
pub(crate) fn line_of_offset(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\'' | ' ' | '\t')
}

/// Strips a trailing `# comment` that is not inside a quoted string.
fn strip_comment(line: &str) -> &str {
    let mut in_str: Option<char> = None;
    for (i, c) in line.char_indices() {
        match in_str {
            Some(q) if c == q => in_str = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => in_str = Some(c),
            None if c == '#' => return &line[..i],
            None => {}
        }
    }
    line
}

/// A table header on a line: `(name, is_array)`.
fn header(line: &str) -> Option<(String, bool)> {
    let l = strip_comment(line).trim();
    let (inner, array) = if let Some(rest) = l.strip_prefix("[[") {
        (rest.strip_suffix("]]")?, true)
    } else if let Some(rest) = l.strip_prefix('[') {
        (rest.strip_suffix(']')?, false)
    } else {
        return None;
    };
    let name = inner.trim();
    if name.is_empty() || !name.chars().all(is_key_char) {
        return None;
    }
    Some((name.replace([' ', '\t'], ""), array))
}

/// The key of a `key = value` line.
fn key(line: &str) -> Option<String> {
    let l = line.trim_start();
    if l.starts_with('#') || l.starts_with('[') {
        return None;
    }
    let eq = l.find('=')?;
    let k = l[..eq].trim();
    if k.is_empty() || !k.chars().all(is_key_char) {
        return None;
    }
    Some(k.replace([' ', '\t'], ""))
}

/// Walks the lines, calling `f(line_number, table_path, line)`; `table_path` is `""` before the
/// first header, `node` for `[node]`, `gpus[2]` for the third `[[gpus]]`.
fn walk(text: &str, mut f: impl FnMut(usize, &str, bool, &str) -> bool) {
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut table = String::new();
    for (i, line) in text.split('\n').enumerate() {
        let mut is_header = false;
        if let Some((name, array)) = header(line) {
            is_header = true;
            table = if array {
                let n = match counts.iter_mut().find(|(k, _)| *k == name) {
                    Some((_, n)) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        counts.push((name.clone(), 0));
                        0
                    }
                };
                format!("{name}[{n}]")
            } else {
                name
            };
        }
        if !f(i + 1, &table, is_header, line) {
            return;
        }
    }
}

fn join(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    }
}

/// Key path of the value (or key, or header) that contains byte `offset`.
pub(crate) fn key_path_at(text: &str, offset: usize) -> Option<String> {
    let target = line_of_offset(text, offset);
    let mut result = None;
    let mut last_key: Option<String> = None;
    walk(text, |n, table, is_header, line| {
        if is_header {
            last_key = None;
        } else if let Some(k) = key(line) {
            last_key = Some(k);
        }
        if n == target {
            if !is_header && line.trim_start().starts_with('[') {
                // A malformed header: no key to name.
                return false;
            }
            result = if is_header {
                (!table.is_empty()).then(|| table.to_string())
            } else {
                match &last_key {
                    Some(k) => Some(join(table, k)),
                    None => (!table.is_empty()).then(|| table.to_string()),
                }
            };
            return false;
        }
        true
    });
    result
}

/// Line of `key` inside table `table` (`""`, `node`, `gpus[2]`); falls back to the table's
/// header line when the key is not written in the file (a default was used).
pub(crate) fn line_of_key(text: &str, table: &str, key_name: Option<&str>) -> Option<usize> {
    let mut header_line = None;
    let mut found = None;
    walk(text, |n, t, is_header, line| {
        if t == table {
            if is_header && header_line.is_none() {
                header_line = Some(n);
            }
            if let (Some(want), Some(k)) = (key_name, key(line)) {
                if k == want && !is_header {
                    found = Some(n);
                    return false;
                }
            }
        }
        true
    });
    found.or(header_line)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const DOC: &str = "[node]\nname = \"x\" # c\n\n[[gpus]]\ncount = 2\n[[gpus]]\npci_bus_ids = [\n  \"a\",\n  \"b\",\n]\n[[phases]]\nstart_s = 1\n";

    #[test]
    fn offsets_to_paths() {
        let off = DOC.find("\"x\"").unwrap();
        assert_eq!(line_of_offset(DOC, off), 2);
        assert_eq!(key_path_at(DOC, off).as_deref(), Some("node.name"));
        let off = DOC.find("\"b\"").unwrap();
        assert_eq!(
            key_path_at(DOC, off).as_deref(),
            Some("gpus[1].pci_bus_ids")
        );
        let off = DOC.find("[[phases]]").unwrap();
        assert_eq!(key_path_at(DOC, off).as_deref(), Some("phases[0]"));
    }

    #[test]
    fn paths_to_lines() {
        assert_eq!(line_of_key(DOC, "gpus[0]", Some("count")), Some(5));
        assert_eq!(line_of_key(DOC, "gpus[1]", Some("count")), Some(6));
        assert_eq!(line_of_key(DOC, "phases[0]", Some("start_s")), Some(12));
        assert_eq!(line_of_key(DOC, "faults[0]", Some("gpu")), None);
    }
}
