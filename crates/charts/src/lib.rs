//! What the PNG charts of `probe compare` and `trace analyze --chart` (both in crates/tools)
//! share. plotters draws text only with a registered font and ships none, so the
//! labels use a system sans-serif font when one is installed; without one the charts are drawn
//! without text and the reports beside them carry the labels.
//!
//! ```
//! let labelled = dgx_pixels_charts::sans_serif_font();
//! // Draw with `("sans-serif", 14)` text styles only when `labelled` is true.
//! # let _ = labelled;
//! ```
#![deny(missing_docs)]

use std::sync::OnceLock;

use plotters::style::FontStyle;

/// Font files tried, in order (Debian, Fedora, Arch, then Liberation).
const CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a system sans-serif font as plotters' "sans-serif", once per process; false when
/// none is found.
pub fn sans_serif_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        for path in CANDIDATES {
            if let Ok(bytes) = std::fs::read(path) {
                // plotters keeps the font for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}
