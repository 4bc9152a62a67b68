//! Structured logs on stderr (stdout is for the admin commands' JSON), text or JSON. Request
//! spans carry the request id; nothing logs a secret, a bearer or the database URL.
//!
//! A line is formatted where it is logged and written by a thread of its own, through a
//! buffer flushed each time no line is waiting: a request's log line costs its worker no write
//! to stderr, at most a wake-up of the writer (writing each line to stderr from the HTTP workers
//! was a visible share of the service's CPU under a `/start` load). No line is dropped: when
//! [`WAITING_LINES`] wait, logging waits for the writer.

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Lines that may wait for the writer. The queue is allocated whole at start (32 bytes a
/// line): with the library's default, 128,000, an idle process was measurably bigger, against
/// the idle-RSS goal (docs/benchmarks.md).
const WAITING_LINES: usize = 8_192;

/// Installs the logger; the returned guard writes out the lines still waiting when it is
/// dropped, so `main` holds it until it returns.
#[must_use = "dropping the guard stops the log writer"]
pub fn init(format: LogFormat, filter: &str) -> WorkerGuard {
    let mut filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // actix-http logs a malformed request at ERROR; the refusal is logged at WARN with its
    // request id instead (api_actix::wire), unless the filter asks for actix-http itself.
    if !filter.to_string().contains("actix_http") {
        if let Ok(quiet) = "actix_http::h1::dispatcher=off".parse() {
            filter = filter.add_directive(quiet);
        }
    }
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, guard) = NonBlockingBuilder::default()
        .buffered_lines_limit(WAITING_LINES)
        .lossy(false)
        .thread_name("log-writer")
        .finish(std::io::BufWriter::new(std::io::stderr()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(colour);
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
        LogFormat::Text => builder.init(),
    }
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(%location, panic = %message, "panic");
    }));
    guard
}
