use async_trait::async_trait;
use domain::{HealthProbe, StorageError};

use crate::Database;

/// Ready when a pooled connection answers and no embedded migration is pending.
pub struct DieselHealthProbe {
    db: Database,
}

impl DieselHealthProbe {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl HealthProbe for DieselHealthProbe {
    async fn ready(&self) -> Result<(), StorageError> {
        if self.db.migrations_current().await? {
            Ok(())
        } else {
            Err(StorageError::Unavailable("migrations pending".into()))
        }
    }
}
