//! CSV files of a bulk start: the header validated once, each row mapped to a trigger element.

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Map, Value};

use crate::audience::filter::Filter;

/// The refusal of a header of `columns` columns, over [`MAX_COLUMNS`].
pub fn too_many_columns(columns: usize) -> String {
    format!("the header has {columns} columns; at most {MAX_COLUMNS} are allowed")
}

/// One column of the file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Column {
    /// `target.attributes.<field>`; `id` is the end-user id.
    Attribute(String),
    Variable(String),
    Metadata(String),
    NotificationDetail(String),
    CardOption(String),
    InvocationId,
}

/// A validated header: what each column of the file's rows holds (docs/api.md, Bulk start
/// from CSV).
///
/// ```
/// use workbench_domain::bulk::CsvHeader;
///
/// let names = ["target.attributes.id", "payload.variables.name", "flowInvocationId"];
/// let header = CsvHeader::parse(&names.map(String::from)).expect("a valid header");
/// let row = header.row(&["u1", "Ann", ""].map(String::from)).expect("a valid row");
/// let element = row.element(vec!["u1".to_owned()], || "csv-7-1".to_owned());
/// assert_eq!(element["flowInvocationId"], "csv-7-1");
/// assert_eq!(element["target"]["targetUserIds"][0], "u1");
/// assert_eq!(element["payload"]["variables"]["name"], "Ann");
///
/// // A row must have a cell per column.
/// assert!(header.row(&["u2".to_owned()]).is_err());
/// // Every column must be known, and at least one must be a target attribute.
/// assert!(CsvHeader::parse(&["payload.variables.name".to_owned()]).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvHeader {
    columns: Vec<Column>,
}

/// The most columns a header may have: room for every `target.attributes.*`, variable,
/// metadata and card option a flow uses, and a bound on the work a header can ask for.
pub const MAX_COLUMNS: usize = 1_000;

const CARD_OPTIONS: &[&str] = &[
    "priority",
    "expires",
    "expiresInterval",
    "embargo",
    "targetStreamIds",
    "targetPlatforms",
];

impl CsvHeader {
    /// Reads the cells of a header row, each trimmed and a leading UTF-8 byte-order mark
    /// dropped. A column is `target.attributes.<field>` (`id` is the end-user id),
    /// `payload.variables.<name>`, `payload.metadata.<name>`,
    /// `payload.notificationDetail.<name>`, `payload.cardOptions.<option>` (`priority`,
    /// `expires`, `expiresInterval`, `embargo`, `targetStreamIds`, `targetPlatforms`) or
    /// `flowInvocationId`.
    ///
    /// Fails with every problem of the header in one text (`; `-separated), each naming its
    /// column (from 1): a column that is none of those (or names no field), one that repeats
    /// an earlier column, and a header without a `target.attributes.<field>` column. A header
    /// of more than [`MAX_COLUMNS`] columns fails with that alone, before any column is read.
    /// The work is linear in the header's length.
    pub fn parse(names: &[String]) -> Result<CsvHeader, String> {
        if names.len() > MAX_COLUMNS {
            return Err(too_many_columns(names.len()));
        }
        let mut columns = Vec::new();
        let mut seen = HashSet::new();
        let mut problems = Vec::new();
        for (i, raw) in names.iter().enumerate() {
            let name = raw.trim().trim_start_matches('\u{feff}');
            let column = if name == "flowInvocationId" {
                Some(Column::InvocationId)
            } else if let Some(f) = name.strip_prefix("target.attributes.") {
                Some(Column::Attribute(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.variables.") {
                Some(Column::Variable(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.metadata.") {
                Some(Column::Metadata(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.notificationDetail.") {
                Some(Column::NotificationDetail(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.cardOptions.") {
                CARD_OPTIONS
                    .contains(&f)
                    .then(|| Column::CardOption(f.to_owned()))
            } else {
                None
            };
            match column {
                Some(c)
                    if !matches!(&c,
                    Column::Attribute(f) | Column::Variable(f) | Column::Metadata(f) |
                        Column::NotificationDetail(f) if f.is_empty()) =>
                {
                    if !seen.insert(c.clone()) {
                        problems.push(format!(
                            "column {} ({name:?}) repeats an earlier column",
                            i + 1
                        ));
                    }
                    columns.push(c);
                }
                _ => problems.push(format!(
                    "column {} ({name:?}) is not one of target.attributes.<field>, \
                        payload.variables.<name>, payload.metadata.<name>, \
                            payload.notificationDetail.<name>, payload.cardOptions.<{}>, \
                                flowInvocationId",
                    i + 1,
                    CARD_OPTIONS.join("|")
                )),
            }
        }
        if !columns.iter().any(|c| matches!(c, Column::Attribute(_))) {
            problems.push(
                "the header needs at least one target.attributes.<field> column \
                (target.attributes.id is the end-user id)"
                    .into(),
            );
        }
        if problems.is_empty() {
            Ok(CsvHeader { columns })
        } else {
            Err(problems.join("; "))
        }
    }

    /// Maps a row's cells, column by column, into a [`CsvRow`]. Empty cells are left out.
    /// `payload.cardOptions.targetStreamIds` becomes an array of its pipe-separated ids,
    /// `targetPlatforms` an object of `Web`, `iOS` and `Android`, true for those its
    /// pipe-separated names name (exactly so spelt), `priority` a whole number; every other
    /// value stays a string. Further checks (ranges, dates) are the trigger's.
    ///
    /// Fails with the message of the row's error when it has another number of cells than the
    /// header has columns, its `priority` is not a whole number, or none of its
    /// `target.attributes` cells has a value.
    pub fn row(&self, cells: &[String]) -> Result<CsvRow, String> {
        if cells.len() != self.columns.len() {
            return Err(format!(
                "has {} cells; the header has {} columns",
                cells.len(),
                self.columns.len()
            ));
        }
        let mut row = CsvRow::default();
        for (column, cell) in self.columns.iter().zip(cells) {
            if cell.is_empty() {
                continue;
            }
            match column {
                Column::Attribute(f) => {
                    row.attributes.insert(f.clone(), cell.clone());
                }
                Column::Variable(n) => {
                    row.variables.insert(n.clone(), Value::String(cell.clone()));
                }
                Column::Metadata(n) => {
                    row.metadata.insert(n.clone(), Value::String(cell.clone()));
                }
                Column::NotificationDetail(n) => {
                    row.notification_detail
                        .insert(n.clone(), Value::String(cell.clone()));
                }
                Column::CardOption(o) => {
                    let value = match o.as_str() {
                        "priority" => cell.parse::<i64>().map(Value::from).map_err(|_| {
                            format!("payload.cardOptions.priority {cell:?} is not a whole number")
                        })?,
                        "targetStreamIds" => Value::from(cell.split('|').collect::<Vec<_>>()),
                        "targetPlatforms" => {
                            let named: Vec<&str> = cell.split('|').collect();
                            json!({
                                "Web": named.contains(&"Web"),
                                "iOS": named.contains(&"iOS"),
                                "Android": named.contains(&"Android"),
                            })
                        }
                        _ => Value::String(cell.clone()),
                    };
                    row.card_options.insert(o.clone(), value);
                }
                Column::InvocationId => row.invocation_id = Some(cell.clone()),
            }
        }
        if row.attributes.is_empty() {
            return Err("has no target.attributes value".into());
        }
        Ok(row)
    }
}

/// One row, mapped by [`CsvHeader::row`]: each map by the name after its column's prefix,
/// without the empty cells.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CsvRow {
    /// `target.attributes.<field>` values by field, `id` the end-user id; all must match the
    /// users the row targets. Never empty in a mapped row.
    pub attributes: BTreeMap<String, String>,
    /// `payload.variables.<name>` values, strings.
    pub variables: Map<String, Value>,
    /// `payload.metadata.<name>` values, strings.
    pub metadata: Map<String, Value>,
    /// `payload.notificationDetail.<name>` values, strings.
    pub notification_detail: Map<String, Value>,
    /// `payload.cardOptions.<option>` values, as [`CsvHeader::row`] typed them.
    pub card_options: Map<String, Value>,
    /// `flowInvocationId`; None: [`element`](Self::element) asks for a default.
    pub invocation_id: Option<String>,
}

impl CsvRow {
    /// The trigger element (docs/api.md, Triggers) for these users, the row's values moved
    /// into it: its `flowInvocationId` (else `default_id()`, which the bulk worker makes
    /// `csv-{task}-{row}`), a `user` target of `users`, and a payload of the row's non-empty
    /// maps. Nothing is checked here: the element is validated as a `/start` element is.
    pub fn element(self, users: Vec<String>, default_id: impl FnOnce() -> String) -> Value {
        let mut payload = Map::new();
        for (key, map) in [
            ("variables", self.variables),
            ("metadata", self.metadata),
            ("notificationDetail", self.notification_detail),
            ("cardOptions", self.card_options),
        ] {
            if !map.is_empty() {
                payload.insert(key.into(), Value::Object(map));
            }
        }
        let users = Value::Array(users.into_iter().map(Value::String).collect());
        json!({
            "flowInvocationId": self.invocation_id.unwrap_or_else(default_id),
            "target": {"type": "user", "targetUserIds": users},
            "payload": payload,
        })
    }

    /// The filter of the attributes (docs/api.md, Audience): each an `eq` condition, all
    /// AND-ed, `id` as the end-user id and the others as `attributes.<field>`.
    pub(super) fn filter(&self) -> Result<Filter, String> {
        let conditions: Vec<Value> = self
            .attributes
            .iter()
            .map(|(f, v)| {
                let field = if f == "id" {
                    "id".to_owned()
                } else {
                    format!("attributes.{f}")
                };
                json!({"field": field, "op": "eq", "value": v})
            })
            .collect();
        Filter::parse(&json!({"match": "all", "conditions": conditions}), "target").map_err(|e| {
            e.into_iter()
                .map(|e| e.message)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}
