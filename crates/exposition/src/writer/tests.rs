use super::*;

fn histogram(counts: &[f64], sum: Option<f64>, count: Option<f64>) -> Histogram<'static> {
    let mut buckets: Vec<Bucket<'static>> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| Bucket {
            bound: i as f64,
            text: None,
            count: *c,
        })
        .collect();
    if let Some(last) = buckets.last_mut() {
        last.bound = f64::INFINITY;
    }
    Histogram {
        buckets,
        sum,
        count,
    }
}

#[test]
fn only_whole_complete_histograms_are_client_spelled() {
    assert_eq!(
        integral(&histogram(&[1.0, 3.0], Some(2.5), Some(3.0))),
        Some((2.5, 3))
    );
    // No `_count` given: the +Inf bucket is the count.
    assert_eq!(
        integral(&histogram(&[1.0, 3.0], Some(2.5), None)),
        Some((2.5, 3))
    );
    for (counts, sum, count) in [
        (&[0.5, 1.5][..], Some(1.0), Some(1.5)),
        (&[1.0, 3.0][..], None, Some(3.0)),
        (&[3.0, 1.0][..], Some(1.0), Some(1.0)),
        (&[1.0, 3.0][..], Some(1.0), Some(4.0)),
        (&[-1.0, 3.0][..], Some(1.0), Some(3.0)),
        (&[1.0, 1e300][..], Some(1.0), Some(1e300)),
        (&[1.0, f64::NAN][..], Some(1.0), None),
    ] {
        assert_eq!(integral(&histogram(counts, sum, count)), None, "{counts:?}");
    }
}

#[test]
fn bounds_are_spelled_in_one_place_per_spelling() {
    let le = |bound: f64, text: Option<&'static str>, spelling| {
        let mut out = String::new();
        push_le(
            &mut out,
            &Bucket {
                bound,
                text,
                count: 0.0,
            },
            spelling,
        );
        out
    };
    assert_eq!(le(100.0, None, Spelling::Classic), "100");
    assert_eq!(le(100.0, None, Spelling::Client), "100.0");
    assert_eq!(le(0.01, None, Spelling::Classic), "0.01");
    assert_eq!(le(0.01, None, Spelling::Client), "0.01");
    for spelling in [Spelling::Classic, Spelling::Client] {
        assert_eq!(le(f64::INFINITY, None, spelling), "+Inf");
        assert_eq!(le(1.0, Some("1.0"), spelling), "1.0", "an author's text");
    }
}

/// prometheus-client 0.25, which used to write these families, is the oracle of
/// [`Spelling::Client`]: a value written as it wrote a gauge or counter (an integer where the
/// old encoder handed it one, a float otherwise), and a histogram's `_sum`, `_count` and
/// bucket bounds, byte for byte, over edge values (fractions, exponents, huge and tiny, signs,
/// infinities).
mod client_oracle {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram as ClientHistogram;
    use prometheus_client::registry::Registry;
    use std::sync::atomic::AtomicU64;

    const VALUES: &[f64] = &[
        0.0,
        1.0,
        -1.0,
        0.5,
        -0.25,
        1.0 / 3.0,
        123_456_789.25,
        1e15,
        1.5e15,
        1e16,
        9_007_199_254_740_993.0,
        1e21,
        1e300,
        -1e300,
        1e-7,
        5e-324,
        f64::MAX,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];

    /// The sample line prometheus-client writes for `registry`'s one family named `x`.
    fn client_line(registry: &Registry, prefix: &str) -> String {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {out}"))
            .to_string()
    }

    fn ours(v: f64, counter: bool) -> String {
        let mut out = String::new();
        push_number(&mut out, v, Spelling::Client, counter);
        out
    }

    #[test]
    fn gauge_values_are_spelled_as_prometheus_client_spelled_them() {
        for &v in VALUES {
            let mut registry = Registry::default();
            // The old encoder handed prometheus-client an integer where the value was whole.
            match whole(v) {
                Some(n) => {
                    let g = Gauge::<i64>::default();
                    g.set(n);
                    registry.register("x", "h", g);
                }
                None => {
                    let g = Gauge::<f64, AtomicU64>::default();
                    g.set(v);
                    registry.register("x", "h", g);
                }
            }
            assert_eq!(
                client_line(&registry, "x "),
                format!("x {}", ours(v, false)),
                "{v:e}"
            );
        }
    }

    #[test]
    fn counter_values_are_spelled_as_prometheus_client_spelled_them() {
        for &v in VALUES.iter().filter(|v| **v >= 0.0 && v.is_finite()) {
            let mut registry = Registry::default();
            match whole(v).filter(|n| *n >= 0) {
                Some(n) => {
                    let c = Counter::<u64>::default();
                    c.inc_by(n as u64);
                    registry.register("x", "h", c);
                }
                None => {
                    let c = Counter::<f64, AtomicU64>::default();
                    c.inc_by(v);
                    registry.register("x", "h", c);
                }
            }
            assert_eq!(
                client_line(&registry, "x_total "),
                format!("x_total {}", ours(v, true)),
                "{v:e}"
            );
        }
    }

    #[test]
    fn a_histogram_is_laid_out_and_spelled_as_prometheus_client_wrote_it() {
        let bounds = [1e-7, 0.005, 0.5, 1.0, 2.5, 100.0, 1e15, 1e16, 1e300];
        let observed = [0.001, 0.75, 3.0, 3.0, 2e15];
        let client = ClientHistogram::new(bounds.iter().copied());
        for v in observed {
            client.observe(v);
        }
        let mut registry = Registry::default();
        registry.register("x", "h", client);
        let mut expected = String::new();
        encode(&mut expected, &registry).unwrap();
        let expected: Vec<&str> = expected.lines().filter(|l| l.starts_with("x_")).collect();

        let mut buckets: Vec<Bucket<'static>> = bounds
            .iter()
            .map(|b| Bucket {
                bound: *b,
                text: None,
                count: observed.iter().filter(|v| **v <= *b).count() as f64,
            })
            .collect();
        buckets.push(Bucket {
            bound: f64::INFINITY,
            text: None,
            count: observed.len() as f64,
        });
        let sum: f64 = observed.iter().sum();
        let h = Histogram {
            buckets,
            sum: Some(sum),
            count: Some(observed.len() as f64),
        };
        let mut out = String::new();
        client_histogram(&mut out, "x", "", &h, sum, observed.len() as u64);
        let got: Vec<&str> = out.lines().collect();
        assert_eq!(got, expected);
    }
}
