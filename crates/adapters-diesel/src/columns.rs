//! The multi-row inserts on PostgreSQL: one array per column, unnested into rows
//! (`INSERT INTO t (a, b) SELECT * FROM unnest($1, $2)`).
//!
//! diesel's multi-row `INSERT` binds every column of every row, so its text changes with the
//! number of rows: PostgreSQL parses and plans it again at every execution (diesel keeps no
//! prepared statement for it), and a batch of 1,000 cards binds 22,000 parameters. With one
//! array per column the statement's text is the same for any number of rows: diesel prepares
//! it once per connection and keeps it, and the rows travel as one array per column. SQLite
//! has its own packed inserts (see [`crate::packed`]).
//!
//! [`column_insert!`] builds one from rows whose fields are named as their columns,
//! so that the names and the arrays cannot come apart.

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
}

/// An insert of rows as arrays of columns, built apart from its execution (on the recorder's
/// packing thread, run on its writing thread).
#[derive(Debug)]
pub(crate) struct ColumnInsert {
    table: &'static str,
    names: &'static [&'static str],
    columns: Vec<Column>,
    /// What follows the rows (an `ON CONFLICT` clause), or nothing.
    tail: &'static str,
    rows: usize,
}

impl ColumnInsert {
    pub(crate) fn new(
        table: &'static str,
        names: &'static [&'static str],
        columns: Vec<Column>,
        tail: &'static str,
        rows: usize,
    ) -> Self {
        debug_assert_eq!(names.len(), columns.len(), "{table}");
        ColumnInsert {
            table,
            names,
            columns,
            tail,
            rows,
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
                // Not reached: every pair of columns is of one kind (checked above).
                _ => {}
            }
        }
        self.rows += more.rows;
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
        out.push_sql(") SELECT * FROM unnest(");
        for (i, column) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            match column {
                Column::Text(v) => out.push_bind_param::<Array<Text>, _>(v)?,
                Column::OptText(v) => out.push_bind_param::<Array<Nullable<Text>>, _>(v)?,
                Column::Int(v) => out.push_bind_param::<Array<Integer>, _>(v)?,
                Column::BigInt(v) => out.push_bind_param::<Array<BigInt>, _>(v)?,
                Column::Bool(v) => out.push_bind_param::<Array<Bool>, _>(v)?,
                Column::Time(v) => out.push_bind_param::<Array<Millis>, _>(v)?,
                Column::OptTime(v) => out.push_bind_param::<Array<Nullable<Millis>>, _>(v)?,
            }
        }
        out.push_sql(")");
        out.push_sql(self.tail);
        Ok(())
    }
}

impl RunQueryDsl<PgConnection> for &ColumnInsert {}

/// A [`ColumnInsert`] into `$table` of `$rows` (consumed), each field named as its column and
/// given with its [`Column`] kind, followed by `$tail`.
macro_rules! column_insert {
    ($table:literal, $rows:expr, $tail:literal, { $($field:ident: $kind:ident),+ $(,)? }) => {{
        let rows = $rows;
        let count = rows.len();
        $(let mut $field = Vec::with_capacity(count);)+
        for row in rows {
            $($field.push(row.$field);)+
        }
        $crate::columns::ColumnInsert::new(
            $table,
            &[$(stringify!($field)),+],
            vec![$($crate::columns::Column::$kind($field)),+],
            $tail,
            count,
        )
    }};
}

pub(crate) use column_insert;

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(table: &'static str, ids: &[&str]) -> ColumnInsert {
        ColumnInsert::new(
            table,
            &["id", "n"],
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
        let other_kinds = ColumnInsert::new(
            "t",
            &["id", "n"],
            vec![Column::Text(vec!["e".into()]), Column::BigInt(vec![1])],
            "",
            1,
        );
        assert!(!rows.append(other_kinds));
        assert_eq!((rows.len(), rows.columns_len()), (3, vec![3, 3]));
    }
}
