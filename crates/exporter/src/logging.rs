//! Logging to stderr in logfmt (default) or JSON, through tracing-subscriber.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber. `RUST_LOG`, when set, refines the configured level.
pub fn init(settings: &LogSettings) -> Result<(), String> {
    let filter = EnvFilter::try_new(&settings.level)
        .map_err(|e| format!("log.level {:?}: {e}", settings.level))?;
    let layer = match settings.format {
        LogFormat::Logfmt => tracing_logfmt::builder()
            .with_span_name(false)
            .with_span_path(false)
            .layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))
}
