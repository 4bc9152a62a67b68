use super::*;
use std::path::PathBuf;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::{Connection, RunQueryDsl};

use super::calls::FRESH;
use super::connection::SQLITE_PAGE_SIZE;

#[test]
fn urls_choose_the_backend_by_scheme() {
    let sqlite = DatabaseUrl::parse("sqlite://./data/workbench.db").expect("sqlite");
    assert_eq!(sqlite.backend(), Backend::Sqlite);
    assert_eq!(
        sqlite.sqlite_file(),
        Some(PathBuf::from("./data/workbench.db"))
    );
    for pg in ["postgres://u:p@localhost/db", "postgresql://localhost/db"] {
        let url = DatabaseUrl::parse(pg).expect("postgres");
        assert_eq!(url.backend(), Backend::Postgres);
        assert_eq!(url.sqlite_file(), None);
    }
    for bad in ["mysql://x", "sqlite://", "workbench.db", ""] {
        assert!(
            matches!(DatabaseUrl::parse(bad), Err(DatabaseError::UnsupportedUrl)),
            "{bad}"
        );
    }
}

#[test]
fn a_new_sqlite_database_gets_the_page_size_and_wal() {
    let db = crate::testing::TestDatabase::sqlite();
    Database::connect(db.url(), 1).expect("connect");
    let pragma = |name: &str| {
        crate::testing::raw_texts(
            db.url(),
            &format!("SELECT CAST({name} AS TEXT) AS v FROM pragma_{name}"),
        )
    };
    assert_eq!(pragma("page_size"), [SQLITE_PAGE_SIZE.to_string()]);
    assert_eq!(pragma("journal_mode"), ["wal"]);
}

#[test]
fn a_new_sqlite_database_and_its_wal_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let test = crate::testing::TestDatabase::sqlite();
    let db = Database::connect(test.url(), 1).expect("connect");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(db.run(|conn| {
        conn.batch_execute("CREATE TABLE IF NOT EXISTS touched (x INTEGER)")?;
        Ok(())
    }))
    .expect("write");
    let file = DatabaseUrl::parse(test.url())
        .expect("url")
        .sqlite_file()
        .expect("file");
    for suffix in ["", "-wal", "-shm"] {
        let mut path = file.clone().into_os_string();
        path.push(suffix);
        let mode = std::fs::metadata(&path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{}", std::path::Path::new(&path).display());
    }
}

#[test]
fn every_pooled_sqlite_connection_is_synchronous_full_unless_normal_is_asked_for() {
    let synchronous = |db: &Database| -> Vec<i32> {
        #[derive(diesel::QueryableByName)]
        struct Value {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            synchronous: i32,
        }
        // Every connection of the pool at once: each was set up on its own.
        let mut held = Vec::new();
        let mut values = Vec::new();
        for _ in 0..3 {
            let mut pooled = db.pool.get().expect("connection");
            let v: Value = diesel::sql_query("PRAGMA synchronous")
                .get_result(&mut pooled.conn)
                .expect("pragma");
            values.push(v.synchronous);
            held.push(pooled);
        }
        values
    };
    let test = crate::testing::TestDatabase::sqlite();
    let url = DatabaseUrl::parse(test.url()).expect("url");
    // SQLite: FULL is 2, NORMAL is 1.
    let full = Database::open(url.clone(), 3).expect("connect");
    assert_eq!(synchronous(&full), [2, 2, 2]);
    // A claim's commit is relaxed for itself only: its connection is FULL again after it,
    // whether it committed or failed.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for fails in [false, true] {
        let during = rt
            .block_on(full.claim_transaction(move |conn| {
                #[derive(diesel::QueryableByName)]
                struct Value {
                    #[diesel(sql_type = diesel::sql_types::Integer)]
                    synchronous: i32,
                }
                let v: Value = diesel::sql_query("PRAGMA synchronous").get_result(conn)?;
                if fails {
                    return Err(Failure::Domain(StorageError::Internal("refused".into())));
                }
                Ok(v.synchronous)
            }))
            .ok();
        assert_eq!(during, (!fails).then_some(1));
        assert_eq!(synchronous(&full), [2, 2, 2]);
    }
    let normal = Database::open(url.with_synchronous(Synchronous::Normal), 3).expect("connect");
    assert_eq!(synchronous(&normal), [1, 1, 1]);
    assert_eq!(Synchronous::parse(" NORMAL "), Some(Synchronous::Normal));
    assert_eq!(Synchronous::parse("off"), None);
}

#[tokio::test]
async fn a_write_past_the_databases_room_is_full_and_nothing_of_it_is_stored() {
    let test = crate::testing::TestDatabase::sqlite();
    let db = Database::connect(test.url(), 1).expect("connect");
    let count = |db: &Database| {
        let db = db.clone();
        async move {
            db.run(|conn| {
                #[derive(diesel::QueryableByName)]
                struct N {
                    #[diesel(sql_type = diesel::sql_types::BigInt)]
                    n: i64,
                }
                let n: N =
                    diesel::sql_query("SELECT count(*) AS n FROM filler").get_result(conn)?;
                Ok(n.n)
            })
            .await
            .expect("count")
        }
    };
    db.transaction(|conn| {
        conn.batch_execute("CREATE TABLE filler (b BLOB NOT NULL)")?;
        Ok(())
    })
    .await
    .expect("table");
    // The database may not grow past its pages now (as a full disk would refuse them).
    db.run(|conn| {
        #[derive(diesel::QueryableByName)]
        struct P {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            page_count: i64,
        }
        let p: P = diesel::sql_query("PRAGMA page_count").get_result(conn)?;
        conn.batch_execute(&format!("PRAGMA max_page_count = {}", p.page_count + 2))?;
        Ok(())
    })
    .await
    .expect("limit");
    let storage = db.storage();
    let refused = db
        .transaction(|conn| {
            // One row fits; the second transaction's rows do not, all or nothing.
            for _ in 0..50 {
                conn.batch_execute("INSERT INTO filler VALUES (zeroblob(4000))")?;
            }
            Ok(())
        })
        .await;
    assert!(matches!(refused, Err(StorageError::Full(_))), "{refused:?}");
    assert!(storage.full(), "reported");
    assert_eq!(storage.full_errors(), 1);
    assert_eq!(count(&db).await, 0, "nothing half-written");
    db.transaction(|conn| {
        conn.batch_execute("DELETE FROM filler")?;
        Ok(())
    })
    .await
    .expect("a write that fits");
    assert!(!storage.full(), "a write that succeeds clears it");
}

#[test]
fn a_bad_postgres_url_reports_the_real_error() {
    let err = Database::connect("postgres://nobody@127.0.0.1:1/none", 1)
        .err()
        .expect("fails");
    let DatabaseError::Connect(message) = err else {
        panic!("{err:?}")
    };
    assert!(message.to_lowercase().contains("connect"), "{message}");
}

/// Contract §17: `migrate status` changes nothing, `migrate` applies what is pending once,
/// `--no-migrate` refuses a database lacking migrations, and a database migrated by a newer
/// version is refused by every path.
fn the_schema_is_migrated_only_when_asked_and_a_newer_one_is_refused(url: &str) {
    let parsed = || DatabaseUrl::parse(url).expect("url");
    let fresh = schema_status(&parsed()).expect("status");
    assert!(
        fresh.applied.is_empty() && fresh.newer.is_empty(),
        "{fresh:?}"
    );
    assert_eq!(fresh.pending.last(), Some(&fresh.latest));
    assert_eq!(fresh.current(), None);
    if let Some(file) = parsed().sqlite_file() {
        assert!(!file.exists(), "a status read does not create the database");
    }

    match Database::open_with(parsed(), 1, false) {
        Err(DatabaseError::PendingMigrations(pending)) => assert_eq!(pending, fresh.pending),
        other => panic!("--no-migrate on an empty database: {:?}", other.map(|_| ())),
    }
    let (applied, after) = apply_migrations(&parsed()).expect("migrate");
    assert_eq!(applied, fresh.pending);
    assert!(after.pending.is_empty());
    assert_eq!(after.current(), Some(after.latest.as_str()));
    let (again, _) = apply_migrations(&parsed()).expect("migrate again");
    assert!(again.is_empty(), "applied once: {again:?}");
    Database::open_with(parsed(), 1, false).expect("nothing pending: --no-migrate starts");

    // A version this binary does not carry, newer than all it does.
    crate::testing::raw_execute(
        url,
        "INSERT INTO __diesel_schema_migrations (version) VALUES ('99991231000000')",
    );
    let newer = schema_status(&parsed()).expect("status");
    assert_eq!(newer.newer, ["99991231000000"]);
    assert_eq!(newer.current(), Some("99991231000000"));
    for refused in [
        Database::open_with(parsed(), 1, true).map(|_| ()),
        Database::open_with(parsed(), 1, false).map(|_| ()),
        apply_migrations(&parsed()).map(|_| ()),
    ] {
        match refused {
            Err(e @ DatabaseError::NewerSchema { .. }) => {
                let said = e.to_string();
                assert!(
                    said.contains("99991231000000") && said.contains(&newer.latest),
                    "{said}"
                );
            }
            other => panic!("a newer schema: {other:?}"),
        }
    }
}

#[test]
fn sqlite_the_schema_is_migrated_only_when_asked_and_a_newer_one_is_refused() {
    let db = crate::testing::TestDatabase::sqlite();
    the_schema_is_migrated_only_when_asked_and_a_newer_one_is_refused(db.url());
}

#[test]
fn postgres_the_schema_is_migrated_only_when_asked_and_a_newer_one_is_refused() {
    let Some(db) = crate::testing::TestDatabase::postgres() else {
        return;
    };
    the_schema_is_migrated_only_when_asked_and_a_newer_one_is_refused(db.url());
}

/// Contract §17: every PostgreSQL connection carries the statement timeout and the name
/// `workbench`; a statement past the timeout is stopped on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_carry_the_statement_timeout_and_their_name() {
    #[derive(diesel::QueryableByName)]
    struct Shown {
        #[diesel(sql_type = diesel::sql_types::Text)]
        timeout: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        name: String,
    }
    let Some(db) = crate::testing::TestDatabase::postgres() else {
        return;
    };
    let url = DatabaseUrl::parse(db.url())
        .expect("url")
        .with_waits(Waits {
            statement: Duration::from_secs(1),
            ..Waits::default()
        });
    let database = tokio::task::spawn_blocking(move || Database::open(url, 1))
        .await
        .expect("join")
        .expect("open");
    let shown = database
        .run(|conn| {
            Ok(diesel::sql_query(
                "SELECT current_setting('statement_timeout') AS timeout, \
                 current_setting('application_name') AS name",
            )
            .get_result::<Shown>(conn)?)
        })
        .await
        .expect("settings");
    assert_eq!(
        (shown.timeout.as_str(), shown.name.as_str()),
        ("1s", "workbench")
    );
    let started = std::time::Instant::now();
    let slow = database
        .run(|conn| Ok(diesel::sql_query("SELECT pg_sleep(4)").execute(conn)?))
        .await;
    assert!(slow.is_err(), "stopped by the statement timeout");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_call_kept_waiting_for_a_connection_shows_in_the_pools_waits() {
    let test = crate::testing::TestDatabase::sqlite();
    let db = Database::connect(test.url(), 1).expect("connect");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let before = db.pool_state();
        assert_eq!((before.idle, before.active), (1, 0), "{before:?}");
        // One call holds the only connection for 300 ms...
        let holder = db.clone();
        let held = tokio::spawn(async move {
            holder
                .run(|_| {
                    std::thread::sleep(Duration::from_millis(300));
                    Ok(())
                })
                .await
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while db.pool_state().active == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let busy = db.pool_state();
        assert_eq!((busy.idle, busy.active), (0, 1), "{busy:?}");
        // ... while another waits for it.
        db.run(|_| Ok(())).await.expect("the second call");
        held.await.expect("join").expect("the first call");
    });
    let after = db.pool_state();
    assert_eq!((after.idle, after.active), (1, 0), "{after:?}");
    let waits = after.waits;
    assert_eq!(waits.count, 2, "{waits:?}");
    let under = |bound: f64| {
        waits
            .buckets
            .iter()
            .find(|(b, _)| *b == bound)
            .map(|(_, n)| *n)
            .expect("bucket")
    };
    assert_eq!(
        under(0.1),
        1,
        "the first call found its connection free: {waits:?}"
    );
    assert!(
        waits.sum >= 0.2,
        "the second waited for the first: {waits:?}"
    );
}

/// A pooled connection that the server ended while it sat idle is pinged when it is taken
/// again, and replaced: after PostgreSQL restarts, calls go on. One given back moments ago is
/// handed out without a ping (`calls::FRESH`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_connection_ended_by_the_server_is_replaced_once_idle() {
    #[derive(diesel::QueryableByName)]
    struct Pid {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        pid: i32,
    }
    let Some(db) = crate::testing::TestDatabase::postgres() else {
        return;
    };
    let url = DatabaseUrl::parse(db.url()).expect("url");
    let database = tokio::task::spawn_blocking(move || Database::open(url, 1))
        .await
        .expect("join")
        .expect("open");
    let server_process = || {
        database.run(|conn| {
            Ok(diesel::sql_query("SELECT pg_backend_pid() AS pid")
                .get_result::<Pid>(conn)?
                .pid)
        })
    };
    let first = server_process().await.expect("the pool's connection");
    assert_eq!(
        server_process().await.expect("taken again at once"),
        first,
        "one connection in the pool"
    );
    let mut other = PgConnection::establish(db.url()).expect("another connection");
    diesel::sql_query(format!("SELECT pg_terminate_backend({first})"))
        .execute(&mut other)
        .expect("ended");
    tokio::time::sleep(FRESH + Duration::from_millis(200)).await;
    let replaced = server_process().await.expect("a call after the end");
    assert_ne!(replaced, first, "a new connection");
}

/// On PostgreSQL (when `TEST_POSTGRES_URL` is set) the pool opens no connection at start
/// (migrations have their own) and one for each call held at once, no spare: an idle process
/// keeps no server processes it has not needed (issue 23: pools grow with use, not at
/// start). SQLite's pool opens all its connections at start (see `Database::open_with`).
#[test]
fn the_pool_opens_postgres_connections_as_calls_need_them_not_at_start() {
    let sqlite = crate::testing::TestDatabase::sqlite();
    let db = Database::connect(sqlite.url(), 8).expect("connect");
    assert_eq!(db.pool.state().connections, 8, "SQLite: all at start");
    let Some(postgres) = crate::testing::TestDatabase::postgres() else {
        return;
    };
    let db = Database::connect(postgres.url(), 8).expect("connect");
    let open = |db: &Database| db.pool.state().connections;
    assert_eq!(open(&db), 0, "connections right after start");
    let held: Vec<_> = (0..3).map(|_| db.pool.get().expect("connection")).collect();
    // A spare would be opened on a thread of r2d2's: give it the time to show.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(open(&db), 3, "three calls at once");
    drop(held);
    assert_eq!(open(&db), 3, "kept while they may be needed again");
}

/// Two transactions inserting the same keys in other orders deadlock; PostgreSQL ends one of
/// them, which is then rolled back and reported to be run again, not failed.
#[test]
fn postgres_a_transaction_ended_to_break_a_deadlock_is_run_again() {
    let Some(test) = crate::testing::TestDatabase::postgres() else {
        return;
    };
    let db = Database::connect(test.url(), 2).expect("connect");
    crate::testing::raw_execute(
        test.url(),
        "CREATE TABLE deadlocked (k INTEGER PRIMARY KEY)",
    );
    let between = std::sync::Arc::new(std::sync::Barrier::new(2));
    let writers: Vec<_> = [(1, 2), (2, 1)]
        .into_iter()
        .map(|(first, then)| {
            let (db, between) = (db.clone(), between.clone());
            std::thread::spawn(move || {
                db.transaction_blocking_or_retry(move |conn| {
                    let insert = |conn: &mut AnyConnection, k: i32| {
                        diesel::sql_query(format!("INSERT INTO deadlocked (k) VALUES ({k})"))
                            .execute(conn)
                    };
                    insert(conn, first)?;
                    between.wait();
                    insert(conn, then)?;
                    Ok(())
                })
            })
        })
        .collect();
    let outcomes: Vec<Option<()>> = writers
        .into_iter()
        .map(|w| w.join().expect("writer").expect("a retry, not an error"))
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| o.is_none()).count(),
        1,
        "one ended by the deadlock: {outcomes:?}"
    );
}
