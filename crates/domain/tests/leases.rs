//! Contract §19 at the domain's edge: every leased kind takes its lease from the `Clock` port
//! (the database's time in the service), never from the host's clock, so replicas whose hosts
//! disagree still compute the same lease windows. Each claim is checked against a mocked clock
//! set five minutes away from the host's: a claim made from the host's clock would miss.

use std::sync::Arc;

use chrono::{Duration, TimeZone};
use workbench_domain::time::MockClock;
use workbench_domain::{Clock, Timestamp};

/// The database's time in these tests: five minutes from the host's, whichever way.
fn database_time() -> Timestamp {
    chrono::Utc
        .timestamp_millis_opt(chrono::Utc::now().timestamp_millis() - 300_000)
        .single()
        .expect("time")
}

fn clock(at: Timestamp) -> Arc<dyn Clock> {
    let mut clock = MockClock::new();
    clock.expect_now().returning(move || at);
    Arc::new(clock)
}

#[tokio::test]
async fn invocations_are_leased_on_the_clocks_time() {
    use workbench_domain::mocks::MockInvocationRepository;
    use workbench_domain::trigger::Engine;
    let at = database_time();
    let lease = Duration::seconds(7);
    let mut invocations = MockInvocationRepository::new();
    invocations
        .expect_claim()
        .withf(move |now, until, _| *now == at && *until == at + lease)
        .times(1)
        .returning(|_, _, _| Ok(Vec::new()));
    let engine = Engine::new(
        Arc::new(workbench_domain::flow::MockFlowRepository::new()),
        Arc::new(invocations),
        Arc::new(workbench_domain::audience::MockEndUserRepository::new()),
        Arc::new(workbench_domain::audience::MockSegmentRepository::new()),
        Arc::new(workbench_domain::audience::MockStreamRepository::new()),
        clock(at),
    )
    .with_lease(lease);
    assert!(!engine.step().await.expect("step"));
}

#[tokio::test]
async fn webhook_deliveries_are_leased_on_the_clocks_time() {
    use workbench_domain::webhook::{DeliveryService, MockWebhookRepository, MockWebhookTransport};
    let at = database_time();
    let lease = Duration::seconds(60);
    let mut repo = MockWebhookRepository::new();
    repo.expect_claim()
        .withf(move |now, until, _, _, _| *now == at && *until == at + lease)
        .times(1)
        .returning(|_, _, _, _, _| Ok(Vec::new()));
    let service = DeliveryService::new(
        Arc::new(repo),
        Arc::new(MockWebhookTransport::new()),
        clock(at),
        workbench_domain::webhook::RetryPolicy::parse("1s").expect("policy"),
    );
    assert!(service
        .claim(32, Vec::new(), 100, lease)
        .await
        .expect("claim")
        .is_empty());
}

#[tokio::test]
async fn pushes_are_leased_on_the_clocks_time() {
    use workbench_domain::push::{MockPushJobRepository, MockPushSender, PushService};
    let at = database_time();
    let lease = Duration::seconds(60);
    let mut repo = MockPushJobRepository::new();
    repo.expect_claim()
        .withf(move |now, until, _| *now == at && *until == at + lease)
        .times(1)
        .returning(|_, _, _| Ok(Vec::new()));
    let service = PushService::new(
        Arc::new(repo),
        Arc::new(MockPushSender::new()),
        clock(at),
        workbench_domain::retry::RetryPolicy::parse("5s").expect("policy"),
    );
    assert!(service.claim(10, lease).await.expect("claim").is_empty());
}

#[tokio::test]
async fn cancel_tasks_are_leased_on_the_clocks_time() {
    use workbench_domain::cancel::{CancelService, MockCancelRepository};
    let at = database_time();
    let lease = Duration::seconds(9);
    let mut repo = MockCancelRepository::new();
    repo.expect_claim()
        .withf(move |now, until| *now == at && *until == at + lease)
        .times(1)
        .returning(|_, _| Ok(None));
    let service = CancelService::new(
        Arc::new(repo),
        Arc::new(workbench_domain::flow::MockFlowRepository::new()),
        clock(at),
    )
    .with_lease(lease);
    assert!(!service.step().await.expect("step"));
}

#[tokio::test]
async fn csv_tasks_are_leased_on_the_clocks_time() {
    use workbench_domain::bulk::{BulkService, MockBulkRepository};
    use workbench_domain::mocks::MockInvocationRepository;
    use workbench_domain::trigger::TriggerService;
    let at = database_time();
    let lease = Duration::seconds(11);
    let mut tasks = MockBulkRepository::new();
    tasks
        .expect_claim()
        .withf(move |now, until, _| *now == at && *until == at + lease)
        .times(1)
        .returning(|_, _, _| Ok(None));
    let flows: Arc<dyn workbench_domain::FlowRepository> =
        Arc::new(workbench_domain::flow::MockFlowRepository::new());
    let triggers = TriggerService::new(
        flows.clone(),
        Arc::new(MockInvocationRepository::new()),
        Arc::new(workbench_domain::audience::MockSegmentRepository::new()),
        Arc::new(workbench_domain::audience::MockStreamRepository::new()),
        clock(at),
    );
    let service = BulkService::new(
        Arc::new(tasks),
        flows,
        Arc::new(workbench_domain::audience::MockEndUserRepository::new()),
        Arc::new(triggers),
        clock(at),
        b"key".to_vec(),
    )
    .with_lease(lease);
    assert!(!service.step().await.expect("step"));
}
