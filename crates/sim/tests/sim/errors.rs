//! Scenario errors name the file, line and key; no mangled scenario panics.

use dgx_pixels_sim::{Node, Scenario, ScenarioError, BUILTIN_SCENARIOS};

use super::{secs, GPU};

fn err(text: &str) -> ScenarioError {
    match Scenario::from_toml_str(text, "bad.toml") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    }
}

fn assert_err(e: &ScenarioError, line: usize, key: &str, detail: &str) {
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.starts_with("scenario bad.toml "), "{msg}");
    assert!(
        msg.contains(&format!(" line {line}: ")),
        "line {line}: {msg}"
    );
    assert!(msg.contains(&format!("key {key}: ")), "key {key}: {msg}");
    assert!(msg.contains(detail), "{detail}: {msg}");
    assert_eq!(e.line(), Some(line), "{msg}");
    assert_eq!(e.key(), Some(key), "{msg}");
    assert_eq!(e.origin(), Some("bad.toml"));
}

/// Line number (1-based) of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[test]
fn error_out_of_range_value_names_line_and_key() {
    let text = format!(
        "{GPU}\n[[gpus]]\ncount = 2\n{}",
        &GPU[GPU.find("name = \"NVIDIA").unwrap()..]
    )
    .replacen("power_limit_watts = 700.0", "power_limit_watts = 700.0", 1);
    // Make the second [[gpus]] table's power limit negative.
    let idx = text.rfind("power_limit_watts = 700.0").unwrap();
    let text = format!(
        "{}power_limit_watts = -5{}",
        &text[..idx],
        &text[idx + 25..]
    );
    let e = err(&text);
    let line = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("power_limit_watts"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    assert_err(
        &e,
        line,
        "gpus[1].power_limit_watts",
        "expected a number > 0",
    );
    assert_eq!(
        e.to_string(),
        format!(
            "scenario bad.toml line {line}: key gpus[1].power_limit_watts: expected a number > 0"
        )
    );
}

#[test]
fn error_ratio_out_of_range() {
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = 1.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "utilization = 1.5"),
        "phases[0].utilization",
        "between 0 and 1",
    );
    let text = format!("{GPU}\n[[phases]]\nstart_s = -1\nutilization = 0.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "start_s = -1"),
        "phases[0].start_s",
        "seconds",
    );
    let text = format!("{GPU}\n[[phases]]\nstart_s = nan\nutilization = 0.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "start_s = nan"),
        "phases[0].start_s",
        "seconds",
    );
}

#[test]
fn error_syntax() {
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = = 0.5\n");
    let e = err(&text);
    assert_err(&e, line_of(&text, "= = 0.5"), "phases[0].utilization", "");
    let text = format!("{GPU}\n[[phases]\nstart_s = 0\n");
    let e = err(&text);
    assert_eq!(e.line(), Some(line_of(&text, "[[phases]")), "{e}");
    assert!(e.to_string().starts_with("scenario bad.toml line "), "{e}");
}

#[test]
fn error_wrong_type() {
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = \"high\"\n");
    assert_err(
        &err(&text),
        line_of(&text, "\"high\""),
        "phases[0].utilization",
        "invalid type",
    );
    let text = GPU.replace("nvlink_count = 18", "nvlink_count = 1.5");
    assert_err(
        &err(&text),
        line_of(&text, "nvlink_count"),
        "gpus[0].nvlink_count",
        "invalid type",
    );
}

#[test]
fn error_unknown_key() {
    let text = GPU.replace("nvlink_count = 18", "nvlink_count = 18\nnvlinks = 18");
    let e = err(&text);
    assert_err(
        &e,
        line_of(&text, "nvlinks ="),
        "gpus[0].nvlinks",
        "unknown field `nvlinks`",
    );
    let text =
        format!("{GPU}\n[[faults]]\nkind = \"xid\"\ngpu = 0\nat_s = 1\nxid = 13\nwhen = 3\n");
    assert_err(
        &err(&text),
        line_of(&text, "when = 3"),
        "faults[0].when",
        "unknown field",
    );
    let text = format!("{GPU}\n[extra]\nx = 1\n");
    assert_err(
        &err(&text),
        line_of(&text, "[extra]"),
        "extra",
        "unknown field `extra`",
    );
    let text = format!("{GPU}\n[[faults]]\nkind = \"meteor\"\ngpu = 0\nat_s = 1\n");
    assert_err(
        &err(&text),
        line_of(&text, "meteor"),
        "faults[0].kind",
        "unknown variant",
    );
}

#[test]
fn error_gpu_index_out_of_range() {
    let text = format!("{GPU}\n[[faults]]\nkind = \"xid\"\ngpu = 3\nat_s = 1\nxid = 13\n");
    assert_err(
        &err(&text),
        line_of(&text, "gpu = 3"),
        "faults[0].gpu",
        "out of range",
    );
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\ngpus = [0, 1]\nutilization = 0.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "gpus = [0, 1]"),
        "phases[0].gpus",
        "GPU index 1 out of range",
    );
    let text = format!("{GPU}\n[[mig]]\ngpu = 9\nprofiles = [\"1g.10gb\"]\n");
    assert_err(
        &err(&text),
        line_of(&text, "gpu = 9"),
        "mig[0].gpu",
        "out of range",
    );
}

#[test]
fn error_missing_and_inconsistent_keys() {
    let text = GPU.replace("power_limit_watts = 700.0\n", "");
    let e = err(&text);
    assert_eq!(e.key(), Some("gpus[0].power_limit_watts"), "{e}");
    assert!(
        e.to_string().contains("missing field `power_limit_watts`"),
        "{e}"
    );
    assert!(e.line().is_some(), "{e}");

    let text = format!("{GPU}\n[[faults]]\nkind = \"thermal\"\ngpu = 0\nat_s = 10\n");
    assert_err(
        &err(&text),
        line_of(&text, "[[faults]]"),
        "faults[0].until_s",
        "need until_s",
    );
    let text = format!("{GPU}\n[[faults]]\nkind = \"thermal\"\ngpu = 0\nat_s = 10\nuntil_s = 5\n");
    assert_err(
        &err(&text),
        line_of(&text, "until_s = 5"),
        "faults[0].until_s",
        "after at_s",
    );
    let text =
        format!("{GPU}\n[[faults]]\nkind = \"xid\"\ngpu = 0\nat_s = 10\nxid = 13\nuntil_s = 20\n");
    assert_err(
        &err(&text),
        line_of(&text, "until_s = 20"),
        "faults[0].until_s",
        "not used by faults of kind \"xid\"",
    );
    let text = format!("{GPU}\n[[mig]]\ngpu = 0\nprofiles = [\"4g.40gb\", \"4g.40gb\"]\n");
    assert_err(
        &err(&text),
        line_of(&text, "profiles"),
        "mig[0].profiles",
        "7",
    );
    let text = format!("{GPU}\n[[mig]]\ngpu = 0\nprofiles = [\"big\"]\n");
    assert_err(
        &err(&text),
        line_of(&text, "profiles"),
        "mig[0].profiles",
        "not a MIG profile",
    );
    let text = GPU.replace(
        "idle_graphics_clock_hz = 345_000_000",
        "idle_graphics_clock_hz = 3_000_000_000",
    );
    assert_err(
        &err(&text),
        line_of(&text, "idle_graphics"),
        "gpus[0].idle_graphics_clock_hz",
        "at most",
    );
    let text = format!(
        "{GPU}\n[workload]\nrepeat_after_s = 60\n[[phases]]\nstart_s = 60\nutilization = 0.5\n"
    );
    assert_err(
        &err(&text),
        line_of(&text, "start_s = 60"),
        "phases[0].start_s",
        "before workload.repeat_after_s",
    );
}

#[test]
fn error_for_a_file_names_the_path() {
    let dir = std::env::temp_dir().join(format!("dgx-pixels-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = 0.5\n"),
    )
    .unwrap();
    let s = Scenario::load(good.to_str().unwrap()).unwrap();
    assert_eq!(s.name(), "custom");
    assert_eq!(s.origin(), good.to_str().unwrap());
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, GPU.replace("seed = 3", "seed = \"three\"")).unwrap();
    let e = Scenario::load(bad.to_str().unwrap()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "scenario {} line 4: key node.seed: ",
            bad.display()
        )),
        "{msg}"
    );
    // A directory exists but cannot be read as a file.
    let e = Scenario::load(dir.to_str().unwrap()).unwrap_err();
    assert!(matches!(e, ScenarioError::Read { .. }), "{e}");
    assert!(e.to_string().contains(dir.to_str().unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_scenario_lists_the_builtins() {
    let e = Scenario::load("foo").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("unknown scenario \"foo\": not a built-in (dgx-h100, dgx-a100-mig, "),
        "{msg}"
    );
    assert!(msg.ends_with(") and no such file"), "{msg}");
    for name in BUILTIN_SCENARIOS {
        assert!(msg.contains(name), "{msg}");
    }
    assert!(matches!(
        Scenario::load(""),
        Err(ScenarioError::Unknown { .. })
    ));
    assert!(matches!(
        Scenario::load("/no/such/dir/x.toml"),
        Err(ScenarioError::Unknown { .. })
    ));
}

/// Mangled versions of every built-in never panic: they load (and run) or give an error.
#[test]
fn mangled_scenarios_never_panic() {
    let replacements = [
        "",
        "x = ",
        "= 1",
        "-1",
        "0",
        "nan",
        "inf",
        "-inf",
        "1e300",
        "\"s\"",
        "[",
        "[[gpus]]",
        "99999999999",
    ];
    let mut errors = 0;
    for name in BUILTIN_SCENARIOS {
        let text = Scenario::builtin_text(name).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for i in 0..lines.len() {
            for rep in replacements {
                let mut mangled = lines.clone();
                let new_line = match lines[i].split_once('=') {
                    Some((k, _)) if !rep.is_empty() && !rep.starts_with('[') => {
                        format!("{k}= {rep}")
                    }
                    _ => rep.to_string(),
                };
                mangled[i] = &new_line;
                match Scenario::from_toml_str(&mangled.join("\n"), "m.toml") {
                    Ok(s) => {
                        let mut n = Node::new(s);
                        for t in [0.0, 25.0, 95.0] {
                            let _ = n.readings(secs(t));
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        let msg = e.to_string();
                        assert!(msg.starts_with("scenario m.toml"), "{msg}");
                        assert!(!msg.contains('\n'), "{msg}");
                    }
                }
            }
        }
    }
    assert!(errors > 100);
}
