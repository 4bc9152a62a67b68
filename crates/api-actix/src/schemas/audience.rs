//! The bodies of the audience's writes: end users one by one and in batches, segments and
//! their filters, streams.

use domain::audience::{
    ATTRIBUTE_NAME_MAX_CHARS, MAX_ATTRIBUTES_PER_USER, MAX_BATCH_USERS, MAX_TAGS_PER_USER,
    NAME_MAX_CHARS, TAG_MAX_CHARS, USER_ID_MAX_CHARS,
};
use serde_json::{json, Value};

use super::fields::{name_schema, reference, text};

/// The audience's bodies, by component name.
pub(super) fn bodies() -> Vec<(&'static str, Value)> {
    let user_id = text(1, USER_ID_MAX_CHARS);
    let user_fields = json!({
        "testUser": {"type": ["boolean", "null"]},
        "tags": {"type": ["array", "null"], "maxItems": MAX_TAGS_PER_USER, "items": text(1,
            TAG_MAX_CHARS)},
        "attributes": {"type": ["object", "null"], "maxProperties": MAX_ATTRIBUTES_PER_USER,
            "propertyNames": {"type": "string", "minLength": 1,
                "maxLength": ATTRIBUTE_NAME_MAX_CHARS},
            "additionalProperties": {"type": ["string", "number", "boolean"],
                "maxLength": domain::audience::ATTRIBUTE_VALUE_MAX_CHARS},
            "description": "String, number or boolean values"},
    });
    let mut batch_user = user_fields.clone();
    batch_user["id"] = user_id;
    let filter = json!({
        "type": "object",
        "description": "Users matching `all` (default) or `any` of the conditions. A condition's \
            `value` depends on its `field` and `op`: `testUser` takes `eq`/`neq` and a boolean; \
            `tags` takes `eq`, `neq`, `contains` (a tag), `in` (tags) or `exists`; `id` and \
            `attributes.<name>` take `eq`/`neq` (a scalar), `in` (a non-empty array of \
            scalars), `contains` (a string), `gt`/`lt` (a number or a string), `exists` (a \
            boolean or nothing)",
        "required": ["conditions"],
        "properties": {
            "match": {"oneOf": [{"type": "string", "enum": ["all", "any"]}, {"type": "null"}]},
            "conditions": {"type": "array", "minItems": 1,
                "maxItems": domain::audience::filter::MAX_CONDITIONS,
                "items": {"type": "object", "required": ["field", "op"], "properties": {
                    "field": {"type": "string",
                        "pattern": "^(id|testUser|tags|attributes\\.[\\s\\S]+)$"},
                    "op": {"type": "string", "enum": ["eq", "neq", "in", "contains", "exists",
                        "gt", "lt"]},
                    "value": {"type": ["string", "number", "boolean", "array", "null"],
                        "items": {"type": ["string", "number", "boolean"]}}}}},
        },
    });
    vec![
        (
            "PutUserRequest",
            json!({
                "type": "object",
                    "description": "The whole user: omitted fields take their defaults",
                "properties": user_fields,
                "example": {"testUser": false, "tags": ["vip"], "attributes": {"country": "NZ"}},
            }),
        ),
        (
            "BatchRequest",
            json!({
                "type": "object", "required": ["users"],
                "properties": {"users": {"type": "array", "minItems": 1,
                    "maxItems": MAX_BATCH_USERS,
                    "items": {"type": "object", "required": ["id"], "properties": batch_user}}},
                "example": {"users": [{"id": "user-1", "tags": ["vip"]}, {"id": "user-2",
                    "testUser": true}]},
            }),
        ),
        ("SegmentFilter", filter),
        (
            "SegmentRequest",
            json!({
                "type": "object", "required": ["name", "filter"],
                "properties": {"name": name_schema(NAME_MAX_CHARS),
                    "filter": reference("SegmentFilter")},
                "example": {"name": "NZ VIPs", "filter": {"match": "all", "conditions": [
                    {"field": "attributes.country", "op": "eq", "value": "NZ"},
                    {"field": "tags", "op": "contains", "value": "vip"}]}},
            }),
        ),
        (
            "StreamRequest",
            json!({
                "type": "object", "required": ["name"],
                "properties": {"name": name_schema(NAME_MAX_CHARS)},
                "example": {"name": "Promotions"},
            }),
        ),
    ]
}
