//! The in-memory stores pass the same port contract as the SQLite and PostgreSQL adapters.

use std::sync::Arc;

use workbench_domain::contract::{check, Stores};
use workbench_domain::memory::MemoryStore;

#[tokio::test]
async fn the_memory_store_keeps_the_port_contract() {
    check(|| async {
        let store = Arc::new(MemoryStore::new());
        let stores = Stores {
            folders: store.clone(),
            flows: store.clone(),
            settings: store,
        };
        (stores, ())
    })
    .await;
}
