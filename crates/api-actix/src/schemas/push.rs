//! The bodies of push notification platforms and end users' devices.

use serde_json::{json, Value};

/// One of the four push platforms (`domain::push::provider_of`).
fn platform() -> Value {
    json!({"type": "string", "enum": domain::push::PLATFORMS})
}

/// An app id (`domain::push`): 1 to 256 ASCII letters, digits, dots, hyphens and underscores.
fn app_id() -> Value {
    json!({"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,256}$"})
}

/// The push platforms' and devices' bodies, by component name.
pub(super) fn bodies() -> [(&'static str, Value); 4] {
    [
        (
            "PlatformRequest",
            json!({
                "type": "object", "required": ["appId", "platform", "platformCredential"],
                "description": "The credential is checked offline: a service account (GCM, FCM), a \
                    certificate's private key, or a .p8 signing key (APNS, APNS_SANDBOX)",
                "properties": {
                    "appId": app_id(), "platform": platform(),
                    "platformCredential": {"type": "string", "maxLength": 16384, "pattern": "\\S",
                        "description":
                            "Service-account JSON (GCM/FCM), the certificate's private key \
                            (iOS certificate), or the .p8 signing key (iOS token)"},
                    "platformPrincipal": {"type": ["string", "null"], "maxLength": 16384,
                        "description": "Empty (GCM/FCM), the PEM certificate (iOS certificate), or \
                            the key id (iOS token)"},
                    "platformProperties": {"type": ["object", "null"],
                        "propertyNames": {"type": "string", "enum": ["channelId",
                            "restrictedPackageName", "teamId", "bundleId"]},
                        "additionalProperties": {"type": "string"}},
                },
                // A .p8 key made for this example only: Apple never issued it, so pushes with it
                // are refused by APNs, but it passes the offline checks.
                "example": {"appId": "com.example.app", "platform": "APNS",
                    "platformCredential": EXAMPLE_P8_KEY, "platformPrincipal": "ABC123DEFG",
                    "platformProperties": {"teamId": "DEF123GHIJ", "bundleId": "com.example.app"}},
            }),
        ),
        (
            "PlatformKey",
            json!({
                "type": "object", "required": ["appId", "platform"],
                "properties": {"appId": {"type": "string", "minLength": 1}, "platform": platform()},
                "example": {"appId": "com.example.app", "platform": "FCM"},
            }),
        ),
        (
            "PlatformEnabledRequest",
            json!({
                "type": "object", "required": ["id", "enabled"],
                "properties": {"id": {"type": "string", "minLength": 1,
                    "description": "The platform's id"},
                               "enabled": {"type": "boolean"}},
            }),
        ),
        (
            "DeviceRequest",
            json!({
                "type": "object", "required": ["appId", "platform"],
                "properties": {"appId": app_id(), "platform": platform()},
                "example": {"appId": "com.example.app", "platform": "FCM"},
            }),
        ),
    ]
}

/// The signing key of the push platform example.
const EXAMPLE_P8_KEY: &str = "-----BEGIN PRIVATE \
        KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgUWvlIdjjdauOF75L\nH03I5BU0kPRpccE\
            1fppfh9hxoEOhRANCAAS6lW6Xe7o9v7VcwiD1e52FRX14kkoX\ndJBDgAWtKqTH7pu1J4NUfo/5bmmgWrtns7Ye\
                cvzGJi2eBl/TbnfQtkao\n-----END PRIVATE KEY-----";
