//! The daily totals read back ([`StatsRepository`]); `crate::totals` writes them.

use async_trait::async_trait;
use chrono::NaiveDate;
use diesel::prelude::*;
use domain::stats::{DayRange, StatsRepository, Total};
use domain::StorageError;

use crate::db::Database;
use crate::error::read_number;
use crate::schema::flow_totals;

/// Ids per `IN (...)` of the folders read.
const CHUNK: usize = 500;

/// The daily totals of flows and folders.
#[derive(Clone)]
pub struct DieselStatsRepository {
    db: Database,
}

impl DieselStatsRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        DieselStatsRepository { db }
    }
}

fn day(d: NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

/// Stored rows as totals; a row that does not read back is corrupt.
fn totals(rows: Vec<(String, i32, String, i64)>) -> Result<Vec<Total>, StorageError> {
    rows.into_iter()
        .map(|(d, version, metric, n)| {
            Ok(Total {
                day: NaiveDate::parse_from_str(&d, "%Y-%m-%d")
                    .map_err(|_| StorageError::Internal(format!("a daily total's day `{d}`")))?,
                flow_version: read_number("a daily total's flow version", version)?,
                metric,
                n: read_number("a daily total", n)?,
            })
        })
        .collect()
}

#[async_trait]
impl StatsRepository for DieselStatsRepository {
    async fn flow_totals(
        &self,
        environment_id: &str,
        flow_id: &str,
        range: DayRange,
    ) -> Result<Vec<Total>, StorageError> {
        let (env, flow) = (environment_id.to_owned(), flow_id.to_owned());
        let rows = self
            .db
            .run(move |conn| {
                let mut query = flow_totals::table
                    .filter(flow_totals::environment_id.eq(env))
                    .filter(flow_totals::flow_id.eq(flow))
                    .filter(flow_totals::day.between(day(range.from), day(range.to)))
                    .filter(flow_totals::mode.eq(range.mode.as_str()))
                    .select((
                        flow_totals::day,
                        flow_totals::flow_version,
                        flow_totals::metric,
                        flow_totals::n,
                    ))
                    .into_boxed();
                if let Some(v) = range.version {
                    let v = i32::try_from(v).unwrap_or(i32::MAX);
                    query = query.filter(flow_totals::flow_version.eq(v));
                }
                if let Some(metrics) = range.metrics {
                    query = query.filter(flow_totals::metric.eq_any(metrics));
                }
                let rows: Vec<(String, i32, String, i64)> = query.load(conn)?;
                Ok(rows)
            })
            .await?;
        totals(rows)
    }

    async fn folder_totals(
        &self,
        environment_id: &str,
        folder_ids: Vec<String>,
        range: DayRange,
    ) -> Result<Vec<Total>, StorageError> {
        let env = environment_id.to_owned();
        let rows = self
            .db
            .run(move |conn| {
                let mut rows: Vec<(String, i32, String, i64)> = Vec::new();
                for chunk in folder_ids.chunks(CHUNK) {
                    let mut query = flow_totals::table
                        .filter(flow_totals::environment_id.eq(&env))
                        .filter(flow_totals::folder_id.eq_any(chunk))
                        .filter(flow_totals::day.between(day(range.from), day(range.to)))
                        .filter(flow_totals::mode.eq(range.mode.as_str()))
                        .select((
                            flow_totals::day,
                            flow_totals::flow_version,
                            flow_totals::metric,
                            flow_totals::n,
                        ))
                        .into_boxed();
                    if let Some(metrics) = range.metrics {
                        query = query.filter(flow_totals::metric.eq_any(metrics));
                    }
                    rows.extend(query.load::<(String, i32, String, i64)>(conn)?);
                }
                Ok(rows)
            })
            .await?;
        totals(rows)
    }
}
