//! The `--help` of the one-shot subcommands (`trace`, `probe`) is what it was before their code
//! moved to crates/tools: the texts in tests/data/help were written by the binary of the commit
//! before the move (c2fa97e).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;
use std::process::Command;

#[test]
fn subcommand_help_is_unchanged() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/help");
    for args in [
        "trace",
        "trace analyze",
        "trace compare",
        "probe",
        "probe run",
        "probe compare",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dgx-pixels-exporter"))
            .args(args.split(' '))
            .arg("--help")
            .env("COLUMNS", "100")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args} --help: {out:?}");
        let want =
            std::fs::read_to_string(data.join(format!("{}.txt", args.replace(' ', "-")))).unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{args} --help");
    }
}
