use super::help::known_variables;
use super::ranges::parse_size;
use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

#[test]
fn defaults_serve_sqlite_on_loopback_8080() {
    let s = Settings::load(None, env(&[])).expect("defaults");
    assert_eq!(s.listen, "127.0.0.1:8080");
    assert_eq!(s.database_url.expose_secret(), "sqlite://./workbench.db");
    assert_eq!(s.log_format, LogFormat::Text);
    assert_eq!(s.push_urls, adapters_push::ProviderUrls::default());
    assert_eq!(s.database_waits, adapters_diesel::Waits::default());
    assert_eq!(s.request_body_timeout, std::time::Duration::from_secs(30));
}

#[test]
fn database_waits_read_durations_within_their_ranges() {
    let s = Settings::load(
        None,
        env(&[
            ("WORKBENCH_DATABASE_REQUEST_TIMEOUT", "750ms"),
            ("WORKBENCH_DATABASE_TCP_TIMEOUT", "1m"),
        ]),
    )
    .expect("load");
    assert_eq!(
        s.database_waits.request,
        std::time::Duration::from_millis(750)
    );
    assert_eq!(s.database_waits.tcp, std::time::Duration::from_secs(60));
    for (name, value) in [
        ("WORKBENCH_DATABASE_REQUEST_TIMEOUT", "5"),
        ("WORKBENCH_DATABASE_REQUEST_TIMEOUT", "0s"),
        ("WORKBENCH_DATABASE_REQUEST_TIMEOUT", "10m"),
        (
            "WORKBENCH_DATABASE_REQUEST_TIMEOUT",
            "99999999999999999999d",
        ),
        ("WORKBENCH_DATABASE_TCP_TIMEOUT", "1s"),
        ("WORKBENCH_DATABASE_TCP_TIMEOUT", "-5s"),
    ] {
        let err = Settings::load(None, env(&[(name, value)]))
            .err()
            .expect(value);
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[test]
fn environment_overrides_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("workbench.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:9000\"\nlog_format = \"json\"\nworkers = 4\n",
    )
    .expect("write");
    let s =
        Settings::load(Some(&file), env(&[("WORKBENCH_LISTEN", "0.0.0.0:7000")])).expect("load");
    assert_eq!(s.listen, "0.0.0.0:7000");
    assert_eq!(s.log_format, LogFormat::Json);
    assert_eq!(s.workers, 4);
    let s = Settings::load(
        None,
        env(&[("WORKBENCH_PUBLIC_URL", "https://api.example.com/")]),
    )
    .expect("load");
    assert_eq!(s.public_url.as_deref(), Some("https://api.example.com"));
    let s =
        Settings::load(None, env(&[("WORKBENCH_APNS_URL", "http://127.0.0.1:9/")])).expect("load");
    assert_eq!(s.push_urls.apns, "http://127.0.0.1:9");
    assert_eq!(s.push_urls.fcm, "https://fcm.googleapis.com");
}

#[test]
fn bad_values_are_refused_with_their_name() {
    for (name, value) in [
        ("WORKBENCH_LISTEN", "localhost"),
        ("WORKBENCH_LOG_FORMAT", "xml"),
        ("WORKBENCH_WORKERS", "0"),
        ("WORKBENCH_DATABASE_POOL_SIZE", "many"),
        ("WORKBENCH_PUBLIC_URL", "example.com"),
        ("WORKBENCH_PUBLIC_URL", "ftp://example.com"),
        ("WORKBENCH_SECRET_KEY", "c2hvcnQ="),
        ("WORKBENCH_SECRET_KEY", "not base64"),
        ("WORKBENCH_WEBHOOK_ALLOW_CIDRS", "127.0.0.1"),
        ("WORKBENCH_WEBHOOK_RETRY_SCHEDULE", "5 minutes"),
        ("WORKBENCH_WEBHOOK_CONCURRENCY", "0"),
        ("WORKBENCH_PUSH_RETRY_SCHEDULE", "soon"),
        ("WORKBENCH_FCM_URL", "fcm.example.com"),
        ("WORKBENCH_APNS_SANDBOX_URL", "h2://apns"),
        ("WORKBENCH_METRICS_TOKEN", "short"),
    ] {
        let err = Settings::load(None, env(&[(name, value)]))
            .err()
            .expect("refused");
        let text = format!("{err:#}");
        assert!(
            text.contains(name) || text.contains("between"),
            "{name}: {text}"
        );
    }
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "lisen = \"x\"\n").expect("write");
    assert!(
        Settings::load(Some(&file), env(&[])).is_err(),
        "unknown keys are typos"
    );
}

#[test]
fn unknown_variables_are_set_aside_to_be_logged_and_others_ignored() {
    let s = Settings::load(
        None,
        env(&[
            ("WORKBENCH_WORKER", "4"),
            ("WORKBENCH_LOG_FILTER", "debug"),
            // Kubernetes, for a Service named `workbench`:
            ("WORKBENCH_SERVICE_HOST", "10.0.0.7"),
            ("WORKBENCH_PORT", "tcp://10.0.0.7:8080"),
            ("WORKBENCH_PORT_8080_TCP_ADDR", "10.0.0.7"),
        ]),
    )
    .expect("a stray variable does not stop the start");
    assert_eq!(
        s.unknown_variables,
        ["WORKBENCH_LOG_FILTER", "WORKBENCH_WORKER"]
    );
    assert_eq!(s.workers, 2, "the typo set nothing");
    assert_eq!(s.log_filter, "info");
    Settings::load(None, env(&[("PATH", "/bin"), ("WORKBENCH_LOG", "")]))
        .expect("other variables, and empty ones, are not settings");
    let s = Settings::load(None, env(&[("WORKBENCH_LOG", "debug")])).expect("load");
    assert_eq!(s.log_filter, "debug");
}

#[test]
fn keys_being_rotated_out_are_read_from_a_list_or_a_variable() {
    let (one, two) = (
        adapters_diesel::SecretBox::generate_key(),
        adapters_diesel::SecretBox::generate_key(),
    );
    let s = Settings::load(
        None,
        env(&[("WORKBENCH_SECRET_KEY_PREVIOUS", &format!(" {one}, ,{two}"))]),
    )
    .expect("load");
    assert_eq!(s.previous_keys(), [one.clone(), two.clone()]);
    let s = from_file(&format!("previous_secret_keys = [\"{one}\"]\n")).expect("load");
    assert_eq!(s.previous_keys(), [one]);
}

/// Every integer setting, its TOML key and its documented range.
const INTEGERS: [(&str, &str, u64, u64); 7] = [
    (
        "WORKBENCH_SHUTDOWN_DRAIN_SECONDS",
        "shutdown_drain_seconds",
        0,
        300,
    ),
    ("WORKBENCH_DATABASE_POOL_SIZE", "database_pool_size", 1, 256),
    ("WORKBENCH_WORKERS", "workers", 1, 256),
    (
        "WORKBENCH_SHUTDOWN_TIMEOUT_SECONDS",
        "shutdown_timeout_seconds",
        0,
        3600,
    ),
    (
        "WORKBENCH_ENGINE_LEASE_SECONDS",
        "engine_lease_seconds",
        1,
        3600,
    ),
    (
        "WORKBENCH_WEBHOOK_CONCURRENCY",
        "webhook_concurrency",
        1,
        1024,
    ),
    (
        "WORKBENCH_WEBHOOK_LEASE_SECONDS",
        "webhook_lease_seconds",
        1,
        3600,
    ),
];

/// The setting `name` as loaded, widened back to `u64` to compare.
fn integer(s: &Settings, name: &str) -> u64 {
    match name {
        "WORKBENCH_DATABASE_POOL_SIZE" => u64::from(s.database_pool_size),
        "WORKBENCH_WORKERS" => u64::try_from(s.workers).expect("fits"),
        "WORKBENCH_SHUTDOWN_TIMEOUT_SECONDS" => s.shutdown_timeout_seconds,
        "WORKBENCH_SHUTDOWN_DRAIN_SECONDS" => s.shutdown_drain_seconds,
        "WORKBENCH_ENGINE_LEASE_SECONDS" => s.engine_lease_seconds,
        "WORKBENCH_WEBHOOK_CONCURRENCY" => u64::from(s.webhook_concurrency),
        "WORKBENCH_WEBHOOK_LEASE_SECONDS" => s.webhook_lease_seconds,
        other => panic!("unknown setting {other}"),
    }
}

fn refusal(result: anyhow::Result<Settings>) -> String {
    format!("{:#}", result.err().expect("refused"))
}

fn from_file(text: &str) -> anyhow::Result<Settings> {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("workbench.toml");
    std::fs::write(&file, text).expect("write");
    Settings::load(Some(&file), env(&[]))
}

#[test]
fn integer_defaults() {
    let s = Settings::load(None, env(&[])).expect("defaults");
    assert_eq!(s.database_pool_size, 8);
    assert_eq!(s.workers, 2);
    assert_eq!(s.shutdown_timeout_seconds, 30);
    assert_eq!(s.shutdown_drain_seconds, 5);
    assert_eq!(s.engine_lease_seconds, 30);
    assert_eq!(s.webhook_concurrency, 64);
    assert_eq!(s.webhook_lease_seconds, 60);
}

#[test]
fn a_value_past_u32_is_refused_not_wrapped() {
    // 4294967304 = 2^32 + 8: `as u32` used to turn it into 8.
    for name in [
        "WORKBENCH_DATABASE_POOL_SIZE",
        "WORKBENCH_WEBHOOK_CONCURRENCY",
    ] {
        let text = refusal(Settings::load(None, env(&[(name, "4294967304")])));
        assert!(text.contains(name), "{text}");
        assert!(text.contains("4294967304"), "{text}");
    }
    assert!(refusal(from_file("database_pool_size = 4294967304\n")).contains("database_pool_size"));
    assert!(
        refusal(from_file("webhook_concurrency = 4294967304\n")).contains("webhook_concurrency")
    );
}

#[test]
fn integers_are_accepted_at_both_ends_of_their_range() {
    for (name, key, lo, hi) in INTEGERS {
        for n in [lo, hi] {
            let s = Settings::load(None, env(&[(name, &n.to_string())]))
                .unwrap_or_else(|e| panic!("{name}={n}: {e:#}"));
            assert_eq!(integer(&s, name), n, "{name}");
            let s = from_file(&format!("{key} = {n}\n"))
                .unwrap_or_else(|e| panic!("{key} = {n}: {e:#}"));
            assert_eq!(integer(&s, name), n, "{key}");
        }
    }
}

#[test]
fn integers_one_past_either_end_are_refused_with_name_and_range() {
    for (name, key, lo, hi) in INTEGERS {
        let range = format!("between {lo} and {hi}");
        let mut past: Vec<i128> = vec![i128::from(hi) + 1, i128::from(lo) - 1];
        past.extend([-1, i128::from(u64::MAX)]);
        for n in past {
            let text = refusal(Settings::load(None, env(&[(name, &n.to_string())])));
            assert!(
                text.contains(name) && text.contains(&range),
                "{name}={n}: {text}"
            );
            if let Ok(n) = i64::try_from(n) {
                let text = refusal(from_file(&format!("{key} = {n}\n")));
                assert!(
                    text.contains(key) && text.contains(&range),
                    "{key} = {n}: {text}"
                );
            }
        }
        for v in [
            "many",
            "-",
            "1.5",
            "8s",
            "0x10",
            " 8",
            "18446744073709551616",
        ] {
            let text = refusal(Settings::load(None, env(&[(name, v)])));
            assert!(
                text.contains(name) && text.contains(&range),
                "{name}={v}: {text}"
            );
        }
        for v in ["\"8\"", "1.5", "true"] {
            assert!(from_file(&format!("{key} = {v}\n")).is_err(), "{key} = {v}");
        }
    }
}

#[test]
fn the_environment_overrides_a_bad_file_integer_but_not_the_reverse() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("workbench.toml");
    std::fs::write(&file, "webhook_concurrency = 4\n").expect("write");
    let text = refusal(Settings::load(
        Some(&file),
        env(&[("WORKBENCH_WEBHOOK_CONCURRENCY", "4294967304")]),
    ));
    assert!(text.contains("WORKBENCH_WEBHOOK_CONCURRENCY"), "{text}");
    std::fs::write(&file, "webhook_concurrency = -4\n").expect("write");
    let s = Settings::load(Some(&file), env(&[("WORKBENCH_WEBHOOK_CONCURRENCY", "4")]))
        .expect("the variable wins");
    assert_eq!(s.webhook_concurrency, 4);
}

#[test]
fn durability_and_the_low_disk_guard_default_to_safe_values() {
    let s = Settings::load(None, env(&[])).expect("defaults");
    assert_eq!(s.sqlite_synchronous, adapters_diesel::Synchronous::Full);
    assert_eq!(s.min_free_disk, 128 << 20);
    let s = Settings::load(
        None,
        env(&[
            ("WORKBENCH_SQLITE_SYNCHRONOUS", "normal"),
            ("WORKBENCH_MIN_FREE_DISK", "0"),
        ]),
    )
    .expect("opt-ins");
    assert_eq!(s.sqlite_synchronous, adapters_diesel::Synchronous::Normal);
    assert_eq!(s.min_free_disk, 0);
    for (name, value) in [
        ("WORKBENCH_SQLITE_SYNCHRONOUS", "off"),
        ("WORKBENCH_MIN_FREE_DISK", "lots"),
        ("WORKBENCH_MIN_FREE_DISK", "-1MiB"),
        ("WORKBENCH_MIN_FREE_DISK", "18446744073709551615KiB"),
    ] {
        let err = Settings::load(None, env(&[(name, value)]))
            .err()
            .unwrap_or_else(|| panic!("{name}={value} accepted"));
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[test]
fn the_guard_is_read_from_the_file_as_a_size_or_a_number_of_bytes() {
    let dir = tempfile::tempdir().expect("dir");
    for (text, bytes) in [
        ("min_free_disk = 0", 0),
        ("min_free_disk = \"1GiB\"", 1 << 30),
    ] {
        let file = dir.path().join("workbench.toml");
        std::fs::write(&file, text).expect("file");
        let s = Settings::load(Some(&file), env(&[])).expect(text);
        assert_eq!(s.min_free_disk, bytes, "{text}");
    }
    let file = dir.path().join("workbench.toml");
    std::fs::write(&file, "min_free_disk = -1").expect("file");
    assert!(Settings::load(Some(&file), env(&[])).is_err());
}

#[test]
fn sizes_are_bytes_with_binary_units() {
    assert_eq!(parse_size("0"), Some(0));
    assert_eq!(parse_size("512"), Some(512));
    assert_eq!(parse_size("128MiB"), Some(128 << 20));
    assert_eq!(parse_size("2 GiB"), Some(2 << 30));
    assert_eq!(parse_size("64k"), Some(64 << 10));
    assert_eq!(parse_size("1.5GiB"), None);
    assert_eq!(parse_size("MiB"), None);
    assert_eq!(parse_size("99999999999999999999"), None);
    assert_eq!(parse_size("17179869184GiB"), None, "overflows u64");
}

#[test]
fn rate_limits_default_to_the_contract_and_read_rates_or_off() {
    let s = Settings::load(None, env(&[])).expect("defaults");
    assert_eq!(s.rate_limits, api_actix::RateLimitOptions::default());
    assert_eq!(
        s.rate_limits.key.map(|r| r.to_string()).as_deref(),
        Some("200/s")
    );
    assert_eq!(
        s.rate_limits.token.map(|r| r.to_string()).as_deref(),
        Some("10/min")
    );

    let s = Settings::load(
        None,
        env(&[
            ("WORKBENCH_RATE_LIMIT_KEY", "off"),
            ("WORKBENCH_RATE_LIMIT_TOKEN", "30/h"),
        ]),
    )
    .expect("load");
    assert_eq!(s.rate_limits.key, None);
    assert_eq!(
        s.rate_limits.token.map(|r| r.to_string()).as_deref(),
        Some("30/h")
    );

    let s = from_file("rate_limit_key = \"50/s\"\n").expect("file");
    assert_eq!(s.rate_limits.key, api_actix::Rate::per_second(50));

    for (name, value) in [
        ("WORKBENCH_RATE_LIMIT_KEY", "0/s"),
        ("WORKBENCH_RATE_LIMIT_KEY", "200"),
        ("WORKBENCH_RATE_LIMIT_TOKEN", "10/day"),
        ("WORKBENCH_RATE_LIMIT_TOKEN", "4294967296/s"),
    ] {
        let err = refusal(Settings::load(None, env(&[(name, value)])));
        assert!(err.contains(name) && err.contains("`200/s`"), "{err}");
    }
    let err = refusal(from_file("rate_limit_token = \"fast\"\n"));
    assert!(
        err.contains("`rate_limit_token` in the configuration file"),
        "{err}"
    );
}

#[test]
fn retention_defaults_to_a_year_and_each_kind_may_override_it() {
    use domain::retention::{Retention, RetentionPolicy};
    let s = Settings::load(None, env(&[])).expect("defaults");
    assert_eq!(s.retention, RetentionPolicy::default());
    assert_eq!(s.retention.cards.to_string(), "365d");
    let s = Settings::load(
        None,
        env(&[
            ("WORKBENCH_RETENTION", "30d"),
            ("WORKBENCH_RETENTION_CARDS", "90m"),
            ("WORKBENCH_RETENTION_EVENTS", "off"),
        ]),
    )
    .expect("set");
    assert_eq!(s.retention.cards, Retention::Kept { seconds: 5_400 });
    assert_eq!(s.retention.events, Retention::Forever);
    assert_eq!(s.retention.invocations.to_string(), "30d");
    assert_eq!(s.retention.deliveries.to_string(), "30d");
    let s = from_file("retention = \"12h\"\nretention_deliveries = \"1m\"\n").expect("file");
    assert_eq!(s.retention.cards.to_string(), "12h");
    assert_eq!(s.retention.deliveries.to_string(), "1m");
    for (variable, bad) in [
        ("WORKBENCH_RETENTION", "0m"),
        ("WORKBENCH_RETENTION", "101y"),
        ("WORKBENCH_RETENTION_CARDS", "30s"),
        ("WORKBENCH_RETENTION_INVOCATIONS", "forever"),
        ("WORKBENCH_RETENTION_EVENTS", "-1d"),
        ("WORKBENCH_RETENTION_DELIVERIES", "1.5d"),
    ] {
        let err = refusal(Settings::load(None, env(&[(variable, bad)])));
        assert!(
            err.starts_with(variable) && err.contains("1m to 100y"),
            "{err}"
        );
    }
    let err = refusal(from_file("retention_events = \"0d\"\n"));
    assert!(
        err.contains("`retention_events` in the configuration file"),
        "{err}"
    );
}

#[test]
fn migrating_at_start_is_on_unless_switched_off() {
    assert!(Settings::load(None, env(&[])).expect("defaults").migrate);
    for (value, on) in [
        ("false", false),
        ("0", false),
        ("no", false),
        ("TRUE", true),
        ("1", true),
    ] {
        let s = Settings::load(None, env(&[("WORKBENCH_MIGRATE", value)])).expect(value);
        assert_eq!(s.migrate, on, "{value}");
    }
    assert!(!from_file("migrate = false\n").expect("file").migrate);
    let err = refusal(Settings::load(
        None,
        env(&[("WORKBENCH_MIGRATE", "sometimes")]),
    ));
    assert!(err.contains("WORKBENCH_MIGRATE"), "{err}");
}

#[test]
fn a_misspelt_variable_is_matched_to_the_setting_it_was_meant_to_be() {
    assert_eq!(
        closest_setting("WORKBENCH_LISTN").as_deref(),
        Some("WORKBENCH_LISTEN")
    );
    assert_eq!(
        closest_setting("WORKBENCH_DATABSE_URL").as_deref(),
        Some("WORKBENCH_DATABASE_URL")
    );
    assert_eq!(
        closest_setting("WORKBENCH_RATE_LIMIT_KEYS").as_deref(),
        Some("WORKBENCH_RATE_LIMIT_KEY")
    );
    assert_eq!(closest_setting("WORKBENCH_SOMETHING_ELSE_ENTIRELY"), None);
    assert!(known_variables().contains(&"WORKBENCH_LOG".to_owned()));
    assert!(known_variables().len() > 20, "{:?}", known_variables());
}

#[test]
fn a_bad_log_filter_stops_the_start_instead_of_becoming_info() {
    let err = refusal(Settings::load(None, env(&[("WORKBENCH_LOG", "info,[bad")])));
    assert!(err.contains("WORKBENCH_LOG"), "{err}");
    assert!(Settings::load(None, env(&[("WORKBENCH_LOG", "warn,workbench=debug")])).is_ok());
}

#[test]
fn trusted_proxies_are_cidrs_and_a_name_is_refused() {
    let s = Settings::load(None, env(&[])).expect("defaults");
    assert_eq!(
        s.trusted_proxies,
        api_actix::client::TrustedProxies::default()
    );
    assert!(Settings::load(
        None,
        env(&[("WORKBENCH_TRUSTED_PROXIES", "10.0.0.0/8, ::1")])
    )
    .is_ok());
    let err = refusal(Settings::load(
        None,
        env(&[("WORKBENCH_TRUSTED_PROXIES", "proxy.internal")]),
    ));
    assert!(
        err.contains("WORKBENCH_TRUSTED_PROXIES") && err.contains("proxy.internal"),
        "{err}"
    );
}

#[test]
fn serve_help_lists_every_setting_from_the_documentation() {
    let help = settings_help();
    for variable in known_variables() {
        assert!(
            help.contains(&format!("  {variable}  [default: ")),
            "{variable} is not in docs/configuration.md's table:\n{help}"
        );
    }
    assert!(
        help.contains("WORKBENCH_LISTEN  [default: 127.0.0.1:8080]"),
        "{help}"
    );
}

#[test]
fn database_knobs_default_to_the_contract_and_are_range_checked() {
    let s = Settings::load(None, env(&[])).expect("defaults");
    assert_eq!(s.database_waits.pool, std::time::Duration::from_secs(5));
    assert_eq!(
        s.database_waits.statement,
        std::time::Duration::from_secs(30)
    );
    assert_eq!(s.database_wait, std::time::Duration::ZERO);
    let s = Settings::load(
        None,
        env(&[
            ("WORKBENCH_DATABASE_POOL_TIMEOUT", "800ms"),
            ("WORKBENCH_DATABASE_STATEMENT_TIMEOUT", "2m"),
            ("WORKBENCH_DATABASE_WAIT", "30s"),
        ]),
    )
    .expect("load");
    assert_eq!(s.database_waits.pool, std::time::Duration::from_millis(800));
    assert_eq!(
        s.database_waits.statement,
        std::time::Duration::from_secs(120)
    );
    assert_eq!(s.database_wait, std::time::Duration::from_secs(30));
    for (name, value) in [
        ("WORKBENCH_DATABASE_POOL_TIMEOUT", "10ms"),
        ("WORKBENCH_DATABASE_STATEMENT_TIMEOUT", "2d"),
        ("WORKBENCH_DATABASE_WAIT", "2h"),
        ("WORKBENCH_DATABASE_WAIT", "soon"),
    ] {
        let err = refusal(Settings::load(None, env(&[(name, value)])));
        assert!(err.contains(name), "{err}");
    }
}
