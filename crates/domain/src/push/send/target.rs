//! Which pushes a card event calls for, and which device and platform carry them: the card
//! platform a device shows, and the platform record that serves it.

use crate::card::AnalyticsEvent;
use crate::push::{provider_of, Device, Provider, PushPlatform};

/// Whether `event` calls for pushes: a card became active for the first time and its
/// template has a notification.
pub fn wants(event: &AnalyticsEvent) -> bool {
    event.name == "card-published" && event.sends_notifications()
}

/// The platforms (`Web`, `iOS`, `Android`) the card of a card event targets.
pub fn targeted_platforms(event: &AnalyticsEvent) -> &[String] {
    &event.card.platforms
}

/// The card platform (`iOS`, `Android`) whose content a device of `device_platform` shows.
pub fn card_platform(device_platform: &str) -> Option<&'static str> {
    match provider_of(device_platform)? {
        Provider::Fcm => Some("Android"),
        Provider::Apns { .. } => Some("iOS"),
    }
}

/// Whether a card aimed at `target_platforms` (`Web`, `iOS`, `Android`) reaches a device
/// registered for `device_platform` (`GCM`, `FCM`, `APNS`, `APNS_SANDBOX`).
pub fn reaches(target_platforms: &[String], device_platform: &str) -> bool {
    card_platform(device_platform).is_some_and(|p| target_platforms.iter().any(|t| t == p))
}

/// Whether a platform record (`GCM`, `FCM`, `APNS`, `APNS_SANDBOX`) serves a device registered
/// for `device_platform`: the same provider and, for APNs, the same environment. `GCM` and
/// `FCM` are one provider (docs/api.md, Sending pushes), so either serves a device registered
/// with the other.
///
/// ```
/// use workbench_domain::push::serves;
///
/// assert!(serves("FCM", "GCM"));
/// assert!(!serves("APNS", "APNS_SANDBOX"));
/// ```
pub fn serves(platform: &str, device_platform: &str) -> bool {
    provider_of(platform).is_some() && provider_of(platform) == provider_of(device_platform)
}

/// The platform that serves `device` among an app's platforms: an enabled one first.
pub fn platform_for<'a>(
    platforms: &'a [PushPlatform],
    device: &Device,
) -> Option<&'a PushPlatform> {
    let serving = |p: &&PushPlatform| {
        p.environment_id == device.environment_id
            && p.app_id == device.app_id
            && serves(&p.platform, &device.platform)
    };
    platforms
        .iter()
        .filter(serving)
        .find(|p| p.enabled)
        .or_else(|| platforms.iter().find(serving))
}
