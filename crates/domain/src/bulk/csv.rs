//! CSV files of a bulk start: the header validated once, each row mapped to a trigger element.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::audience::filter::Filter;

/// One column of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Column {
    /// `target.attributes.<field>`; `id` is the end-user id.
    Attribute(String),
    Variable(String),
    Metadata(String),
    NotificationDetail(String),
    CardOption(String),
    InvocationId,
}

/// A validated header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvHeader {
    columns: Vec<Column>,
}

const CARD_OPTIONS: &[&str] = &[
    "priority",
    "expires",
    "expiresInterval",
    "embargo",
    "targetStreamIds",
    "targetPlatforms",
];

impl CsvHeader {
    /// Every problem of the header, or the header.
    pub fn parse(names: &[String]) -> Result<CsvHeader, String> {
        let mut columns = Vec::new();
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
                Some(c) if !matches!(&c, Column::Attribute(f) | Column::Variable(f) | Column::Metadata(f) | Column::NotificationDetail(f) if f.is_empty()) => {
                    if columns.contains(&c) {
                        problems.push(format!("column {} ({name:?}) repeats an earlier column", i + 1));
                    }
                    columns.push(c);
                }
                _ => problems.push(format!(
                    "column {} ({name:?}) is not one of target.attributes.<field>, payload.variables.<name>, payload.metadata.<name>, payload.notificationDetail.<name>, payload.cardOptions.<{}>, flowInvocationId",
                    i + 1,
                    CARD_OPTIONS.join("|")
                )),
            }
        }
        if !columns.iter().any(|c| matches!(c, Column::Attribute(_))) {
            problems.push("the header needs at least one target.attributes.<field> column (target.attributes.id is the end-user id)".into());
        }
        if problems.is_empty() {
            Ok(CsvHeader { columns })
        } else {
            Err(problems.join("; "))
        }
    }

    /// A row as (target attributes, trigger element without its target). Empty cells are
    /// left out; `a|b` is an array where the field takes one.
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

/// One row, mapped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CsvRow {
    pub attributes: BTreeMap<String, String>,
    pub variables: Map<String, Value>,
    pub metadata: Map<String, Value>,
    pub notification_detail: Map<String, Value>,
    pub card_options: Map<String, Value>,
    pub invocation_id: Option<String>,
}

impl CsvRow {
    /// The trigger element (spec 4.3) for these users: the row's values moved into it.
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

    /// The filter of the attributes (contract §3), `id` as the end-user id.
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
