//! `analyze PATH...`: the JSON report of `dgx-pixels-exporter trace analyze --format json`,
//! from the library alone (used by the benchmark so it does not need the whole exporter).

use dgx_pixels_trace::load::{load_and_analyze, LoadOptions};
use dgx_pixels_trace::DEFAULT_MAX_VALUE_BYTES;

fn main() -> std::process::ExitCode {
    let paths: Vec<std::path::PathBuf> = std::env::args().skip(1).map(Into::into).collect();
    let input = LoadOptions {
        items_per_step: None,
        items_name: "items".into(),
        max_event_bytes: DEFAULT_MAX_VALUE_BYTES,
        max_decompressed_bytes: dgx_pixels_trace::parse::DEFAULT_MAX_TEXT_BYTES,
        max_rows: dgx_pixels_trace::parse::DEFAULT_MAX_ROWS,
    };
    match load_and_analyze(&paths, &input, None) {
        Ok(rep) => match serde_json::to_string(&rep) {
            Ok(s) => {
                println!("{s}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("analyze: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("analyze: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
