//! Structured logs on stderr (stdout is for the admin commands' JSON), text or JSON. Request
//! spans carry the request id; nothing logs a secret, a bearer or the database URL.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat, filter: &str) {
    let mut filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // actix-http logs a malformed request at ERROR; the refusal is logged at WARN with its
    // request id instead (api_actix::wire), unless the filter asks for actix-http itself.
    if !filter.to_string().contains("actix_http") {
        if let Ok(quiet) = "actix_http::h1::dispatcher=off".parse() {
            filter = filter.add_directive(quiet);
        }
    }
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
}
