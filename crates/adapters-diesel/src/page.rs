//! Lists ordered newest first (by creation time, then by id, both descending): the SQL of a
//! page's start, `domain::page::After`.

/// `$query` (a boxed query of the table of `$created` and `$id`) narrowed to the rows that
/// come after `$after`, an `Option<domain::page::After<_>>`, in newest-first order.
///
/// After an item, the rows created up to its instant are kept, then those strictly older or
/// at its instant with a smaller id: the first bound lets an index on (…, created, id) be read
/// from that instant down, which the `OR` alone would not.
///
/// `$bind`, when given, makes the bound of an instant of `$created`'s column (`millis::At` for
/// the tables whose instants are [`crate::millis::Millis`]).
macro_rules! after {
    ($query:expr, $created:path, $id:path, $after:expr) => {
        $crate::page::after!($query, $created, $id, $after, std::convert::identity)
    };
    ($query:expr, $created:path, $id:path, $after:expr, $bind:expr) => {
        match $after {
            None => $query,
            Some(domain::page::After::Item { created, id }) => {
                let created = $bind(created.naive_utc());
                $query.filter($created.le(created)).filter(
                    $created
                        .lt(created)
                        .or($created.eq(created).and($id.lt(id))),
                )
            }
            Some(domain::page::After::CreatedBefore(t)) => {
                $query.filter($created.lt($bind(t.naive_utc())))
            }
            Some(domain::page::After::CreatedAtOrBefore(t)) => {
                $query.filter($created.le($bind(t.naive_utc())))
            }
        }
    };
}

pub(crate) use after;
