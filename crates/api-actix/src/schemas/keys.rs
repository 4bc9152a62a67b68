//! The bodies that make and change keys: an API key of a role, and SDK keys (the public keys
//! that verify end users' own tokens).

use serde_json::{json, Value};

use super::fields::{reference, text};

/// The API key's body, by component name.
pub(super) fn credential() -> (&'static str, Value) {
    (
        "CreateCredentialRequest",
        json!({
            "type": "object", "required": ["role"],
            "properties": {"role": {"type": "string", "enum": ["events", "workbench"]}},
            "example": {"role": "events"},
        }),
    )
}

/// The SDK keys' bodies, by component name: a new key (either form, and each form), and a
/// patch.
pub(super) fn sdk_keys() -> [(&'static str, Value); 4] {
    [
        ("SdkKeyRequest", sdk_key(true, None)),
        ("SdkKeyWithPublicKey", sdk_key(true, Some("publicKey"))),
        ("SdkKeyWithJwks", sdk_key(true, Some("jwks"))),
        ("SdkKeyPatch", sdk_key(false, None)),
    ]
}

/// An example SDK public key: EC P-256, as `openssl ec -pubout` writes it.
pub(crate) const EXAMPLE_SDK_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----\n\
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE8OtcUnoij4n/wypVTaSTYSsaXR8i\n\
W0AXSJ8liEnVBLgZTCu9DJfHbYvkHCVWEzg6AHC5ZpQXKrp4V5yP8nHE8Q==\n\
-----END PUBLIC KEY-----\n";

/// The body of `POST /sdk-keys` (`create`), one of its two forms (`branch`: the key form it
/// requires), or the body of its `PATCH`: every field optional in a patch, where `publicKey`
/// and `jwks` each replace the public keys.
fn sdk_key(create: bool, branch: Option<&str>) -> Value {
    use domain::audience::ATTRIBUTE_NAME_MAX_CHARS;
    use domain::sdk::{
        CLAIM_MAX_CHARS, ISSUER_MAX_CHARS, MAX_ALLOWED_ISSUERS, MAX_ALLOWED_ORIGINS,
        MAX_CLAIM_MAPPINGS, MAX_JWKS_KEYS, MAX_TOKEN_EXPIRY_DAYS, ORIGIN_MAX_CHARS,
        SDK_KEY_NAME_MAX_CHARS,
    };
    let mut schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string",
                "pattern": format!("^[A-Za-z0-9._-]{{1,{SDK_KEY_NAME_MAX_CHARS}}}$"),
                "description":
                    "What tokens name as their header's `kid`; unique in the environment"},
            "publicKey": {"type": "string", "minLength": 1, "maxLength": 16_384,
                "description":
                    "A PEM public key (`PUBLIC KEY`, or `RSA PUBLIC KEY`): RSA of 2048 to 4096 \
                        bits, or EC P-256"},
            "jwks": {"type": "object", "required": ["keys"],
                "description":
                    "A JSON Web Key Set of RSA (2048 to 4096 bits) or EC P-256 keys, instead of \
                        `publicKey`",
                "properties": {"keys": {"type": "array", "minItems": 1, "maxItems": MAX_JWKS_KEYS,
                    "items": {"type": "object", "required": ["kty"]}}}},
            "maxTokenExpiryDays": {"type": "integer", "minimum": 1,
                "maximum": MAX_TOKEN_EXPIRY_DAYS,
                "description":
                    "The longest a token may live, `exp - iat`; 7 when a new key has none"},
            "allowedIssuers": {"type": ["array", "null"], "maxItems": MAX_ALLOWED_ISSUERS,
                "items": text(1, ISSUER_MAX_CHARS),
                "description":
                    "When not empty, a token's `iss` must be one of them; null or [] for any"},
            "claimMappings": {"type": ["object", "null"], "maxProperties": MAX_CLAIM_MAPPINGS,
                "propertyNames": text(1, CLAIM_MAX_CHARS),
                "additionalProperties": {"type": "string",
                    "pattern": format!("^attributes\\.[\\s\\S]{{1,{ATTRIBUTE_NAME_MAX_CHARS}}}$")},
                "description":
                    "A claim → `attributes.<name>`: set on the user when a token is first seen"},
            "allowedOrigins": {"type": ["array", "null"], "maxItems": MAX_ALLOWED_ORIGINS,
                "items": {"type": "string", "minLength": 1, "maxLength": ORIGIN_MAX_CHARS,
                    "pattern": "^https?://[^/?#@*]+$"},
                "description":
                    "Web origins whose pages may call this key's end users' routes from a \
                        browser (CORS), each exactly as a browser sends `Origin` \
                        (`https://app.example.com`, `http://localhost:3000`); null or [] for \
                        none"},
        },
    });
    if let Some(form) = branch {
        schema["required"] = json!(["name", form]);
        schema["description"] = json!(format!("A new key with `{form}`"));
    } else if create {
        // One of the two key forms, never both: an object with both matches both branches.
        // Each is a component of its own: generators handle a union of references.
        schema = json!({
            "oneOf": [reference("SdkKeyWithPublicKey"), reference("SdkKeyWithJwks")],
            "description": "A name and one public key form: `publicKey` or `jwks`, not both",
            "example": {"name": "ios-app", "publicKey": EXAMPLE_SDK_PUBLIC_KEY,
                "maxTokenExpiryDays": 7, "allowedIssuers": ["https://auth.example.com"],
                "claimMappings": {"email": "attributes.email"}},
        });
    } else {
        schema["description"] = json!(
            "Any of the fields of a new key; a new `publicKey` or \
            `jwks` (not both) replaces its public keys"
        );
        schema["example"] = json!({"maxTokenExpiryDays": 1, "allowedIssuers": []});
    }
    schema
}
