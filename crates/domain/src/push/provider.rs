//! The providers that carry pushes (FCM, APNs) and the platform values that name them.

/// How the platform talks to devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `GCM` or `FCM`: Android over FCM HTTP v1.
    Fcm,
    /// `APNS` (production) or `APNS_SANDBOX`.
    Apns {
        /// True for `APNS_SANDBOX`: Apple's development environment, whose device tokens
        /// never work in production and the other way round.
        sandbox: bool,
    },
}

/// The platform values a push platform may have, as sent and kept.
pub const PLATFORMS: [&str; 4] = ["GCM", "FCM", "APNS", "APNS_SANDBOX"];

/// The provider of a platform value as sent (`GCM`, `FCM`, `APNS`, `APNS_SANDBOX`; records
/// keep the value as sent). None for any other value: the match is exact, case included.
///
/// ```
/// use workbench_domain::push::{provider_of, Provider};
///
/// assert_eq!(provider_of("GCM"), provider_of("FCM"));
/// assert_eq!(provider_of("APNS_SANDBOX"), Some(Provider::Apns { sandbox: true }));
/// assert_eq!(provider_of("fcm"), None);
/// assert!(workbench_domain::push::PLATFORMS.iter().all(|p| provider_of(p).is_some()));
/// ```
pub fn provider_of(platform: &str) -> Option<Provider> {
    match platform {
        "GCM" | "FCM" => Some(Provider::Fcm),
        "APNS" => Some(Provider::Apns { sandbox: false }),
        "APNS_SANDBOX" => Some(Provider::Apns { sandbox: true }),
        _ => None,
    }
}
