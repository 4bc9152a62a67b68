//! Isolated databases for tests: a fresh SQLite file, or a fresh PostgreSQL schema on the
//! server named by `TEST_POSTGRES_URL`. Both are removed when the value is dropped.
//!
//! Without `TEST_POSTGRES_URL`, [`TestDatabase::postgres`] returns `None` so the caller can
//! skip visibly; when `CI` is set it panics instead, so CI can never pass by skipping.

use std::path::PathBuf;

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};

/// A fresh database for one test: a temporary SQLite file, or a schema of its own on
/// `TEST_POSTGRES_URL`, removed when dropped.
pub struct TestDatabase {
    url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    File(PathBuf),
    Schema { base_url: String, schema: String },
}

impl TestDatabase {
    /// A new SQLite database in the system's temporary folder.
    pub fn sqlite() -> Self {
        let file = std::env::temp_dir().join(format!("workbench-test-{}.db", unique()));
        TestDatabase {
            url: format!("sqlite://{}", file.display()),
            cleanup: Cleanup::File(file),
        }
    }

    /// A new, empty schema on the test PostgreSQL server, or `None` when there is none
    /// configured outside CI.
    pub fn postgres() -> Option<Self> {
        let base_url = match std::env::var("TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => url,
            _ if std::env::var_os("CI").is_some() => {
                panic!("TEST_POSTGRES_URL is not set: the PostgreSQL tests must run in CI")
            }
            _ => {
                eprintln!("skipping: TEST_POSTGRES_URL is not set (PostgreSQL tests not run)");
                return None;
            }
        };
        let schema = format!("test_{}", unique());
        let mut admin = PgConnection::establish(&base_url)
            .unwrap_or_else(|e| panic!("cannot connect to TEST_POSTGRES_URL: {e}"));
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .unwrap_or_else(|e| panic!("cannot create test schema: {e}"));
        let separator = if base_url.contains('?') { '&' } else { '?' };
        let url = format!("{base_url}{separator}options=--search_path%3D{schema}");
        Some(TestDatabase {
            url,
            cleanup: Cleanup::Schema { base_url, schema },
        })
    }

    /// The `WORKBENCH_DATABASE_URL` of this database.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::File(file) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut path = file.clone().into_os_string();
                    path.push(suffix);
                    let _ = std::fs::remove_file(path);
                }
            }
            Cleanup::Schema { base_url, schema } => {
                if let Ok(mut admin) = PgConnection::establish(base_url) {
                    let _ = admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
                }
            }
        }
    }
}

pub(crate) fn unique() -> String {
    ulid::Ulid::new().to_string().to_ascii_lowercase()
}

/// Writes each test once and runs it on both backends: `sqlite::name` and `postgres::name`.
/// Each test is an `async fn name(url: &str)` in the invoking module.
#[macro_export]
macro_rules! both_backends {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let db = $crate::testing::TestDatabase::sqlite();
                    super::$test(db.url()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let Some(db) = $crate::testing::TestDatabase::postgres() else { return };
                    super::$test(db.url()).await;
                }
            )*
        }
    };
}

/// The `v` column of every row `sql` returns, as text, read with a connection of its own:
/// for tests that look at what is really stored (sealed secrets, cleaned-up rows).
pub fn raw_texts(url: &str, sql: &str) -> Vec<String> {
    use diesel::sql_types::Text;
    use diesel::RunQueryDsl;

    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        v: String,
    }
    let rows: Vec<Row> = if let Some(path) = url.strip_prefix("sqlite://") {
        let mut c = diesel::SqliteConnection::establish(path).expect("sqlite");
        // The pool's own connections may still be being set up (r2d2 opens them on threads
        // of its own): wait for their locks, as the service's connections do.
        diesel::connection::SimpleConnection::batch_execute(&mut c, "PRAGMA busy_timeout = 5000")
            .expect("busy timeout");
        diesel::sql_query(sql).load(&mut c).expect("query")
    } else {
        let mut c = PgConnection::establish(url).expect("postgres");
        diesel::sql_query(sql).load(&mut c).expect("query")
    };
    rows.into_iter().map(|r| r.v).collect()
}

/// The SQL literal of an instant (`YYYY-MM-DD HH:MM:SS[.fff]`, UTC) in a column of a table
/// whose instants are milliseconds on SQLite (cards, events, invocations, webhook attempts;
/// `crate::millis`): an integer there, the quoted text on PostgreSQL.
pub fn instant(url: &str, text: &str) -> String {
    if url.starts_with("sqlite://") {
        let t = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
            .expect("an instant as YYYY-MM-DD HH:MM:SS");
        crate::millis::millis(t).to_string()
    } else {
        format!("'{text}'")
    }
}

/// Runs one statement on a connection of its own (what an older version, or an operator,
/// wrote behind the repositories' back).
pub fn raw_execute(url: &str, sql: &str) {
    use diesel::RunQueryDsl;

    if let Some(path) = url.strip_prefix("sqlite://") {
        let mut c = diesel::SqliteConnection::establish(path).expect("sqlite");
        diesel::connection::SimpleConnection::batch_execute(&mut c, "PRAGMA busy_timeout = 5000")
            .expect("busy timeout");
        diesel::sql_query(sql).execute(&mut c).expect("statement");
    } else {
        let mut c = PgConnection::establish(url).expect("postgres");
        diesel::sql_query(sql).execute(&mut c).expect("statement");
    }
}

/// The details of SQLite's `EXPLAIN QUERY PLAN` for `sql` (its parameters unbound: the plan
/// does not depend on their values), on a new migrated database: for tests that a query reads
/// the index meant for it.
pub fn sqlite_plan(sql: &str) -> Vec<String> {
    use diesel::RunQueryDsl;

    #[derive(diesel::QueryableByName)]
    struct Step {
        #[diesel(sql_type = diesel::sql_types::Text)]
        detail: String,
    }
    let (_db, mut conn) = sqlite_connection();
    let crate::db::AnyConnection::Sqlite(conn) = &mut conn else {
        panic!("sqlite")
    };
    let plan: Vec<Step> = diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
        .load(conn)
        .expect("plan");
    plan.into_iter().map(|s| s.detail).collect()
}

/// [`sqlite_plan`] of a diesel query, as diesel writes it for SQLite.
#[cfg(test)]
pub(crate) fn sqlite_query_plan<Q>(query: &Q) -> Vec<String>
where
    Q: diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite>,
{
    let sql = diesel::debug_query::<diesel::sqlite::Sqlite, _>(query).to_string();
    sqlite_plan(sql.split(" -- binds").next().unwrap_or_default())
}

/// A connection to a new migrated SQLite database, with the database it is to (kept while
/// the connection is used).
fn sqlite_connection() -> (TestDatabase, crate::db::AnyConnection) {
    let db = TestDatabase::sqlite();
    let _migrated = crate::Database::connect(db.url(), 1).expect("connect and migrate");
    let conn = crate::db::DatabaseUrl::parse(db.url())
        .expect("url")
        .establish()
        .expect("connect");
    (db, conn)
}

/// The statements diesel prepared and kept in its cache while `run` ran twice on a new
/// migrated SQLite database, in order: for tests that a statement run in every transaction is
/// prepared once per connection, not again at each execution.
#[cfg(test)]
pub(crate) fn sqlite_kept(mut run: impl FnMut(&mut crate::db::AnyConnection)) -> Vec<String> {
    use diesel::connection::InstrumentationEvent;
    use std::sync::{Arc, Mutex};

    let (_db, mut conn) = sqlite_connection();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let seen = kept.clone();
    conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
        if let InstrumentationEvent::CacheQuery { sql, .. } = event {
            seen.lock().expect("kept").push(sql.to_owned());
        }
    });
    run(&mut conn);
    run(&mut conn);
    let kept = kept.lock().expect("kept").clone();
    kept
}

/// Asserts that of the statements [`sqlite_kept`] lists for `run`, exactly one reads `table`.
#[cfg(test)]
pub(crate) fn sqlite_keeps_one_read_of(
    table: &str,
    run: impl FnMut(&mut crate::db::AnyConnection),
) {
    let kept = sqlite_kept(run);
    let reads = kept
        .iter()
        .filter(|sql| sql.starts_with("SELECT") && sql.contains(table));
    assert_eq!(reads.count(), 1, "{kept:#?}");
}
