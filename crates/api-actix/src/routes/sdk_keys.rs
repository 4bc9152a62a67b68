//! SDK keys (contract §15): the public keys that verify end users' tokens. Role `workbench`,
//! or the `sdk_keys:*` scopes.

use std::collections::BTreeMap;

use actix_web::web;
use domain::id::{EnvironmentId, SdkKeyId};
use domain::sdk::{PublicKeyInput, SdkKey, SdkKeyInput, ATTRIBUTE_TARGET_PREFIX};
use domain::Permission;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::shape::{created, listed, no_content, ok, Body, Call, Reply};
use super::timestamp;
use crate::body::Fields;
use crate::problem::{ApiError, Problem};

/// One public key of an SDK key, as stored whatever form it was sent in.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublicKeyDto {
    /// `RSA` (tokens signed `RS256`) or `EC` (P-256, tokens signed `ES256`).
    #[serde(rename = "type")]
    #[schema(example = "EC")]
    pub kind: String,
    /// The key as a PEM `PUBLIC KEY`.
    #[schema(
        example = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE...\n-----END \
            PUBLIC KEY-----\n"
    )]
    pub pem: String,
}

/// An SDK key (contract §15).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SdkKeyDto {
    #[schema(example = "sdk_01jd3m5y6q8k9r2t4v6w8x0z1a")]
    pub id: String,
    /// What tokens name as their header's `kid`; unique in the environment.
    #[schema(example = "ios-app")]
    pub name: String,
    /// The public keys that verify its tokens (one from `publicKey`, each of a `jwks`).
    pub public_keys: Vec<PublicKeyDto>,
    /// The longest a token may live, `exp - iat`, in days.
    #[schema(example = 7)]
    pub max_token_expiry_days: u32,
    /// When not empty, a token's `iss` must be one of them.
    #[schema(example = json!(["https://auth.example.com"]))]
    pub allowed_issuers: Vec<String>,
    /// A token claim → the user attribute it sets (`attributes.<name>`) when the token is
    /// first seen.
    #[schema(example = json!({"email": "attributes.email"}))]
    pub claim_mappings: BTreeMap<String, String>,
    /// The web origins whose pages may call its end users' routes from a browser (CORS),
    /// each as a browser writes its `Origin`.
    #[schema(example = json!(["https://app.example.com"]))]
    pub allowed_origins: Vec<String>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl From<SdkKey> for SdkKeyDto {
    fn from(k: SdkKey) -> Self {
        SdkKeyDto {
            id: k.id.into(),
            name: k.name,
            public_keys: k
                .keys
                .into_iter()
                .map(|key| PublicKeyDto {
                    kind: key.kind.as_str().to_owned(),
                    pem: key.pem,
                })
                .collect(),
            max_token_expiry_days: k.max_token_expiry_days,
            allowed_issuers: k.allowed_issuers,
            claim_mappings: k
                .claim_mappings
                .into_iter()
                .map(|(claim, attribute)| (claim, format!("{ATTRIBUTE_TARGET_PREFIX}{attribute}")))
                .collect(),
            allowed_origins: k.allowed_origins,
            created: timestamp(&k.created),
            updated: timestamp(&k.updated),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct SdkKeyResponse {
    pub data: SdkKeyDto,
}

#[derive(Serialize, ToSchema)]
pub struct SdkKeyListResponse {
    pub data: Vec<SdkKeyDto>,
}

/// The fields of a `POST` or `PATCH` body, each `None` when not sent; every type problem is
/// collected.
fn input(object: &Map<String, Value>) -> Result<SdkKeyInput, ApiError> {
    let mut fields = Fields::new(object);
    let mut input = SdkKeyInput::default();
    match object.get("name") {
        None => {}
        Some(Value::String(name)) => input.name = Some(name.clone()),
        Some(_) => fields.problem("name", "must be a string"),
    }
    match (object.get("publicKey"), object.get("jwks")) {
        (Some(_), Some(_)) => fields.problem("jwks", "send `publicKey` or `jwks`, not both"),
        (Some(Value::String(pem)), None) => {
            input.public_key = Some(PublicKeyInput::Pem(pem.clone()))
        }
        (Some(_), None) => fields.problem("publicKey", "must be a PEM public key (a string)"),
        (None, Some(jwks @ Value::Object(_))) => {
            input.public_key = Some(PublicKeyInput::Jwks(jwks.clone()));
        }
        (None, Some(_)) => fields.problem("jwks", "must be a JSON Web Key Set: {\"keys\": [...]}"),
        (None, None) => {}
    }
    match object.get("maxTokenExpiryDays") {
        None => {}
        Some(Value::Number(n)) => match n.as_i64() {
            Some(days) => input.max_token_expiry_days = Some(days),
            None => fields.problem("maxTokenExpiryDays", "must be a whole number of days"),
        },
        Some(_) => fields.problem("maxTokenExpiryDays", "must be a whole number of days"),
    }
    input.allowed_issuers = strings(&mut fields, object, "allowedIssuers");
    input.allowed_origins = strings(&mut fields, object, "allowedOrigins");
    match object.get("claimMappings") {
        None => {}
        Some(Value::Null) => input.claim_mappings = Some(BTreeMap::new()),
        Some(Value::Object(items)) => {
            let mut mappings = BTreeMap::new();
            for (claim, target) in items {
                match target {
                    Value::String(s) => {
                        mappings.insert(claim.clone(), s.clone());
                    }
                    _ => fields.problem(
                        &format!("claimMappings.{claim}"),
                        "must be a string: `attributes.<name>`",
                    ),
                }
            }
            input.claim_mappings = Some(mappings);
        }
        Some(_) => fields.problem("claimMappings", "must be an object"),
    }
    fields.finish()?;
    Ok(input)
}

/// A list of strings as sent: `None` when not sent, empty when `null`; each item that is no
/// string is a problem.
fn strings(fields: &mut Fields, object: &Map<String, Value>, name: &str) -> Option<Vec<String>> {
    match object.get(name)? {
        Value::Null => Some(Vec::new()),
        Value::Array(items) => {
            let mut kept = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => kept.push(s.clone()),
                    _ => fields.problem(&format!("{name}[{i}]"), "must be a string"),
                }
            }
            Some(kept)
        }
        _ => {
            fields.problem(name, "must be an array of strings");
            None
        }
    }
}

/// Add an SDK key: a name and a public key (PEM) or a JWKS, RSA of 2048 to 4096 bits or EC
/// P-256.
#[utoipa::path(
    post, path = "/v1/{environmentId}/sdk-keys", tag = "sdk-keys", operation_id = "createSdkKey",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::SdkKeyRequest,
    responses(
        (status = 201, description = "The key", body = SdkKeyResponse,
            headers(("Location" = String, description = "Address of the key"))),
        (status = 400,
            description = "Every invalid field (`validation_failed`), including a key that is not \
                RSA of 2048 to 4096 bits or EC P-256", body = Problem,
                    content_type = "application/problem+json"),
        (status = 409,
            description = "A key has this name (`sdk_key_name_taken`), or the environment holds \
                the most keys (`sdk_key_limit_reached`)", body = Problem,
                    content_type = "application/problem+json"),
    ),
    security(("bearer" = ["sdk_keys:write"]))
)]
pub async fn create(call: Call<EnvironmentId>, body: Body) -> Reply {
    let input = input(&call.read(Permission::SdkKeysWrite, &body)?)?;
    let sdk = &call.state.sdk;
    let key = sdk.create(&call.caller, &call.path, input).await?;
    let location = format!("/v1/{}/sdk-keys/{}", key.environment_id, key.id);
    created(location, SdkKeyResponse { data: key.into() })
}

/// List the environment's SDK keys, by name.
#[utoipa::path(
    get, path = "/v1/{environmentId}/sdk-keys", tag = "sdk-keys", operation_id = "listSdkKeys",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses((status = 200, description = "Every SDK key", body = SdkKeyListResponse)),
    security(("bearer" = ["sdk_keys:read"]))
)]
pub async fn list(call: Call<EnvironmentId>) -> Reply {
    let keys = call.state.sdk.list(&call.caller, &call.path).await?;
    ok(SdkKeyListResponse { data: listed(keys) })
}

/// One SDK key.
#[utoipa::path(
    get, path = "/v1/{environmentId}/sdk-keys/{sdkKeyId}", tag = "sdk-keys",
        operation_id = "getSdkKey",
    params(("environmentId" = String, Path, description = "Environment id"), ("sdkKeyId" = String,
        Path, description = "SDK key id")),
    responses(
        (status = 200, description = "The key", body = SdkKeyResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["sdk_keys:read"]))
)]
pub async fn get(call: Call<(EnvironmentId, SdkKeyId)>) -> Reply {
    let (env, id) = &call.path;
    let key = call.state.sdk.get(&call.caller, env, id).await?;
    ok(SdkKeyResponse { data: key.into() })
}

/// Change an SDK key: any of the fields of its creation; those left out are kept. A new
/// `publicKey` or `jwks` replaces its public keys; a new name is the `kid` its tokens must
/// carry from then on. Tokens already in use are checked again under the key as changed.
#[utoipa::path(
    patch, path = "/v1/{environmentId}/sdk-keys/{sdkKeyId}", tag = "sdk-keys",
        operation_id = "updateSdkKey",
    params(("environmentId" = String, Path, description = "Environment id"), ("sdkKeyId" = String,
        Path, description = "SDK key id")),
    request_body(content = crate::schemas::SdkKeyPatch,
        description = "Any of the fields of a new key; those left out are kept"),
    responses(
        (status = 200, description = "The key as changed", body = SdkKeyResponse),
        (status = 400, description = "Every invalid field (`validation_failed`)", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "Another key has this name (`sdk_key_name_taken`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["sdk_keys:write"]))
)]
pub async fn update(call: Call<(EnvironmentId, SdkKeyId)>, body: Body) -> Reply {
    let input = input(&call.read(Permission::SdkKeysWrite, &body)?)?;
    let (env, id) = &call.path;
    let key = call.state.sdk.update(&call.caller, env, id, input).await?;
    ok(SdkKeyResponse { data: key.into() })
}

/// Delete an SDK key: its tokens are refused from then on (within a second in every process).
#[utoipa::path(
    delete, path = "/v1/{environmentId}/sdk-keys/{sdkKeyId}", tag = "sdk-keys",
        operation_id = "deleteSdkKey",
    params(("environmentId" = String, Path, description = "Environment id"), ("sdkKeyId" = String,
        Path, description = "SDK key id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["sdk_keys:write"]))
)]
pub async fn delete(call: Call<(EnvironmentId, SdkKeyId)>) -> Reply {
    let (env, id) = &call.path;
    call.state.sdk.delete(&call.caller, env, id).await?;
    no_content()
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/sdk-keys")
            .route(web::get().to(list))
            .route(web::post().to(create)),
    )
    .service(
        web::resource("/v1/{environmentId}/sdk-keys/{sdkKeyId}")
            .route(web::get().to(get))
            .route(web::patch().to(update))
            .route(web::delete().to(delete)),
    );
}
