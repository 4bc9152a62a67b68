//! Readiness: whatever the service depends on answers.

use async_trait::async_trait;

use crate::StorageError;

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait HealthProbe: Send + Sync {
    /// Ok when the database is reachable and every migration is applied.
    async fn ready(&self) -> Result<(), StorageError>;
}
