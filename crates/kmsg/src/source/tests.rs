use super::*;

/// A `/dev/kmsg` record is timed by its kernel timestamp, so one replayed from long ago
/// cannot match a fresh NVML event; a file's records are timed when read.
#[test]
fn records_are_timed_by_the_kernel_clock_on_the_device_only() {
    let now = Instant::now();
    let mono = Some(100_000_000); // 100 s since boot
    let old = logged_at(Kind::CharDevice, 40_000_000, now, mono);
    assert_eq!(now.duration_since(old), Duration::from_secs(60));
    assert_eq!(logged_at(Kind::Regular, 40_000_000, now, mono), now);
    assert_eq!(logged_at(Kind::Fifo, 40_000_000, now, mono), now);
    // A timestamp from the future (another clock): when it was read.
    assert_eq!(logged_at(Kind::CharDevice, 200_000_000, now, mono), now);
    assert_eq!(logged_at(Kind::CharDevice, 1, now, None), now);
    assert!(monotonic_us().is_some_and(|m| m > 0));
}
