//! Tracing set-up: text (tracing's default `key=value` fields) or JSON, with the access log on the
//! `access` target (SPEC section 8). `RUST_LOG` overrides the default `info` filter.

use tracing_subscriber::EnvFilter;

pub mod fields;
pub mod time;

/// Output format of logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. Safe to call once per process; later calls are ignored.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,h2=warn,hyper=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
    // An Err means a subscriber is already installed (tests): keep it.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(false)
            .fmt_fields(fields::TextFields)
            .with_timer(time::LogTime)
            .try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
