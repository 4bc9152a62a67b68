//! The instants of the tables written for every card (cards, their events, invocations and
//! webhook attempts) as SQLite stores them: whole milliseconds since 1970 in an `INTEGER`,
//! 6 bytes where diesel's `Timestamp` writes 23 characters of text. A card and what it causes
//! hold about twenty instants, in rows and index entries: this is a good share of a card's
//! bytes at rest (issue 27, the bytes-per-card goal of docs/benchmarks.md). PostgreSQL keeps
//! its `timestamp` columns: the type below is diesel's `Timestamp` there.
//!
//! An instant is millisecond-precise in the domain ([`domain::Timestamp`]), so none is cut.
//! A text value still read from such a column (written before migration
//! `20261126000060_integer_times`, which converts them) is parsed as diesel's `Timestamp`
//! would.

use chrono::{DateTime, NaiveDateTime};
use diesel::backend::Backend;
use diesel::deserialize::{self, FromSql};
use diesel::pg::Pg;
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::{BigInt, HasSqlType, Timestamp};
use diesel::sqlite::{Sqlite, SqliteType};

use crate::db::MultiBackend;

/// An instant: milliseconds since 1970 (`INTEGER`) on SQLite, `timestamp` on PostgreSQL.
#[derive(
    Debug, Clone, Copy, Default, diesel::query_builder::QueryId, diesel::sql_types::SqlType,
)]
#[diesel(sqlite_type(name = "Long"))]
#[diesel(postgres_type(oid = 1114, array_oid = 1115))]
pub struct Millis;

/// `t` as SQLite stores it.
pub(crate) fn millis(t: NaiveDateTime) -> i64 {
    t.and_utc().timestamp_millis()
}

impl ToSql<Millis, Sqlite> for NaiveDateTime {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        out.set_value(millis(*self));
        Ok(IsNull::No)
    }
}

impl FromSql<Millis, Sqlite> for NaiveDateTime {
    fn from_sql(value: <Sqlite as Backend>::RawValue<'_>) -> deserialize::Result<Self> {
        if value.value_type() == Some(SqliteType::Text) {
            return <NaiveDateTime as FromSql<Timestamp, Sqlite>>::from_sql(value);
        }
        let ms = <i64 as FromSql<BigInt, Sqlite>>::from_sql(value)?;
        DateTime::from_timestamp_millis(ms)
            .map(|t| t.naive_utc())
            .ok_or_else(|| format!("instant out of range: {ms} ms").into())
    }
}

impl ToSql<Millis, Pg> for NaiveDateTime {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        <NaiveDateTime as ToSql<Timestamp, Pg>>::to_sql(self, out)
    }
}

impl FromSql<Millis, Pg> for NaiveDateTime {
    fn from_sql(value: <Pg as Backend>::RawValue<'_>) -> deserialize::Result<Self> {
        <NaiveDateTime as FromSql<Timestamp, Pg>>::from_sql(value)
    }
}

impl HasSqlType<Millis> for MultiBackend {
    fn metadata(lookup: &mut Self::MetadataLookup) -> Self::TypeMetadata {
        MultiBackend::lookup_sql_type::<Millis>(lookup)
    }
}

impl ToSql<Millis, MultiBackend> for NaiveDateTime {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, MultiBackend>) -> serialize::Result {
        out.set_value((Millis, self));
        Ok(IsNull::No)
    }
}

impl FromSql<Millis, MultiBackend> for NaiveDateTime {
    fn from_sql(bytes: <MultiBackend as Backend>::RawValue<'_>) -> deserialize::Result<Self> {
        bytes.from_sql::<Self, Millis>()
    }
}

/// An instant bound to a [`Millis`] column (a row written, a value compared with): diesel's
/// `AsExpression` cannot be given to chrono's type here. Rows read it back as `At`; one column
/// may be read as `NaiveDateTime`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    diesel::expression::AsExpression,
    diesel::deserialize::FromSqlRow,
)]
#[diesel(sql_type = Millis)]
pub(crate) struct At(pub(crate) NaiveDateTime);

impl<DB: Backend> ToSql<Millis, DB> for At
where
    NaiveDateTime: ToSql<Millis, DB>,
{
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, DB>) -> serialize::Result {
        self.0.to_sql(out)
    }
}

impl<DB: Backend> FromSql<Millis, DB> for At
where
    NaiveDateTime: FromSql<Millis, DB>,
{
    fn from_sql(bytes: DB::RawValue<'_>) -> deserialize::Result<Self> {
        NaiveDateTime::from_sql(bytes).map(At)
    }
}

impl At {
    /// The bound of a domain instant.
    pub(crate) fn of(t: domain::Timestamp) -> Self {
        At(t.naive_utc())
    }

    /// The domain's instant.
    pub(crate) fn utc(self) -> domain::Timestamp {
        self.0.and_utc()
    }
}
