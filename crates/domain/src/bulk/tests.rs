use chrono::TimeZone;
use rand::Rng;

use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::Duration;
use serde_json::{json, Map, Value};

use super::service::CHUNK_ROWS;
use super::*;
use crate::trigger::TriggerService;
use crate::{Clock, FlowRepository};

fn t(s: i64) -> Timestamp {
    chrono::Utc
        .timestamp_opt(1_800_000_000 + s, 0)
        .single()
        .expect("time")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn upload_grants_verify_and_refuse_tampering_and_expiry() {
    let grant = UploadGrant {
        environment_id: "env_1".into(),
        flow_id: "flw_1".into(),
        task_id: 42,
        mode: Mode::Test,
        expires: t(300).timestamp(),
    };
    let token = grant.sign(b"key");
    assert_eq!(UploadGrant::verify(&token, b"key", t(0)), Ok(grant.clone()));
    assert_eq!(
        UploadGrant::verify(&token, b"key", t(300)),
        Err(GrantError::Expired)
    );
    assert_eq!(
        UploadGrant::verify(&token, b"other", t(0)),
        Err(GrantError::Tampered)
    );
    // Another task id in the payload, the old signature.
    let (_, tag) = token.split_once('.').expect("dot");
    let forged = format!(
        "{}.{tag}",
        URL_SAFE_NO_PAD.encode("env_1|flw_1|43|test|9999999999")
    );
    assert_eq!(
        UploadGrant::verify(&forged, b"key", t(0)),
        Err(GrantError::Tampered)
    );
    for bad in ["", "x", "a.b", "..", "%%%.%%%"] {
        assert_eq!(
            UploadGrant::verify(bad, b"key", t(0)),
            Err(GrantError::Tampered),
            "{bad}"
        );
    }
}

#[test]
fn headers_are_checked_column_by_column() {
    assert!(CsvHeader::parse(&strings(&[
        "target.attributes.id",
        "payload.variables.name",
        "payload.metadata.m",
        "payload.notificationDetail.d",
        "payload.cardOptions.priority",
        "flowInvocationId"
    ]))
    .is_ok());
    assert!(
        CsvHeader::parse(&strings(&["\u{feff}target.attributes.id"])).is_ok(),
        "a BOM is ignored"
    );
    for (header, needle) in [
        (
            vec!["payload.variables.name"],
            "at least one target.attributes",
        ),
        (
            vec!["target.attributes.id", "payload.cardOptions.colour"],
            "column 2",
        ),
        (vec!["target.attributes.id", "name"], "column 2"),
        (
            vec!["target.attributes.", "target.attributes.id"],
            "column 1",
        ),
        (
            vec!["target.attributes.id", "target.attributes.id"],
            "repeats",
        ),
    ] {
        let err = CsvHeader::parse(&strings(&header)).expect_err("refused");
        assert!(err.contains(needle), "{header:?}: {err}");
    }
}

#[test]
fn a_header_over_the_column_limit_is_refused_by_its_count_and_repeats_are_found_linearly() {
    let mut names = vec!["target.attributes.id".to_owned()];
    names.extend((1..MAX_COLUMNS).map(|i| format!("target.attributes.c{i}")));
    assert!(
        CsvHeader::parse(&names).is_ok(),
        "the limit itself is allowed"
    );
    names.push("target.attributes.one-more".into());
    let err = CsvHeader::parse(&names).expect_err("over the limit");
    assert!(err.contains("at most 1000"), "{err}");
    // Many columns, each repeated: every repeat is named, in time linear in the header.
    let mut repeated: Vec<String> = (0..400)
        .map(|i| format!("target.attributes.r{i}"))
        .collect();
    repeated.extend(repeated.clone());
    let err = CsvHeader::parse(&repeated).expect_err("repeats");
    assert_eq!(
        err.matches("repeats an earlier column").count(),
        400,
        "{err}"
    );
}

#[test]
fn rows_map_to_elements() {
    let header = CsvHeader::parse(&strings(&[
        "target.attributes.id",
        "payload.variables.name",
        "payload.cardOptions.priority",
        "payload.cardOptions.targetStreamIds",
        "payload.cardOptions.targetPlatforms",
        "flowInvocationId",
    ]))
    .expect("header");
    let row = header
        .row(&strings(&["u1", "Ann", "7", "s1|s2", "Web|iOS", ""]))
        .expect("row");
    let element = row.element(vec!["u1".to_owned()], || "csv-1-1".into());
    assert_eq!(
        element,
        json!({"flowInvocationId": "csv-1-1", "target": {"type": "user", "targetUserIds": ["u1"]},
               "payload": {"variables": {"name": "Ann"}, "cardOptions": {"priority": 7,
                   "targetStreamIds": ["s1", "s2"], "targetPlatforms": {"Web": true, "iOS": true,
                       "Android": false}}}})
    );
    assert!(header
        .row(&strings(&["u1"]))
        .expect_err("short")
        .contains("cells"));
    assert!(header
        .row(&strings(&["", "Ann", "", "", "", ""]))
        .expect_err("no target")
        .contains("target.attributes"));
    assert!(header
        .row(&strings(&["u1", "", "high", "", "", ""]))
        .expect_err("priority")
        .contains("priority"));
}

/// Random rows written as CSV cells and read back give the element they came from.
#[test]
fn the_row_to_element_mapping_round_trips() {
    let mut rng = rand::thread_rng();
    let word = |rng: &mut rand::rngs::ThreadRng| -> String {
        let n = rng.gen_range(1..12);
        (0..n)
            .map(|_| char::from(rng.gen_range(b'a'..=b'z')))
            .collect()
    };
    for _ in 0..500 {
        let variables: BTreeMap<String, String> = (0..rng.gen_range(0..4))
            .map(|_| (word(&mut rng), word(&mut rng)))
            .collect();
        let metadata: BTreeMap<String, String> = (0..rng.gen_range(0..3))
            .map(|_| (word(&mut rng), word(&mut rng)))
            .collect();
        let streams: Vec<String> = (0..rng.gen_range(0..3)).map(|_| word(&mut rng)).collect();
        let priority: Option<i64> = rng.gen_bool(0.5).then(|| rng.gen_range(1..=10));
        let invocation: Option<String> = rng.gen_bool(0.5).then(|| word(&mut rng));
        let user = word(&mut rng);
        let mut names = vec!["target.attributes.id".to_owned()];
        let mut cells = vec![user.clone()];
        for (k, v) in &variables {
            names.push(format!("payload.variables.{k}"));
            cells.push(v.clone());
        }
        for (k, v) in &metadata {
            names.push(format!("payload.metadata.{k}"));
            cells.push(v.clone());
        }
        names.push("payload.cardOptions.targetStreamIds".into());
        cells.push(streams.join("|"));
        names.push("payload.cardOptions.priority".into());
        cells.push(priority.map(|p| p.to_string()).unwrap_or_default());
        names.push("flowInvocationId".into());
        cells.push(invocation.clone().unwrap_or_default());
        let header = CsvHeader::parse(&names).expect("header");
        let element = header
            .row(&cells)
            .expect("row")
            .element(vec![user.clone()], || "generated".into());

        let mut payload = Map::new();
        if !variables.is_empty() {
            payload.insert("variables".into(), json!(variables));
        }
        if !metadata.is_empty() {
            payload.insert("metadata".into(), json!(metadata));
        }
        let mut options = Map::new();
        if !streams.is_empty() {
            options.insert("targetStreamIds".into(), json!(streams));
        }
        if let Some(p) = priority {
            options.insert("priority".into(), json!(p));
        }
        if !options.is_empty() {
            payload.insert("cardOptions".into(), Value::Object(options));
        }
        let expected = json!({
            "flowInvocationId": invocation.unwrap_or_else(|| "generated".into()),
            "target": {"type": "user", "targetUserIds": [user]},
            "payload": payload,
        });
        assert_eq!(element, expected);
    }
}

/// A CSV step over mocks: a task of `rows` rows of flow `flw` (see `card_flows`),
/// recorded by `record` (its calls counted from 0); the progress saved is kept.
mod steps {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::audience::{MockEndUserRepository, MockSegmentRepository, MockStreamRepository};
    use crate::trigger::invocation::{BatchResult, Invocation, MockInvocationRepository};
    use crate::trigger::tests::{card_flows, default_stream, now};

    type Asked = Vec<(Invocation, Option<BatchResult>)>;
    type Recorder = Box<dyn Fn(usize, &Asked) -> Result<(), StorageError> + Send + Sync>;
    /// What `save_progress` was given: the task's cursor and status, then from, handled,
    /// failed and the errors.
    type Saved = Arc<Mutex<Vec<(u64, BulkStatus, u64, u64, u64, Vec<RowError>)>>>;
    /// A save to this cursor is refused: the lease had passed to another holder.
    const STALE_CURSOR: u64 = 3;

    fn task() -> BulkTask {
        BulkTask {
            id: 7,
            status: BulkStatus::Processing,
            header: Some(strings(&["target.attributes.id", "payload.variables.name"])),
            ..BulkTask::new("env", "flw", Mode::Live, now())
        }
    }

    fn service(
        rows: Vec<(u64, Vec<String>)>,
        record: Recorder,
    ) -> (BulkService, Arc<Mutex<Vec<Asked>>>, Saved) {
        let mut tasks = MockBulkRepository::new();
        tasks
            .expect_claim()
            .times(1)
            .returning(|_, _, _| Ok(Some(task())));
        tasks
            .expect_rows()
            .times(1)
            .returning(move |_, _, after, limit| {
                assert_eq!((after, limit), (0, ROWS_PER_STEP));
                Ok(rows.clone())
            });
        let saved: Saved = Arc::default();
        let sink = saved.clone();
        tasks
            .expect_save_progress()
            .returning(move |task, from, handled, failed, errors| {
                sink.lock().expect("saved").push((
                    task.cursor,
                    task.status,
                    from,
                    handled,
                    failed,
                    errors,
                ));
                Ok(task.cursor != STALE_CURSOR)
            });
        let flows = card_flows();
        let mut streams = MockStreamRepository::new();
        streams
            .expect_list()
            .returning(|env, _| Ok(vec![default_stream(env)]));
        let recorded: Arc<Mutex<Vec<Asked>>> = Arc::default();
        let sink = recorded.clone();
        let mut invocations = MockInvocationRepository::new();
        invocations.expect_record_run().returning(move |asked| {
            let mut calls = sink.lock().expect("recorded");
            record(calls.len(), &asked)?;
            let answer = vec![None; asked.len()];
            calls.push(asked);
            Ok(answer)
        });
        let invocations = Arc::new(invocations);
        let mut clock = crate::time::MockClock::new();
        clock.expect_now().returning(now);
        let clock: Arc<dyn Clock> = Arc::new(clock);
        let flows: Arc<dyn FlowRepository> = Arc::new(flows);
        let triggers = TriggerService::new(
            flows.clone(),
            invocations.clone(),
            Arc::new(MockSegmentRepository::new()),
            Arc::new(streams),
            clock.clone(),
        );
        let service = BulkService::new(
            Arc::new(tasks),
            flows,
            Arc::new(MockEndUserRepository::new()),
            Arc::new(triggers),
            clock,
            b"key".to_vec(),
        );
        (service, recorded, saved)
    }

    #[tokio::test]
    async fn a_step_that_panics_is_tried_three_times_then_the_task_fails_alone_with_an_error_id() {
        let mut tasks = MockBulkRepository::new();
        tasks.expect_claim().times(1).returning(|_, until, _| {
            Ok(Some(BulkTask {
                lease_until: Some(until),
                ..task()
            }))
        });
        tasks
            .expect_rows()
            .times(crate::unit::ATTEMPTS as usize)
            .returning(|_, _, _, _| panic!("injected: rows cannot be read"));
        tasks
            .expect_fail()
            .times(1)
            .withf(|env, id, errors, _, held| {
                env == "env"
                    && *id == 7
                    && errors.len() == 1
                    && errors[0].message.contains("errorId err_")
                    && !errors[0].message.contains("injected")
                    && *held
                        == Some(now() + Duration::seconds(i64::from(crate::unit::LEASE_SECONDS)))
            })
            // The lease has passed to another holder meanwhile: the failure is not kept.
            .returning(|_, _, _, _, _| Ok(false));
        let mut clock = crate::time::MockClock::new();
        clock.expect_now().returning(now);
        let clock: Arc<dyn Clock> = Arc::new(clock);
        let flows: Arc<dyn FlowRepository> = Arc::new(crate::flow::MockFlowRepository::new());
        let triggers = TriggerService::new(
            flows.clone(),
            Arc::new(MockInvocationRepository::new()),
            Arc::new(MockSegmentRepository::new()),
            Arc::new(MockStreamRepository::new()),
            clock.clone(),
        );
        let service = BulkService::new(
            Arc::new(tasks),
            flows,
            Arc::new(MockEndUserRepository::new()),
            Arc::new(triggers),
            clock,
            b"key".to_vec(),
        );
        assert!(service.step().await.expect("the loop goes on"));
        assert_eq!(service.take_stale(), 1, "the refused failure is counted");
    }

    /// Rows 1..=n; those in `bad` have one cell where the header has two.
    fn rows(n: u64, bad: &[u64]) -> Vec<(u64, Vec<String>)> {
        (1..=n)
            .map(|i| match bad.contains(&i) {
                true => (i, vec![format!("u{i}")]),
                false => (i, vec![format!("u{i}"), format!("Name{i}")]),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_step_records_each_row_once_in_chunks_and_lists_row_errors_in_order() {
        let bad = [7, CHUNK_ROWS as u64 + 5, 299];
        let (service, recorded, saved) = service(rows(300, &bad), Box::new(|_, _| Ok(())));
        assert!(service.step().await.expect("step"));
        let calls = recorded.lock().expect("recorded");
        // One call per chunk of rows, each with its chunk's good rows.
        let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            [CHUNK_ROWS - 1, CHUNK_ROWS - 1, 300 - 2 * CHUNK_ROWS - 1]
        );
        let ids: Vec<String> = calls
            .iter()
            .flatten()
            .map(|(i, _)| i.id.as_str().to_owned())
            .collect();
        let expected: Vec<String> = (1..=300u64)
            .filter(|n| !bad.contains(n))
            .map(|n| format!("csv-7-{n}"))
            .collect();
        assert_eq!(ids, expected, "every good row once, in order");
        for (invocation, run) in calls.iter().flatten() {
            let n = invocation.id.trim_start_matches("csv-7-");
            let run = run.as_ref().expect("a one-user row runs when recorded");
            let users: Vec<&str> = run.cards.iter().map(|c| c.user_id.as_str()).collect();
            assert_eq!(users, [format!("u{n}")]);
            assert_eq!(
                run.cards[0].context.value()["variables"]["name"],
                format!("Name{n}"),
                "each row its own variables"
            );
        }
        let saved = saved.lock().expect("saved");
        let [(cursor, status, from, handled, failed, errors)] = saved.as_slice() else {
            panic!("one save: {saved:?}");
        };
        assert_eq!(
            (*cursor, *status, *from, *handled, *failed),
            (300, BulkStatus::Completed, 0, 300, 3)
        );
        let rows: Vec<u64> = errors.iter().map(|e| e.row).collect();
        assert_eq!(rows, bad);
        assert!(errors[0].message.contains("has 1 cells"), "{errors:?}");
    }

    #[tokio::test]
    async fn a_step_whose_lease_passed_to_another_holder_is_counted_stale() {
        // Rows are recorded under ids of their own, so the other holder records none
        // twice; the repository refuses this holder's progress, and it is counted.
        let (service, _, saved) = service(rows(STALE_CURSOR, &[]), Box::new(|_, _| Ok(())));
        assert!(service.step().await.expect("step"));
        assert_eq!(saved.lock().expect("saved").len(), 1);
        assert_eq!(service.take_stale(), 1);
    }

    #[tokio::test]
    async fn a_step_whose_rows_cannot_be_recorded_saves_no_progress() {
        let refuse: Recorder = Box::new(|call, _| match call {
            1 => Err(StorageError::Unavailable("disk full".into())),
            _ => Ok(()),
        });
        let (service, recorded, saved) = service(rows(3 * CHUNK_ROWS as u64, &[]), refuse);
        let err = service.step().await.expect_err("the step fails");
        assert!(err.to_string().contains("disk full"), "{err}");
        assert!(
            saved.lock().expect("saved").is_empty(),
            "no progress past rows not recorded: the next claim takes them again"
        );
        assert!(recorded.lock().expect("recorded").len() <= 2);
    }
}
