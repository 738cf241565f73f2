//! README's quick tour is true: the README's first command (read from README.md itself, so this
//! breaks when the README changes), run as written with default flags, serves every series the
//! tour names within 60 s, and the status page it points to shows the probes.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common;
use common::*;

const README: &str = include_str!("../../../../README.md");

/// The exporter's arguments of README's first command: the first `sh` block after "The two
/// commands", a `cargo run` whose arguments follow `--`.
fn first_command_args() -> Vec<String> {
    let section = &README[README.find("## The two commands").unwrap()..];
    let block = &section[section.find("```sh\n").unwrap() + 6..];
    let command = block[..block.find("```").unwrap()].trim();
    assert!(!command.contains('\n'), "one command: {command}");
    let (cargo, args) = command.split_once(" -- ").unwrap();
    assert!(cargo.starts_with("cargo run"), "{command}");
    args.split_whitespace().map(String::from).collect()
}

/// The quick tour: from its heading line to the next paragraph that is not a list item.
fn tour() -> &'static str {
    let start = README.find("Quick tour").expect("README has a quick tour");
    let rest = &README[start..];
    let end = rest.find("\n\nRun all the tests").unwrap();
    &rest[..end]
}

/// Every `dgx_pixels_*` name the tour mentions; a trailing `_` is a prefix.
fn tour_series() -> Vec<&'static str> {
    let t = tour();
    let mut names: Vec<&str> = t
        .match_indices("dgx_pixels_")
        .map(|(i, _)| {
            let rest = &t[i..];
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..len]
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[test]
fn the_readme_tour_names_five_lines_and_the_first_command() {
    let items = tour().lines().filter(|l| l.starts_with("- ")).count();
    assert_eq!(items, 5, "{}", tour());
    assert_eq!(first_command_args(), ["--simulate", "dgx-h100"]);
    assert!(tour().contains("<http://localhost:9403/>"));
    assert!(tour().contains("localhost:9403/metrics"));
    // The tour adds no command block: README keeps its two set-up commands.
    assert!(!tour().contains("```"), "{}", tour());
}

#[test]
fn every_series_the_readme_tour_names_is_served_within_60_s() {
    let names = tour_series();
    assert!(names.len() >= 10, "{names:?}");
    let args = first_command_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let d = start(&args);
    let mut seen: BTreeMap<&str, f64> = BTreeMap::new();
    while seen.len() < names.len() && started.elapsed() < Duration::from_secs(60) {
        let body = text(d.port);
        for name in &names {
            let served = body
                .lines()
                .any(|l| !l.starts_with('#') && l.starts_with(name));
            if served && !seen.contains_key(name) {
                seen.insert(name, started.elapsed().as_secs_f64());
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let missing: Vec<&&str> = names.iter().filter(|n| !seen.contains_key(*n)).collect();
    assert!(
        missing.is_empty(),
        "not served within 60 s: {missing:?}; seen: {seen:?}"
    );
    eprintln!("first served (s after start): {seen:?}");
    // The page the tour opens shows each GPU's probe state.
    let (status, _, body) = get(d.port, "/", &[]);
    assert_eq!(status, 200);
    let page = String::from_utf8(body).unwrap();
    assert_eq!(page.matches("<tr class=\"probes\"").count(), 8, "{page}");
}
