//! Prometheus metrics: request count and latency by method, route pattern and status.

use std::time::Duration;

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    restarts: IntCounterVec,
    free_bytes: IntGauge,
    full: IntGauge,
    storage_errors: IntCounterVec,
    clock_offset: Gauge,
    stale: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("workbench".into()), None)?;
        let labels = ["method", "route", "status"];
        let requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests answered"),
            &labels,
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "Time to answer an HTTP request",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &labels,
        )?;
        let restarts = IntCounterVec::new(
            Opts::new(
                "worker_restarts_total",
                "Background loops that died and were started again",
            ),
            &["worker"],
        )?;
        let free_bytes = IntGauge::new(
            "storage_free_bytes",
            "Free bytes of the database's filesystem at the last sample (SQLite)",
        )?;
        let full = IntGauge::new(
            "storage_full",
            "1 while the low-disk guard is tripped or writes fail for lack of space",
        )?;
        let storage_errors = IntCounterVec::new(
            Opts::new("storage_errors_total", "Writes refused by storage, by kind"),
            &["kind"],
        )?;
        let clock_offset = Gauge::new(
            "clock_offset_seconds",
            "The database's clock minus this host's, as last measured",
        )?;
        let stale = IntCounterVec::new(
            Opts::new(
                "stale_outcomes_total",
                "Outcomes not recorded because their lease had passed to another holder",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(clock_offset.clone()))?;
        registry.register(Box::new(stale.clone()))?;
        registry.register(Box::new(free_bytes.clone()))?;
        registry.register(Box::new(full.clone()))?;
        registry.register(Box::new(storage_errors.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(restarts.clone()))?;
        Ok(Self {
            registry,
            requests,
            latency,
            restarts,
            free_bytes,
            full,
            storage_errors,
            clock_offset,
            stale,
        })
    }

    /// One answered request. `method` is recorded as one of the standard methods or `other`
    /// (contract §16: a client inventing methods cannot grow `/metrics`); `route` must be a
    /// route template, `unmatched` or `invalid`.
    pub fn observe(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let status = status.to_string();
        let labels = [standard_method(method), route, status.as_str()];
        self.requests.with_label_values(&labels).inc();
        self.latency
            .with_label_values(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// `worker` has been started again `n` more times (0 lists it).
    pub fn worker_restarted(&self, worker: &str, n: u64) {
        self.restarts.with_label_values(&[worker]).inc_by(n);
    }

    /// The database's clock minus this host's, in milliseconds.
    pub fn clock_offset(&self, offset_ms: i64) {
        self.clock_offset.set(offset_ms as f64 / 1000.0);
    }

    /// `n` outcomes of `kind` (`webhook`, `push`, `invocation`, `csv`, `cancel`) were not
    /// recorded: their lease had passed to another holder (0 lists the kind).
    pub fn stale_outcomes(&self, kind: &str, n: u64) {
        self.stale.with_label_values(&[kind]).inc_by(n);
    }

    /// Takes the storage figures as they are now, for the next rendering.
    pub fn storage(&self, storage: &domain::health::Storage) {
        if let Some(free) = storage.free_bytes() {
            self.free_bytes.set(i64::try_from(free).unwrap_or(i64::MAX));
        }
        self.full.set(i64::from(storage.full()));
        let counted = self.storage_errors.with_label_values(&["full"]);
        let errors = storage.full_errors();
        if errors > counted.get() {
            counted.inc_by(errors - counted.get());
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// `method` if it is one of HTTP's standard methods, else `other`.
fn standard_method(method: &str) -> &str {
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    if STANDARD.contains(&method) {
        method
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invented_methods_add_no_labels() {
        let m = Metrics::new().expect("metrics");
        for n in 0..50 {
            m.observe(
                &format!("FOO{n}"),
                "unmatched",
                405,
                Duration::from_millis(1),
            );
        }
        m.observe("PATCH", "unmatched", 404, Duration::from_millis(1));
        let text = m.render().expect("render");
        assert!(text.contains(
            "workbench_http_requests_total{method=\"other\",route=\"unmatched\",status=\"405\"} 50"
        ), "{text}");
        assert!(text.contains("method=\"PATCH\""), "{text}");
        assert!(!text.contains("FOO"), "{text}");
    }

    #[test]
    fn observations_appear_in_the_exposition() {
        let m = Metrics::new().expect("metrics");
        m.observe(
            "GET",
            "/v1/{environmentId}/workbench-folder",
            200,
            Duration::from_millis(3),
        );
        let text = m.render().expect("render");
        assert!(text.contains(
            "workbench_http_requests_total{method=\"GET\",route=\"/v1/{environmentId}/workbench-folder\",status=\"200\"} 1"
        ), "{text}");
        assert!(text.contains("workbench_http_request_duration_seconds_bucket"));
        m.worker_restarted("engine", 0);
        m.worker_restarted("bulk", 1);
        let text = m.render().expect("render");
        assert!(
            text.contains("workbench_worker_restarts_total{worker=\"engine\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("workbench_worker_restarts_total{worker=\"bulk\"} 1"),
            "{text}"
        );
    }
}
