//! Writes the table of `docs/iceberg.md` into a warehouse directory, so that it can be read
//! back with PyIceberg or DuckDB as the guide shows:
//!
//! `cargo run -p sluice-guides --example iceberg_page_views -- /tmp/sluice-warehouse`

use serde::{Deserialize, Serialize};
use sluice::prelude::*;
use sluice_iceberg::{DistributionMode, IcebergCatalog, IcebergSink, PartitionField};
use std::time::Duration;

/// One row of `web.page_views`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PageView {
    user: String,
    page: String,
    day: String,
    views: i64,
}

fn main() -> anyhow::Result<()> {
    let warehouse = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sluice-warehouse".to_string());
    let warehouse = std::path::Path::new(&warehouse);
    let catalog = IcebergCatalog::sqlite("local", warehouse)?;

    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    env.enable_checkpointing(Duration::from_millis(200));
    env.set_checkpoint_storage(warehouse.join("_checkpoints"));
    let views = env.from_generator(
        Generator::new(|i| PageView {
            user: format!("u{}", i % 100),
            page: ["/", "/cart", "/pay"][(i % 3) as usize].to_string(),
            day: format!("2026-11-{:02}", 1 + i % 3),
            views: 1,
        })
        .take(10_000),
    );
    IcebergSink::builder(catalog, "web.page_views")
        .create_if_missing_for::<PageView>()
        .partition_by(PartitionField::identity("day"))
        .distribution_mode(DistributionMode::Hash)
        .sink(&views);
    let result = env.execute_blocking("page views")?;
    println!(
        "wrote 10000 rows to web.page_views in {} ({} checkpoints)",
        warehouse.display(),
        result.completed_checkpoints
    );
    Ok(())
}
