//! Prometheus metrics (docs/operations.md, Metrics): request count and latency by method, route
//! pattern and status; the background loops' restarts and stale outcomes; storage; the build;
//! webhook attempts; and, read when scraped, the database's backlog and its connection pool,
//! and the process's own figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::health::{Backlog, Histogram as Durations, Pool};
use domain::webhook::AttemptKind;
use domain::HealthProbe;
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{
    Counter, Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// How long one read of the backlog answers scrapes: scrapes at once, or a scraper's retry,
/// cost one read of the database.
const BACKLOG_FRESH: Duration = Duration::from_secs(1);

/// Buckets of a webhook call's duration, in seconds, up to past its 15 s timeout.
const WEBHOOK_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0,
];

/// The service's Prometheus series (`/metrics`), shared by every worker.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// The standard `process_*` series, without the `workbench_` prefix (Linux).
    process: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    restarts: IntCounterVec,
    free_bytes: IntGauge,
    full: IntGauge,
    storage_errors: IntCounterVec,
    clock_offset: Gauge,
    stale: IntCounterVec,
    pruned: IntCounterVec,
    prune_seconds: Counter,
    build: IntGaugeVec,
    webhook_attempts: IntCounterVec,
    webhook_duration: Histogram,
    read_errors: IntCounter,
    backlog: Arc<tokio::sync::Mutex<BacklogRead>>,
    backlog_fresh: Duration,
}

/// The last read of the backlog: when, and what it found (None when it failed).
#[derive(Default)]
struct BacklogRead {
    at: Option<Instant>,
    backlog: Option<Backlog>,
}

/// What `/metrics` reads when it is scraped, rendered beside the registered series by
/// [`Metrics::render_with`]; a figure that could not be read is left out.
#[derive(Debug, Clone, Default)]
pub struct Scraped {
    /// The work waiting in the database ([`Metrics::backlog`]).
    pub backlog: Option<Backlog>,
    /// The connection pool ([`HealthProbe::pool`]).
    pub pool: Option<Pool>,
    /// Feed streams open in this process (contract §12).
    pub feed_streams: Option<usize>,
}

impl Metrics {
    /// Every family registered, with the process series.
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
        let pruned = IntCounterVec::new(
            Opts::new(
                "pruned_rows_total",
                "Rows removed by pruning (contract §14), by kind",
            ),
            &["kind"],
        )?;
        let prune_seconds = Counter::new(
            "prune_seconds_total",
            "Time the pruner's steps took, their transactions included, in seconds",
        )?;
        let stale = IntCounterVec::new(
            Opts::new(
                "stale_outcomes_total",
                "Outcomes not recorded because their lease had passed to another holder",
            ),
            &["kind"],
        )?;
        let build = IntGaugeVec::new(
            Opts::new(
                "build_info",
                "1, labelled with the version and the commit this binary was built from",
            ),
            &["version", "commit"],
        )?;
        let webhook_attempts = IntCounterVec::new(
            Opts::new(
                "webhook_attempts_total",
                "Webhook delivery attempts, by how they ended",
            ),
            &["outcome"],
        )?;
        for kind in AttemptKind::ALL {
            webhook_attempts.with_label_values(&[kind.as_str()]);
        }
        let webhook_duration = Histogram::with_opts(
            HistogramOpts::new(
                "webhook_delivery_duration_seconds",
                "Time each webhook delivery call took, whatever its outcome",
            )
            .buckets(WEBHOOK_BUCKETS.to_vec()),
        )?;
        let read_errors = IntCounter::new(
            "metrics_read_errors_total",
            "Reads for /metrics that failed (the figures they read were left out)",
        )?;
        registry.register(Box::new(build.clone()))?;
        registry.register(Box::new(webhook_attempts.clone()))?;
        registry.register(Box::new(webhook_duration.clone()))?;
        registry.register(Box::new(read_errors.clone()))?;
        registry.register(Box::new(clock_offset.clone()))?;
        registry.register(Box::new(stale.clone()))?;
        registry.register(Box::new(pruned.clone()))?;
        registry.register(Box::new(prune_seconds.clone()))?;
        registry.register(Box::new(free_bytes.clone()))?;
        registry.register(Box::new(full.clone()))?;
        registry.register(Box::new(storage_errors.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(restarts.clone()))?;
        let process = Registry::new();
        #[cfg(target_os = "linux")]
        process.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Self {
            registry,
            process,
            requests,
            latency,
            restarts,
            free_bytes,
            full,
            storage_errors,
            clock_offset,
            stale,
            pruned,
            prune_seconds,
            build,
            webhook_attempts,
            webhook_duration,
            read_errors,
            backlog: Arc::default(),
            backlog_fresh: BACKLOG_FRESH,
        })
    }

    /// The binary's version and the commit it was built from (`unknown` when not known).
    pub fn build_info(&self, version: &str, commit: &str) {
        self.build.reset();
        self.build.with_label_values(&[version, commit]).set(1);
    }

    /// One webhook delivery attempt: how it ended, and how long its call took.
    pub fn webhook_attempt(&self, kind: AttemptKind, took: Duration) {
        self.webhook_attempts
            .with_label_values(&[kind.as_str()])
            .inc();
        self.webhook_duration.observe(took.as_secs_f64());
    }

    /// The backlog for a scrape: the last read while it is younger than a second, else a new
    /// read through `probe`, one at a time (scrapes arriving meanwhile wait for it and take its
    /// answer), so that nothing reads the database while nobody scrapes. A failed read is
    /// logged and counted in `workbench_metrics_read_errors_total`, and answers None until the
    /// next read: the backlog is left out, and the rest of `/metrics` still answers.
    pub async fn backlog(&self, probe: &dyn HealthProbe) -> Option<Backlog> {
        let mut last = self.backlog.lock().await;
        if last.at.is_some_and(|at| at.elapsed() < self.backlog_fresh) {
            return last.backlog;
        }
        let backlog = match probe.backlog().await {
            Ok(backlog) => Some(backlog),
            Err(error) => {
                tracing::warn!(%error, "cannot read the backlog for /metrics; left out");
                self.read_errors.inc();
                None
            }
        };
        *last = BacklogRead {
            at: Some(Instant::now()),
            backlog,
        };
        backlog
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

    /// `n` rows of `kind` (`cards`, `events`, ... of `domain::retention::PruneKind`) were
    /// pruned (0 lists the kind).
    pub fn pruned(&self, kind: &str, n: u64) {
        self.pruned.with_label_values(&[kind]).inc_by(n);
    }

    /// A step of the pruner took `took`: its share of the writer over time.
    pub fn pruning(&self, took: Duration) {
        self.prune_seconds.inc_by(took.as_secs_f64());
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

    /// The Prometheus text exposition of every registered metric and the process's.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        self.render_with(&Scraped::default())
    }

    /// [`Metrics::render`], with what was read for this scrape.
    pub fn render_with(&self, scraped: &Scraped) -> Result<String, prometheus::Error> {
        let mut families = self.registry.gather();
        families.extend(self.process.gather());
        if let Some(backlog) = &scraped.backlog {
            families.extend(backlog_families(backlog));
        }
        if let Some(pool) = &scraped.pool {
            families.extend(pool_families(pool));
        }
        if let Some(streams) = scraped.feed_streams {
            families.push(family(
                "workbench_feed_streams",
                "Feed streams (GET .../cards/stream) open in this process",
                MetricType::GAUGE,
                vec![gauge(&[], streams as f64)],
            ));
        }
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = Vec::new();
        TextEncoder::new().encode(&families, &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// The gauges of the backlog: each queue's pending items and the age of its oldest due.
fn backlog_families(backlog: &Backlog) -> Vec<MetricFamily> {
    let queues = [
        (
            "invocations",
            "Invocations recorded and not yet run to the end",
            "How long the oldest invocation not yet run to the end has waited since it was \
                recorded, by the database's clock (0 when there is none)",
            backlog.invocations,
        ),
        (
            "webhook_deliveries",
            "Webhook deliveries not yet delivered, failed or cancelled: due, waiting for a retry, \
                or in hand",
            "How long the webhook delivery due the longest has been due, by the database's clock \
                (0 when none is due)",
            backlog.webhook_deliveries,
        ),
        (
            "push_jobs",
            "Pushes not yet sent or failed: due, waiting for a retry, or in hand",
            "How long the push due the longest has been due, by the database's clock (0 when none \
                is due)",
            backlog.push_jobs,
        ),
    ];
    let mut families = Vec::new();
    for (name, pending, age, queue) in queues {
        families.push(family(
            &format!("workbench_{name}_pending"),
            pending,
            MetricType::GAUGE,
            vec![gauge(&[], queue.pending as f64)],
        ));
        families.push(family(
            &format!("workbench_{name}_oldest_age_seconds"),
            age,
            MetricType::GAUGE,
            vec![gauge(&[], queue.oldest_age.as_secs_f64())],
        ));
    }
    families
}

/// The pool's connections by state, and the histogram of the waits for one.
fn pool_families(pool: &Pool) -> Vec<MetricFamily> {
    vec![
        family(
            "workbench_db_pool_connections",
            "Database connections of the pool, idle or in use (active)",
            MetricType::GAUGE,
            vec![
                gauge(&[("state", "active")], f64::from(pool.active)),
                gauge(&[("state", "idle")], f64::from(pool.idle)),
            ],
        ),
        family(
            "workbench_db_pool_wait_seconds",
            "Time each database call waited for a connection (waits that ran out included)",
            MetricType::HISTOGRAM,
            vec![histogram(&pool.waits)],
        ),
    ]
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<proto::Metric>) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_owned());
    family.set_help(help.to_owned());
    family.set_field_type(kind);
    family.set_metric(metrics);
    family
}

fn gauge(labels: &[(&str, &str)], value: f64) -> proto::Metric {
    let mut metric = proto::Metric::default();
    metric.set_label(
        labels
            .iter()
            .map(|(name, value)| {
                let mut pair = proto::LabelPair::default();
                pair.set_name((*name).to_owned());
                pair.set_value((*value).to_owned());
                pair
            })
            .collect(),
    );
    let mut gauge = proto::Gauge::default();
    gauge.set_value(value);
    metric.set_gauge(gauge);
    metric
}

fn histogram(durations: &Durations) -> proto::Metric {
    let mut histogram = proto::Histogram::default();
    histogram.set_sample_count(durations.count);
    histogram.set_sample_sum(durations.sum);
    histogram.set_bucket(
        durations
            .buckets
            .iter()
            .map(|(bound, count)| {
                let mut bucket = proto::Bucket::default();
                bucket.set_upper_bound(*bound);
                bucket.set_cumulative_count(*count);
                bucket
            })
            .collect(),
    );
    let mut metric = proto::Metric::default();
    metric.set_histogram(histogram);
    metric
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
    use domain::health::Queue;
    use domain::StorageError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A probe whose backlog read takes 50 ms and is counted; it fails while `failing`.
    #[derive(Default)]
    struct Probe {
        reads: AtomicUsize,
        failing: std::sync::atomic::AtomicBool,
    }

    #[domain::async_trait::async_trait]
    impl HealthProbe for Probe {
        async fn ready(&self) -> Result<(), StorageError> {
            Ok(())
        }

        async fn backlog(&self) -> Result<Backlog, StorageError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.failing.load(Ordering::SeqCst) {
                return Err(StorageError::Unavailable(
                    "the database did not answer".into(),
                ));
            }
            Ok(Backlog {
                webhook_deliveries: Queue {
                    pending: 3,
                    oldest_age: Duration::from_millis(2_500),
                },
                ..Backlog::default()
            })
        }

        fn pool(&self) -> Pool {
            Pool::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scrapes_at_once_cost_one_backlog_read_and_the_next_second_reads_again() {
        let mut m = Metrics::new().expect("metrics");
        m.backlog_fresh = Duration::from_millis(300);
        let probe = Arc::new(Probe::default());
        let scrapes: Vec<_> = (0..8)
            .map(|_| {
                let (m, probe) = (m.clone(), probe.clone());
                tokio::spawn(async move { m.backlog(probe.as_ref()).await })
            })
            .collect();
        for scrape in scrapes {
            let backlog = scrape.await.expect("join").expect("read");
            assert_eq!(backlog.webhook_deliveries.pending, 3);
        }
        assert_eq!(
            probe.reads.load(Ordering::SeqCst),
            1,
            "one read for eight scrapes"
        );
        tokio::time::sleep(Duration::from_millis(350)).await;
        m.backlog(probe.as_ref()).await.expect("read");
        assert_eq!(
            probe.reads.load(Ordering::SeqCst),
            2,
            "read again once stale"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_backlog_read_leaves_its_series_out_is_counted_and_metrics_still_answer() {
        let mut m = Metrics::new().expect("metrics");
        m.backlog_fresh = Duration::from_millis(100);
        let probe = Probe::default();
        probe.failing.store(true, Ordering::SeqCst);
        let scraped = Scraped {
            backlog: m.backlog(&probe).await,
            pool: Some(Pool::default()),
            feed_streams: None,
        };
        assert!(scraped.backlog.is_none());
        // Within the second, the failure is not read again (nor counted again).
        assert!(m.backlog(&probe).await.is_none());
        assert_eq!(probe.reads.load(Ordering::SeqCst), 1);
        let text = m.render_with(&scraped).expect("render");
        assert!(!text.contains("_pending"), "{text}");
        assert!(!text.contains("_oldest_age_seconds"), "{text}");
        assert!(
            text.contains("workbench_metrics_read_errors_total 1"),
            "{text}"
        );
        assert!(
            text.contains("workbench_db_pool_connections{state=\"idle\"} 0"),
            "{text}"
        );
        // The database answers again: so do the series.
        probe.failing.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(120)).await;
        let scraped = Scraped {
            backlog: m.backlog(&probe).await,
            pool: None,
            feed_streams: None,
        };
        let text = m.render_with(&scraped).expect("render");
        assert!(
            text.contains("workbench_webhook_deliveries_pending 3"),
            "{text}"
        );
        assert!(
            text.contains("workbench_metrics_read_errors_total 1"),
            "{text}"
        );
    }

    #[test]
    fn the_backlog_and_the_pool_render_as_gauges_and_a_histogram() {
        let m = Metrics::new().expect("metrics");
        let waits = domain::health::Durations::new(&[0.001, 0.1]);
        waits.observe(Duration::from_micros(300));
        waits.observe(Duration::from_millis(40));
        waits.observe(Duration::from_secs(6));
        let scraped = Scraped {
            backlog: Some(Backlog {
                invocations: Queue {
                    pending: 12,
                    oldest_age: Duration::from_millis(1_500),
                },
                webhook_deliveries: Queue::default(),
                push_jobs: Queue {
                    pending: 4,
                    oldest_age: Duration::ZERO,
                },
            }),
            pool: Some(Pool {
                idle: 3,
                active: 5,
                waits: waits.snapshot(),
            }),
            feed_streams: Some(7),
        };
        let text = m.render_with(&scraped).expect("render");
        for line in [
            "workbench_feed_streams 7",
            "# TYPE workbench_feed_streams gauge",
            "workbench_invocations_pending 12",
            "workbench_invocations_oldest_age_seconds 1.5",
            "workbench_webhook_deliveries_pending 0",
            "workbench_webhook_deliveries_oldest_age_seconds 0",
            "workbench_push_jobs_pending 4",
            "workbench_push_jobs_oldest_age_seconds 0",
            "# TYPE workbench_push_jobs_pending gauge",
            "workbench_db_pool_connections{state=\"active\"} 5",
            "workbench_db_pool_connections{state=\"idle\"} 3",
            "# TYPE workbench_db_pool_wait_seconds histogram",
            "workbench_db_pool_wait_seconds_bucket{le=\"0.001\"} 1",
            "workbench_db_pool_wait_seconds_bucket{le=\"0.1\"} 2",
            "workbench_db_pool_wait_seconds_bucket{le=\"+Inf\"} 3",
            "workbench_db_pool_wait_seconds_count 3",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
    }

    #[test]
    fn the_build_and_every_attempt_outcome_are_listed_from_the_start() {
        let m = Metrics::new().expect("metrics");
        m.build_info("1.2.3", "abc1234");
        m.build_info("1.2.3", "def5678");
        let text = m.render().expect("render");
        assert!(
            text.contains("workbench_build_info{commit=\"def5678\",version=\"1.2.3\"} 1"),
            "{text}"
        );
        assert!(!text.contains("abc1234"), "one build, one series: {text}");
        for kind in AttemptKind::ALL {
            let line = format!(
                "workbench_webhook_attempts_total{{outcome=\"{}\"}} 0",
                kind.as_str()
            );
            assert!(text.contains(&line), "missing {line}\n{text}");
        }
        m.webhook_attempt(AttemptKind::Timeout, Duration::from_secs(15));
        m.webhook_attempt(AttemptKind::Success, Duration::from_millis(20));
        let text = m.render().expect("render");
        assert!(text.contains("workbench_webhook_attempts_total{outcome=\"timeout\"} 1"));
        assert!(text.contains(
            "workbench_webhook_delivery_duration_seconds_bucket{le=\"0.025\"} \
            1"
        ));
        assert!(text.contains("workbench_webhook_delivery_duration_seconds_count 2"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_series_keep_their_standard_names() {
        let text = Metrics::new().expect("metrics").render().expect("render");
        for series in [
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(series)),
                "missing {series}\n{text}"
            );
        }
        assert!(!text.contains("workbench_process_"), "{text}");
    }

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
            "workbench_http_requests_total{method=\"GET\",route=\"/v1/{environmentId}/workbench-fol\
                der\",status=\"200\"} 1"
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
