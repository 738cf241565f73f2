//! Deterministic pseudo-noise: a small counter-based hash (splitmix64), so that the value for a
//! given (seed, GPU, stream, step) never depends on call order. No `rand` dependency.

/// One round of splitmix64's output function.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash of a tuple of words.
pub(crate) fn hash(seed: u64, a: u64, b: u64, c: u64) -> u64 {
    let mut h = splitmix64(seed);
    h = splitmix64(h ^ a);
    h = splitmix64(h ^ b.rotate_left(17));
    splitmix64(h ^ c.rotate_left(41))
}

/// Uniform value in `[-1, 1)`.
pub(crate) fn unit(seed: u64, a: u64, b: u64, c: u64) -> f64 {
    let bits = hash(seed, a, b, c) >> 11; // 53 bits
    (bits as f64) / ((1u64 << 53) as f64) * 2.0 - 1.0
}

/// Uniform value in `[0, 1)`.
pub(crate) fn unit01(seed: u64, a: u64, b: u64, c: u64) -> f64 {
    (unit(seed, a, b, c) + 1.0) / 2.0
}

/// Number of steps over which the slow noise component varies (3 s at 100 ms steps).
const SMOOTH_PERIOD: u64 = 30;

/// Noise in `[-1, 1]` for one step: a slowly varying component (smoothly interpolated between
/// hashed knots) plus a little per-step jitter, so readings wander instead of flickering.
pub(crate) fn noise(seed: u64, gpu: u64, stream: u64, step: u64) -> f64 {
    let j = step / SMOOTH_PERIOD;
    let f = (step % SMOOTH_PERIOD) as f64 / SMOOTH_PERIOD as f64;
    let s = f * f * (3.0 - 2.0 * f);
    let a = unit(seed, gpu, stream, j);
    let b = unit(seed, gpu, stream, j.wrapping_add(1));
    let smooth = a + (b - a) * s;
    let white = unit(seed, gpu, stream ^ 0x5151_0000, step);
    (0.7 * smooth + 0.3 * white).clamp(-1.0, 1.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unit_is_in_range_and_deterministic() {
        for i in 0..10_000 {
            let u = unit(7, 1, 2, i);
            assert!((-1.0..1.0).contains(&u));
            assert_eq!(u.to_bits(), unit(7, 1, 2, i).to_bits());
            let n = noise(7, 1, 2, i);
            assert!((-1.0..=1.0).contains(&n));
        }
        assert_ne!(hash(1, 2, 3, 4), hash(1, 2, 3, 5));
    }
}
