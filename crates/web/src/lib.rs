//! Serving HTTP the way Prometheus exporters do, with the safety a daemon on every GPU node needs.
//!
//! - [`WebConfig`]: the web config file of Prometheus' exporter-toolkit (`--web.config.file`):
//!   TLS through rustls (with client-certificate verification and allowed SANs), bcrypt basic
//!   auth, extra response headers and a request rate limit. The same file works for
//!   node_exporter and for us; docs/security.md ("exporter-toolkit parity") says where and why
//!   we are stricter.
//! - [`WebState`]: the live config. It is re-read when the file changes (checked every few
//!   seconds, once it has not changed for a moment, so a file being written is not read) or on
//!   request (SIGHUP). Reloads fail closed: a bad, empty or unreadable file, or one that would
//!   take TLS, client-certificate verification or authentication away from the running server,
//!   is logged at error and counted, and the old config keeps serving. A reload that loosens a
//!   lesser setting (the rate limit, a response header, TLS 1.3 only) applies with a warning
//!   line per change; one that keeps `rate_limit` keeps its bucket. New connections use the
//!   new TLS certificate, so certificates rotate without a restart.
//! - [`guard`]: the middleware that enforces the rate limit and basic auth (successful checks
//!   are cached, so a scrape does not pay bcrypt every time; an unknown user costs one check of
//!   a fixed cost-10 dummy), refuses request bodies and adds the headers.
//! - [`serve`]: the accept loop, with [`Limits`]: a cap on open connections (the ones beyond are
//!   closed at once, so memory stays bounded whatever the number of clients), a TLS handshake
//!   timeout, hyper's header read timeout against slow-header clients, and stall timeouts that
//!   close a connection only when it makes no progress at all, so a slow but honest scraper is
//!   never cut off.
#![deny(missing_docs)]

mod auth;
mod config;
mod listen;
mod rate;
mod serve;
mod state;

pub use auth::{guard, MAX_PASSWORD_CHECKS};
pub use config::{ClientAuth, WebConfig, WebConfigError};
pub use dgx_pixels_settings::file::{read_regular, MAX_CONFIG_FILE_BYTES};
pub use listen::listen;
pub use rate::RateLimit;
pub use serve::{serve, Limits, DEFAULT_MAX_CONNECTIONS_PER_CLIENT, PROBE_RESERVE};
pub use state::{Counters, WebState};
