//! `rate_limit`: exporter-toolkit's request rate limit (`RateLimiterConfig` in
//! web/tls_config.go and its use in web/handler.go, commit
//! 19a7c2d590c599b7318733bd00eed83fab3b8dad): Go's `rate.NewLimiter(rate.Every(interval),
//! burst)`, a token bucket holding at most `burst` requests, full at start, one more every
//! `interval`. An interval of 0 (or none) means no limit; a burst of 0 with an interval refuses
//! every request, as Go's limiter does. Requests beyond it are answered 429 before any password
//! check. Unlike the toolkit, the open probe paths are never limited (a kubelet must not
//! restart a healthy exporter because scrapers were too eager).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The longest interval a file may give (longer ones are surely a mistake, and bound the
/// arithmetic).
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// A request rate limit: at most `burst` requests at once, one more every `interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Time to earn one more request.
    pub interval: Duration,
    /// Requests that may arrive at once (0: none ever, as in Go).
    pub burst: u32,
}

/// The token bucket of one loaded config.
pub(crate) struct Bucket {
    limit: RateLimit,
    /// Tokens held and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub(crate) fn new(limit: RateLimit) -> Bucket {
        Bucket {
            limit,
            state: Mutex::new((f64::from(limit.burst), Instant::now())),
        }
    }

    /// The limit it enforces.
    pub(crate) fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Takes one request's token, if there is one.
    pub(crate) fn allow(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let earned = now.duration_since(state.1).as_secs_f64() / self.limit.interval.as_secs_f64();
        let tokens = (state.0 + earned).min(f64::from(self.limit.burst));
        let allowed = tokens >= 1.0;
        *state = (if allowed { tokens - 1.0 } else { tokens }, now);
        allowed
    }
}

/// A Go duration (`time.ParseDuration`: `1s`, `1m30s`, `250ms`, `1.5h`, `0`), or an integer
/// of nanoseconds (how Go's YAML reads a bare number into a `time.Duration`); negative ones and
/// ones over a day are refused.
pub(crate) fn go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 1s, 250ms or 1m30s");
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!("{text:?} is negative"));
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() || t.len() > 64 {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = t;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[u..];
    }
    if total > MAX_INTERVAL.as_secs_f64() {
        return Err(format!("{text:?} is over a day"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// `interval` given as a number of nanoseconds, held to the same day as a text one.
pub(crate) fn at_most_a_day(interval: Duration) -> Result<Duration, String> {
    if interval > MAX_INTERVAL {
        return Err(format!("{} ns is over a day", interval.as_nanos()));
    }
    Ok(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        let ok = |t: &str| go_duration(t).ok();
        assert_eq!(ok("1s"), Some(Duration::from_secs(1)));
        assert_eq!(ok("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(ok("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(ok("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(ok("0"), Some(Duration::ZERO));
        assert_eq!(ok("0s"), Some(Duration::ZERO));
        for bad in [
            "",
            "1",
            "s",
            "1x",
            "-1s",
            "1s-",
            "25h",
            "1..5s",
            "9999999999999h",
        ] {
            assert_eq!(ok(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_bucket_holds_burst_and_refills_one_per_interval() {
        let b = Bucket::new(RateLimit {
            interval: Duration::from_millis(200),
            burst: 2,
        });
        assert!(b.allow());
        assert!(b.allow());
        assert!(!b.allow(), "burst spent");
        std::thread::sleep(Duration::from_millis(250));
        assert!(b.allow(), "one earned");
        assert!(!b.allow());
        let none = Bucket::new(RateLimit {
            interval: Duration::from_secs(1),
            burst: 0,
        });
        assert!(
            !none.allow(),
            "burst 0 refuses everything, as Go's limiter does"
        );
    }
}
