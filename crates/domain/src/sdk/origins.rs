//! The web origins an SDK key lets into the end-user API from a browser (docs/api.md, Browser
//! access): each exactly as a browser writes its `Origin` header, so that a request's origin is
//! allowed by comparing text, never by a pattern.
//!
//! ```
//! use workbench_domain::sdk::origin_problem;
//!
//! assert_eq!(origin_problem("https://app.example.com"), None);
//! assert_eq!(origin_problem("http://127.0.0.1:18291"), None);
//! assert!(origin_problem("https://app.example.com/").is_some()); // no path
//! assert!(origin_problem("https://*.example.com").is_some()); // exact origins only
//! assert!(origin_problem("https://App.example.com").is_some()); // browsers send lowercase
//! assert!(origin_problem("https://app.example.com:443").is_some()); // nor the default port
//! ```

use crate::FieldError;

/// The most `allowedOrigins` of one key.
pub const MAX_ALLOWED_ORIGINS: usize = 20;
/// Longest origin, in characters.
pub const ORIGIN_MAX_CHARS: usize = 200;

/// What is wrong with `origin` as an allowed origin, if anything: it must be `http://` or
/// `https://`, a host in lowercase (a name, an IPv4 address or a bracketed IPv6 one) and an
/// optional port other than the scheme's default, with no path, query, user or wildcard.
pub fn origin_problem(origin: &str) -> Option<&'static str> {
    if origin.is_empty() || origin.chars().count() > ORIGIN_MAX_CHARS {
        return Some("an origin is 1 to 200 characters");
    }
    let (rest, default_port) = if let Some(rest) = origin.strip_prefix("https://") {
        (rest, "443")
    } else if let Some(rest) = origin.strip_prefix("http://") {
        (rest, "80")
    } else {
        return Some("an origin starts with `https://` or `http://`");
    };
    let (host, port) = split_port(rest);
    if !host_is_valid(host) {
        return Some(
            "an origin is a scheme and a host in lowercase, with an optional port, and nothing \
             else (no path, no trailing `/`, no wildcard)",
        );
    }
    match port {
        None => None,
        Some(p) if p == default_port => Some("leave out the scheme's default port"),
        Some(p) => {
            let number = p
                .parse::<u16>()
                .ok()
                .filter(|n| *n > 0 && !p.starts_with('0'));
            number
                .is_none()
                .then_some("a port is a number from 1 to 65535")
        }
    }
}

/// `host[:port]`, the port split off unless the colon is inside a bracketed IPv6 address.
fn split_port(rest: &str) -> (&str, Option<&str>) {
    match rest.rfind(':') {
        Some(at) if !rest[at..].contains(']') => (&rest[..at], Some(&rest[at + 1..])),
        _ => (rest, None),
    }
}

fn host_is_valid(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return !inner.is_empty()
            && inner
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'a'..=b'f' | b':' | b'.'));
    }
    !host.is_empty()
        && !host.starts_with(['.', '-'])
        && !host.ends_with(['.', '-'])
        && !host.contains("..")
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'))
}

/// `allowedOrigins` checked, each problem added to `errors` with its index; the origins
/// deduplicated in their order.
pub(super) fn check_origins(errors: &mut Vec<FieldError>, origins: &[String]) -> Vec<String> {
    if origins.len() > MAX_ALLOWED_ORIGINS {
        errors.push(FieldError::new(
            "allowedOrigins",
            format!("at most {MAX_ALLOWED_ORIGINS} origins"),
        ));
    }
    let mut kept: Vec<String> = Vec::with_capacity(origins.len());
    for (i, origin) in origins.iter().enumerate() {
        if let Some(why) = origin_problem(origin) {
            errors.push(FieldError::new(format!("allowedOrigins[{i}]"), why));
        } else if !kept.contains(origin) {
            kept.push(origin.clone());
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_taken_only_as_a_browser_writes_them() {
        for ok in [
            "https://a.b",
            "http://localhost",
            "http://localhost:3000",
            "https://[::1]:8443",
            "http://10.0.0.1:65535",
        ] {
            assert_eq!(origin_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "null",
            "*",
            "ftp://a.b",
            "https://",
            "https://a.b/",
            "https://a.b/x",
            "https://a.b?x",
            "https://u@a.b",
            "https://A.b",
            "https://a..b",
            "https://-a.b",
            "https://a.b:0",
            "https://a.b:080",
            "https://a.b:65536",
            "https://a.b:443",
            "http://a.b:80",
            "https://a.b:",
            "https://[]",
            "https://[::1",
            "https://a.b\n",
        ] {
            assert!(origin_problem(bad).is_some(), "{bad:?}");
        }
        assert!(origin_problem(&format!("https://{}", "a".repeat(200))).is_some());
    }

    #[test]
    fn every_bad_origin_is_named_and_the_rest_kept_once() {
        let mut errors = Vec::new();
        let kept = check_origins(
            &mut errors,
            &["https://a.b".into(), "x".into(), "https://a.b".into()],
        );
        assert_eq!(kept, ["https://a.b"]);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "allowedOrigins[1]");
        let many: Vec<String> = (0..21).map(|i| format!("https://a{i}.b")).collect();
        let mut errors = Vec::new();
        check_origins(&mut errors, &many);
        assert_eq!(errors[0].field, "allowedOrigins");
    }
}
