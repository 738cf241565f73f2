//! Logging to stderr in logfmt (default) or JSON, through tracing-subscriber.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter, Layer, Registry};

use crate::config::{LogFormat, LogSettings};

/// Changes the log level of the installed subscriber (a config reload).
pub struct LevelHandle(reload::Handle<EnvFilter, Registry>);

impl LevelHandle {
    /// Applies `level` (an `EnvFilter` directive); a bad one changes nothing.
    pub fn set(&self, level: &str) -> Result<(), String> {
        let filter = parse(level)?;
        self.0
            .reload(filter)
            .map_err(|e| format!("cannot change the log level: {e}"))
    }
}

/// Checks a level without applying it.
pub fn parse(level: &str) -> Result<EnvFilter, String> {
    EnvFilter::try_new(level).map_err(|e| format!("log.level {level:?}: {e}"))
}

/// Installs the global subscriber. `RUST_LOG`, when set, refines the configured level.
pub fn init(settings: &LogSettings) -> Result<LevelHandle, String> {
    let (filter, handle) = reload::Layer::new(parse(&settings.level)?);
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
        .map_err(|e| format!("cannot install the logger: {e}"))?;
    Ok(LevelHandle(handle))
}
