//! The lexical pieces both writers share: one escape helper and one value writer, so a label
//! value, a help text or a number is written the same way in every family and format.

use std::fmt::Write as _;

/// Escapes `s` for a label value (`quote`: `\\`, `\n` and `"`) or a help text (`\\` and
/// `\n`; in OpenMetrics also `"`, so `quote` there too).
pub(crate) fn push_escaped(out: &mut String, s: &str, quote: bool) {
    // Most values need no escaping: copy them whole.
    if !needs_escaping(s, quote) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// `v` as an integer when it is a whole number below 1e15, the values both writers write with
/// integer digits. Counts, bytes and hertz are whole numbers: integer formatting is several
/// times faster than float formatting and prints the same digits.
pub(crate) fn whole(v: f64) -> Option<i64> {
    (v.fract() == 0.0 && v.abs() < 1e15).then_some(v as i64)
}

fn needs_escaping(s: &str, quote: bool) -> bool {
    s.bytes()
        .any(|b| b == b'\\' || b == b'\n' || (quote && b == b'"'))
}

/// Writes a sample value the way both formats (and every Prometheus parser) read it: `NaN`,
/// `+Inf`, `-Inf`; whole numbers below 1e15 as integers; other numbers in their shortest
/// round-trip digits, as a plain decimal from 1e-4 to 1e16 (what people and Rust's `{:?}` write
/// there: `0.003`, at most 22 bytes) and outside that range in whichever of the decimal and the
/// exponent form is shorter (`1e-300`, not a 302-character decimal). The writer's value
/// spelling in the text format (`writer.rs`, its `Spelling::Classic`).
pub(crate) fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if let Some(n) = whole(v) {
        let _ = write!(out, "{n}");
    } else {
        push_shortest(out, v);
    }
}

/// A finite f64 in its shortest round-trip digits: a plain decimal from 1e-4 to 1e16,
/// elsewhere the shorter of the decimal and the exponent form (the decimal on a tie).
fn push_shortest(out: &mut String, v: f64) {
    // `{:e}` gives the shortest round-trip digits: `-1.2345e-7`, `1e16`; at most 24 bytes.
    let mut buf = StackStr::default();
    let _ = write!(buf, "{v:e}");
    let exp_form = buf.as_str();
    let Some((mantissa, exponent_text)) = exp_form.split_once('e') else {
        out.push_str(exp_form);
        return;
    };
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let Ok(exponent) = exponent_text.parse::<i32>() else {
        out.push_str(exp_form);
        return;
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = int.len() as i32 + frac.len() as i32; // int is one digit
                                                       // Length of the plain decimal of the same digits.
    let decimal = if exponent >= digits - 1 {
        exponent + 1
    } else if exponent >= 0 {
        digits + 1
    } else {
        1 + 1 + (-exponent - 1) + digits
    };
    let conventional = (-4..16).contains(&exponent);
    if !conventional && decimal > (mantissa.len() + 1 + exponent_text.len()) as i32 {
        out.push_str(exp_form);
        return;
    }
    out.push_str(sign);
    let all = int.chars().chain(frac.chars());
    if exponent >= 0 {
        let point = exponent as usize + 1;
        for (i, c) in all.enumerate() {
            if i == point {
                out.push('.');
            }
            out.push(c);
        }
        for _ in digits.max(0) as usize..point {
            out.push('0');
        }
    } else {
        out.push_str("0.");
        for _ in 0..(-exponent - 1) {
            out.push('0');
        }
        all.for_each(|c| out.push(c));
    }
}

/// A small stack buffer for formatting one number without allocating.
#[derive(Default)]
struct StackStr {
    buf: [u8; 32],
    len: usize,
}

impl StackStr {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever written into it.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("NaN")
    }
}

impl std::fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let Some(dst) = self.buf.get_mut(self.len..end) else {
            return Err(std::fmt::Error);
        };
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: f64) -> String {
        let mut s = String::new();
        push_value(&mut s, v);
        s
    }

    /// Issue 15: `{}` wrote 1e-300 as a 302-character decimal.
    #[test]
    fn values_are_written_in_their_shortest_round_trip_form_issue_15() {
        for (v, want) in [
            (1e-300, "1e-300"),
            (-2.5e-8, "-2.5e-8"),
            (1.5e20, "1.5e20"),
            (1e15, "1000000000000000"),
            (1e16, "1e16"),
            (12345678901234567e3, "12345678901234567000"),
            (f64::MAX, "1.7976931348623157e308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "5e-324"),
            (0.0001, "0.0001"),
            (0.00001, "1e-5"),
            (0.000012345678901234568, "1.2345678901234568e-5"),
            (0.001, "0.001"),
            (0.1, "0.1"),
            (312.5, "312.5"),
            (-0.25, "-0.25"),
            (123456.789, "123456.789"),
            (1234567890123456.8, "1234567890123456.8"),
            (80.0, "80"),
            (-3.0, "-3"),
            (1e14, "100000000000000"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(value(v), want, "{v:e}");
        }
        // Any f64 reads back the same; outside 1e-4..1e16 it is never longer than `{}` or `{:e}`.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if !v.is_finite() {
                continue;
            }
            let s = value(v);
            assert_eq!(
                s.parse::<f64>().unwrap().to_bits(),
                (v + 0.0).to_bits(),
                "{s}"
            );
            if (1e-4..1e16).contains(&v.abs()) {
                if v.fract() != 0.0 || v.abs() >= 1e15 {
                    assert_eq!(s, format!("{v}"));
                }
            } else {
                assert!(
                    s.len() <= format!("{v}").len().min(format!("{v:e}").len()),
                    "{s}"
                );
            }
        }
    }
}
