//! The multi-row inserts on PostgreSQL: one array per column, unnested into rows
//! (`INSERT INTO t (a, b) SELECT u.a, u.b FROM unnest($1, $2) AS u(a, b)`), the columns of
//! one value bound once instead (`SELECT u.a, $1 FROM unnest($2) AS u(a)`, below).
//!
//! diesel's multi-row `INSERT` binds every column of every row, so its text changes with the
//! number of rows: PostgreSQL parses and plans it again at every execution (diesel keeps no
//! prepared statement for it), and a batch of 1,000 cards binds 22,000 parameters. With one
//! array per column the statement's text is the same for any number of rows: diesel prepares
//! it once per connection and keeps it, and the rows travel as one array per column. SQLite
//! has its own packed inserts (see [`crate::packed`]).
//!
//! Columns whose rows all hold one value are bound once, as that value, not as an array: the
//! cards of a fan-out batch differ only in their ids, users and flow instances, and
//! PostgreSQL reads each array of a multi-array `unnest` into a store of its own before
//! inserting. Which columns are arrays is part of the statement's text, and diesel keeps a
//! prepared statement per text for the connection's life; so columns are bound once by
//! class, a class only when each of its columns holds one value, and a table has at most
//! two to the power of its classes texts.
//!
//! [`column_insert!`] builds one from rows whose fields are named as their columns,
//! so that the names and the arrays cannot come apart.

use chrono::NaiveDateTime;
use diesel::pg::{Pg, PgConnection};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text};

use crate::millis::{At, Millis};
use diesel::{QueryResult, RunQueryDsl};

/// One column's values, row by row.
#[derive(Debug)]
pub(crate) enum Column {
    Text(Vec<String>),
    OptText(Vec<Option<String>>),
    Int(Vec<i32>),
    BigInt(Vec<i64>),
    Bool(Vec<bool>),
    Time(Vec<At>),
    OptTime(Vec<Option<At>>),
    /// Instants of a table that keeps diesel's `Timestamp` on both backends (webhook
    /// deliveries); bound as `timestamp`, as [`At`] is on PostgreSQL.
    Stamp(Vec<NaiveDateTime>),
}

/// An insert of rows as arrays of columns, built apart from its execution (on the recorder's
/// packing thread, run on its writing thread).
#[derive(Debug)]
pub(crate) struct ColumnInsert {
    table: &'static str,
    names: &'static [&'static str],
    /// Each column's class: 0 for one always bound as an array, else the class of columns
    /// bound once together (see the module's comment).
    classes: &'static [u8],
    columns: Vec<Column>,
    /// What follows the rows (an `ON CONFLICT` clause), or nothing.
    tail: &'static str,
    rows: usize,
    /// Which columns are bound once (see [`bound_once`]), decided where it is built and
    /// appended to (the recorder's packing thread), not in the transaction.
    once: Vec<bool>,
}

impl ColumnInsert {
    pub(crate) fn new(
        table: &'static str,
        names: &'static [&'static str],
        classes: &'static [u8],
        columns: Vec<Column>,
        tail: &'static str,
        rows: usize,
    ) -> Self {
        debug_assert_eq!(names.len(), columns.len(), "{table}");
        debug_assert_eq!(names.len(), classes.len(), "{table}");
        ColumnInsert {
            table,
            names,
            classes,
            tail,
            rows,
            once: bound_once(classes, &columns, rows),
            columns,
        }
    }

    /// The rows it holds.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Appends the rows of `more`, an insert into the same table of the same columns; false,
    /// with nothing appended, when it is not.
    pub(crate) fn append(&mut self, more: ColumnInsert) -> bool {
        let alike = self.table == more.table
            && self.names == more.names
            && self.classes == more.classes
            && self.columns.len() == more.columns.len()
            && self.tail == more.tail
            && self
                .columns
                .iter()
                .zip(&more.columns)
                .all(|(a, b)| std::mem::discriminant(a) == std::mem::discriminant(b));
        if !alike {
            return false;
        }
        for (column, more) in self.columns.iter_mut().zip(more.columns) {
            match (column, more) {
                (Column::Text(a), Column::Text(b)) => a.extend(b),
                (Column::OptText(a), Column::OptText(b)) => a.extend(b),
                (Column::Int(a), Column::Int(b)) => a.extend(b),
                (Column::BigInt(a), Column::BigInt(b)) => a.extend(b),
                (Column::Bool(a), Column::Bool(b)) => a.extend(b),
                (Column::Time(a), Column::Time(b)) => a.extend(b),
                (Column::OptTime(a), Column::OptTime(b)) => a.extend(b),
                (Column::Stamp(a), Column::Stamp(b)) => a.extend(b),
                // Not reached: every pair of columns is of one kind (checked above).
                _ => {}
            }
        }
        self.rows += more.rows;
        self.once = bound_once(self.classes, &self.columns, self.rows);
        true
    }

    /// The length of each column.
    #[cfg(test)]
    pub(crate) fn columns_len(&self) -> Vec<usize> {
        self.columns
            .iter()
            .map(|c| match c {
                Column::Text(v) => v.len(),
                Column::OptText(v) => v.len(),
                Column::Int(v) => v.len(),
                Column::BigInt(v) => v.len(),
                Column::Bool(v) => v.len(),
                Column::Time(v) => v.len(),
                Column::OptTime(v) => v.len(),
                Column::Stamp(v) => v.len(),
            })
            .collect()
    }

    /// Runs it (nothing when it holds no row); the rows inserted.
    pub(crate) fn run(&self, conn: &mut PgConnection) -> QueryResult<usize> {
        if self.rows == 0 {
            return Ok(0);
        }
        RunQueryDsl::execute(self, conn)
    }
}

/// For each column, whether it is bound once: its class is not 0 and each column of its class
/// holds one value in every row. None with fewer than two rows, nor when every column would
/// be (`unnest` needs an array to give the rows).
fn bound_once(classes: &[u8], columns: &[Column], rows: usize) -> Vec<bool> {
    let none = vec![false; columns.len()];
    if rows < 2 {
        return none;
    }
    let mut varies = [false; 256];
    varies[0] = true;
    for (class, column) in classes.iter().zip(columns) {
        let class = usize::from(*class);
        if !varies[class] && !column.one_value() {
            varies[class] = true;
        }
    }
    let once: Vec<bool> = classes.iter().map(|c| !varies[usize::from(*c)]).collect();
    if once.iter().all(|o| *o) {
        none
    } else {
        once
    }
}

impl Column {
    /// Whether every row holds the first row's value.
    fn one_value(&self) -> bool {
        fn one<T: PartialEq>(v: &[T]) -> bool {
            v.split_first()
                .is_some_and(|(first, rest)| rest.iter().all(|x| x == first))
        }
        match self {
            Column::Text(v) => one(v),
            Column::OptText(v) => one(v),
            Column::Int(v) => one(v),
            Column::BigInt(v) => one(v),
            Column::Bool(v) => one(v),
            Column::Time(v) => one(v),
            Column::OptTime(v) => one(v),
            Column::Stamp(v) => one(v),
        }
    }

    /// Binds the first row's value.
    fn push_first<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        // Not reached with an empty column: a column is bound once only with two rows or more.
        let missing = || diesel::result::Error::QueryBuilderError("an empty column".into());
        match self {
            Column::Text(v) => out.push_bind_param::<Text, _>(v.first().ok_or_else(missing)?),
            Column::OptText(v) => {
                out.push_bind_param::<Nullable<Text>, _>(v.first().ok_or_else(missing)?)
            }
            Column::Int(v) => out.push_bind_param::<Integer, _>(v.first().ok_or_else(missing)?),
            Column::BigInt(v) => out.push_bind_param::<BigInt, _>(v.first().ok_or_else(missing)?),
            Column::Bool(v) => out.push_bind_param::<Bool, _>(v.first().ok_or_else(missing)?),
            Column::Time(v) => out.push_bind_param::<Millis, _>(v.first().ok_or_else(missing)?),
            Column::OptTime(v) => {
                out.push_bind_param::<Nullable<Millis>, _>(v.first().ok_or_else(missing)?)
            }
            Column::Stamp(v) => out.push_bind_param::<Millis, _>(v.first().ok_or_else(missing)?),
        }
    }

    /// Binds every row's value, as one array.
    fn push_all<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        match self {
            Column::Text(v) => out.push_bind_param::<Array<Text>, _>(v),
            Column::OptText(v) => out.push_bind_param::<Array<Nullable<Text>>, _>(v),
            Column::Int(v) => out.push_bind_param::<Array<Integer>, _>(v),
            Column::BigInt(v) => out.push_bind_param::<Array<BigInt>, _>(v),
            Column::Bool(v) => out.push_bind_param::<Array<Bool>, _>(v),
            Column::Time(v) => out.push_bind_param::<Array<Millis>, _>(v),
            Column::OptTime(v) => out.push_bind_param::<Array<Nullable<Millis>>, _>(v),
            Column::Stamp(v) => out.push_bind_param::<Array<Millis>, _>(v),
        }
    }
}

impl QueryId for ColumnInsert {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl QueryFragment<Pg> for ColumnInsert {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("INSERT INTO ");
        out.push_identifier(self.table)?;
        out.push_sql(" (");
        for (i, name) in self.names.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_identifier(name)?;
        }
        // `SELECT u.a, $1, u.c FROM unnest($2, $3) AS u(a, c)`: the columns of one value
        // bound in the list, the others unnested under their own names.
        let once = &self.once;
        out.push_sql(") SELECT ");
        for (i, (name, column)) in self.names.iter().zip(&self.columns).enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            if once.get(i).copied().unwrap_or(false) {
                column.push_first(&mut out)?;
            } else {
                out.push_sql("u.");
                out.push_identifier(name)?;
            }
        }
        out.push_sql(" FROM unnest(");
        let varying = || {
            self.names
                .iter()
                .zip(&self.columns)
                .enumerate()
                .filter(|(i, _)| !once.get(*i).copied().unwrap_or(false))
                .map(|(_, pair)| pair)
        };
        for (i, (_, column)) in varying().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            column.push_all(&mut out)?;
        }
        out.push_sql(") AS u(");
        for (i, (name, _)) in varying().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_identifier(name)?;
        }
        out.push_sql(")");
        out.push_sql(self.tail);
        Ok(())
    }
}

impl RunQueryDsl<PgConnection> for &ColumnInsert {}

/// A [`ColumnInsert`] into `$table` of `$rows` (consumed), each field named as its column and
/// given with its [`Column`] kind and, after `@`, its class of columns bound once together
/// (none: always an array), followed by `$tail`.
macro_rules! column_insert {
    ($table:literal, $rows:expr, $tail:literal,
     { $($field:ident: $kind:ident $(@ $class:literal)?),+ $(,)? }) => {{
        let rows = $rows;
        let count = rows.len();
        $(let mut $field = Vec::with_capacity(count);)+
        for row in rows {
            $($field.push(row.$field);)+
        }
        $crate::columns::ColumnInsert::new(
            $table,
            &[$(stringify!($field)),+],
            &[$($crate::columns::class!($($class)?)),+],
            vec![$($crate::columns::Column::$kind($field)),+],
            $tail,
            count,
        )
    }};
}

/// A column's class in [`column_insert!`]: the one given, else 0.
macro_rules! class {
    () => {
        0u8
    };
    ($class:literal) => {
        $class
    };
}

pub(crate) use class;

pub(crate) use column_insert;

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(table: &'static str, ids: &[&str]) -> ColumnInsert {
        ColumnInsert::new(
            table,
            &["id", "n"],
            &[0, 1],
            vec![
                Column::Text(ids.iter().map(|s| (*s).to_owned()).collect()),
                Column::Int(vec![1; ids.len()]),
            ],
            "",
            ids.len(),
        )
    }

    /// An insert takes another's rows only when both are of one table and its columns, of
    /// the same kinds; otherwise it is left as it was.
    #[test]
    fn inserts_of_one_table_append_and_others_do_not() {
        let mut rows = insert("t", &["a", "b"]);
        assert!(rows.append(insert("t", &["c"])));
        assert_eq!((rows.len(), rows.columns_len()), (3, vec![3, 3]));
        assert!(!rows.append(insert("u", &["d"])));
        assert!(!rows.append(one_row(Column::BigInt(vec![1]))));
        assert_eq!((rows.len(), rows.columns_len()), (3, vec![3, 3]));
    }

    /// On PostgreSQL, rows inserted with some columns bound once and others as arrays read
    /// back as they were written, each value in its row and column.
    #[test]
    fn rows_of_columns_bound_once_and_as_arrays_read_back_whole() {
        use diesel::connection::SimpleConnection;
        use diesel::Connection;
        let Some(db) = crate::testing::TestDatabase::postgres() else {
            return;
        };
        let mut conn = PgConnection::establish(db.url()).expect("connect");
        conn.batch_execute("CREATE TABLE t (id TEXT, n INTEGER, m TIMESTAMP, s TEXT)")
            .expect("table");
        let insert = ColumnInsert::new(
            "t",
            &["id", "n", "m", "s"],
            &[0, 1, 1, 2],
            vec![
                Column::Text(vec!["a".into(), "b".into(), "c".into()]),
                Column::Int(vec![7; 3]),
                Column::OptTime(vec![None; 3]),
                Column::Text(vec!["x".into(), "y".into(), "x".into()]),
            ],
            "",
            3,
        );
        assert!(sql(&insert).contains(r#"SELECT u."id", $1, $2, u."s" "#));
        assert_eq!(insert.run(&mut conn).expect("insert"), 3);
        let read: Vec<(String, i32, Option<chrono::NaiveDateTime>, String)> =
            diesel::sql_query("SELECT id, n, m, s FROM t ORDER BY id")
                .load::<ReadRow>(&mut conn)
                .expect("read")
                .into_iter()
                .map(|r| (r.id, r.n, r.m, r.s))
                .collect();
        assert_eq!(
            read,
            vec![
                ("a".to_owned(), 7, None, "x".to_owned()),
                ("b".to_owned(), 7, None, "y".to_owned()),
                ("c".to_owned(), 7, None, "x".to_owned()),
            ]
        );
    }

    #[derive(diesel::QueryableByName)]
    struct ReadRow {
        #[diesel(sql_type = Text)]
        id: String,
        #[diesel(sql_type = Integer)]
        n: i32,
        #[diesel(sql_type = Nullable<diesel::sql_types::Timestamp>)]
        m: Option<chrono::NaiveDateTime>,
        #[diesel(sql_type = Text)]
        s: String,
    }

    /// One row into `t`: an id, and `n`.
    fn one_row(n: Column) -> ColumnInsert {
        ColumnInsert::new(
            "t",
            &["id", "n"],
            &[0, 1],
            vec![Column::Text(vec!["e".into()]), n],
            "",
            1,
        )
    }

    fn sql(insert: &ColumnInsert) -> String {
        diesel::debug_query::<Pg, _>(insert)
            .to_string()
            .split(" -- binds")
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    /// A class of columns that hold one value in every row is bound once; any other column,
    /// and every column of a single row, is an array; an append decides again.
    #[test]
    fn columns_of_one_value_are_bound_once_by_class() {
        let mut rows = insert("t", &["a", "b"]);
        assert_eq!(
            sql(&rows),
            r#"INSERT INTO "t" ("id", "n") SELECT u."id", $1 FROM unnest($2) AS u("id")"#
        );
        let one = insert("t", &["a"]);
        let arrays = concat!(
            r#"INSERT INTO "t" ("id", "n") SELECT u."id", u."n" "#,
            r#"FROM unnest($1, $2) AS u("id", "n")"#
        );
        assert_eq!(sql(&one), arrays);
        assert!(rows.append(one_row(Column::Int(vec![2]))));
        assert_eq!(sql(&rows), arrays);
        // Class 0 is never bound once, even when its rows hold one value.
        let same_ids = ColumnInsert::new(
            "t",
            &["id", "n", "m"],
            &[0, 1, 1],
            vec![
                Column::Text(vec!["a".into(); 2]),
                Column::Int(vec![1, 1]),
                Column::OptTime(vec![None, None]),
            ],
            " ON CONFLICT DO NOTHING",
            2,
        );
        assert_eq!(
            sql(&same_ids),
            concat!(
                r#"INSERT INTO "t" ("id", "n", "m") SELECT u."id", $1, $2 "#,
                r#"FROM unnest($3) AS u("id") ON CONFLICT DO NOTHING"#
            )
        );
    }
}
