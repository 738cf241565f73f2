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
