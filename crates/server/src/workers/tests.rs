//! Unit tests of the supervisor and its loops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_actix::Metrics;
use domain::health::Loops;
use domain::webhook::{AttemptRecord, DeliveryService};
use domain::StorageError;

use super::deliveries::{call_ended, lock};
use super::{spawn_deliveries, Supervisor};

#[tokio::test]
async fn a_loop_that_dies_is_started_again_counted_and_goes_on() {
    let loops = Arc::new(Loops::default());
    let metrics = Metrics::new().expect("metrics");
    let supervisor = Supervisor::new(loops.clone(), metrics.clone());
    let steps = Arc::new(AtomicUsize::new(0));
    let counted = steps.clone();
    // The second step panics (a fault outside any unit); the others do their work.
    supervisor.run_loop("test", Arc::default(), move || {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 1 {
                panic!("injected: the loop dies");
            }
            Ok::<bool, StorageError>(n < 5)
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while steps.load(Ordering::SeqCst) < 6 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        steps.load(Ordering::SeqCst) >= 6,
        "the loop goes on after its restart"
    );
    assert_eq!(loops.restarts(), vec![("test", 1)]);
    let text = metrics.render().expect("render");
    assert!(
        text.contains("workbench_worker_restarts_total{worker=\"test\"} 1"),
        "{text}"
    );
    assert!(loops.stalled(Instant::now()).is_empty());
}

/// A subscription with 64 calls allowed is claimed for again once at most 32 are in
/// flight: the call that brings it there wakes the claim loop, no other does, and the last
/// call leaves no entry behind.
#[test]
fn an_ended_call_wakes_the_claims_only_when_its_subscription_becomes_claimable() {
    let in_flight = Mutex::new(HashMap::from([("sub".to_owned(), 34_u32)]));
    let ended = || call_ended(&in_flight, "sub", 32, 64);
    assert!(!ended(), "34 → 33: still above the threshold");
    assert!(ended(), "33 → 32: claimable again");
    assert!(!ended(), "32 → 31: it already was");
    for _ in 0..31 {
        assert!(!ended());
    }
    assert!(lock(&in_flight).is_empty(), "no count of zero is kept");
    assert!(!ended(), "an unknown subscription wakes nothing");
}

/// An endpoint answers 410 to every call, and saving the outcomes takes 300 ms: until the
/// subscription is saved as disabled, no more calls are claimed than its 64 slots held
/// when the first 410 came. Freeing those slots at the end of each call made the loop
/// claim and call more of its 1,000 due deliveries in the meantime, each failed for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_410_keeps_its_slot_until_the_subscription_is_saved_disabled() {
    use domain::mocks::{MockWebhookRepository, MockWebhookTransport};
    use domain::webhook::{DeliveryJob, OutgoingCall, RetryPolicy, TransportResponse};

    let left = AtomicUsize::new(1_000);
    let disabled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let mut repo = MockWebhookRepository::new();
    let off = disabled.clone();
    repo.expect_claim()
        .returning(move |_, lease, per_subscription, exclude, limit| {
            if off.load(Ordering::SeqCst) || exclude.iter().any(|s| s == "whk_1") {
                return Ok(Vec::new());
            }
            let want = per_subscription.min(limit) as usize;
            let n = want.min(left.load(Ordering::SeqCst));
            left.fetch_sub(n, Ordering::SeqCst);
            Ok((0..n)
                .map(|i| DeliveryJob {
                    delivery_id: format!("whd_{i}"),
                    subscription: domain::testing::subscription("env_1"),
                    event_id: format!("evt_{i}"),
                    event_name: "card-completed".into(),
                    data: serde_json::json!({}),
                    attempt: 1,
                    trigger: "scheduled".into(),
                    lease_until: lease,
                })
                .collect())
        });
    let off = disabled.clone();
    repo.expect_record().returning(move |records| {
        // A slow commit (an fsync, a busy database). It blocks the runtime thread it runs
        // on, and the runtime has four.
        std::thread::sleep(Duration::from_millis(300));
        if records.iter().any(AttemptRecord::disables_subscription) {
            off.store(true, Ordering::SeqCst);
        }
        Ok(0)
    });
    let mut transport = MockWebhookTransport::new();
    let made = calls.clone();
    transport.expect_send().returning(move |_: OutgoingCall| {
        made.fetch_add(1, Ordering::SeqCst);
        TransportResponse {
            status: Some(410),
            retry_after_seconds: None,
            body: String::new(),
            error: None,
            failure: None,
            duration_ms: 1,
        }
    });
    let service = Arc::new(DeliveryService::new(
        Arc::new(repo),
        Arc::new(transport),
        domain::testing::clock(),
        RetryPolicy::default(),
    ));
    let supervisor = Supervisor::new(Arc::new(Loops::default()), Metrics::new().expect("m"));
    spawn_deliveries(
        &supervisor,
        service,
        Arc::default(),
        64,
        chrono::Duration::seconds(30),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !disabled.load(Ordering::SeqCst) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(disabled.load(Ordering::SeqCst), "the 410 was saved");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        supervisor.stop(Duration::from_secs(5)).await,
        "all ended in time"
    );
    let made = calls.load(Ordering::SeqCst);
    assert!(
        (1..=64).contains(&made),
        "{made} calls to a subscription that had answered 410"
    );
}

/// Contract §17: stopping the loops.
mod stop {
    use super::*;

    /// Contract §17: on stop a loop finishes the step it is in, takes no more, and ends; a loop
    /// waiting out its restart back-off ends too; `stop` reports that all ended in time.
    #[tokio::test]
    async fn stopping_lets_the_step_in_hand_finish_and_takes_no_more() {
        let supervisor = Supervisor::new(Arc::new(Loops::default()), Metrics::new().expect("m"));
        let (started, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, f) = (started.clone(), finished.clone());
        supervisor.run_loop("slow", Arc::default(), move || {
            let (s, f) = (s.clone(), f.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok::<bool, StorageError>(true)
            }
        });
        // A loop that dies at once, so that it waits out its back-off (1 s) when stopped.
        supervisor.supervise("dying", || async { panic!("injected: the loop dies") });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let began = Instant::now();
        assert!(
            supervisor.stop(Duration::from_secs(5)).await,
            "all ended in time"
        );
        assert!(
            began.elapsed() < Duration::from_millis(900),
            "{:?}",
            began.elapsed()
        );
        let (s, f) = (
            started.load(Ordering::SeqCst),
            finished.load(Ordering::SeqCst),
        );
        assert_eq!(s, f, "the step in hand finished");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            s,
            "no step began after the stop"
        );
    }
}
