//! Property-based fuzzing of the textfile parser: any file content parses or is rejected with
//! a one-line error naming a line of the file that has content (a line number from 1, never the
//! "whole file" 0: the parser always knows where); never a panic.
#![allow(clippy::unwrap_used)]

use dgx_pixels_fuzz::inputs;
use dgx_pixels_textfile::parse::parse;
use proptest::prelude::*;

const SEEDS: &[&str] = &[
    "# HELP job_images_total Images generated.\n# TYPE job_images_total counter\njob_images_total{model=\"sdxl\",lora=\"none\"} 1027\n",
    "# TYPE latency_seconds histogram\nlatency_seconds_bucket{le=\"0.1\"} 3\nlatency_seconds_bucket{le=\"0.2\"} 9\nlatency_seconds_bucket{le=\"+Inf\"} 10\nlatency_seconds_sum 1.7\nlatency_seconds_count 10\n",
    "# TYPE q summary\nq{quantile=\"0.5\"} 0.2\nq{quantile=\"0.99\"} 0.9\nq_sum 12\nq_count 40\nuntyped_thing{a=\"x\\\\y\\n\\\"z\\\"\"} -Inf\n",
];

proptest! {
    #[test]
    fn parsing_never_panics_and_errors_name_a_line(text in inputs(SEEDS)) {
        if let Err(e) = parse(&text, "from a textfile") {
            let lines: Vec<&str> = text.split('\n').collect();
            prop_assert!(
                (1..=lines.len()).contains(&e.line),
                "line {} of {}: {}", e.line, lines.len(), e.message
            );
            prop_assert!(
                !lines[e.line - 1].trim().is_empty(),
                "line {} is blank, so it cannot be the problem: {}", e.line, e.message
            );
            prop_assert!(!e.message.contains('\n'), "{}", e.message);
        }
    }
}
