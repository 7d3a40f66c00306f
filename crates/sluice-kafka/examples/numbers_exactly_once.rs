//! Numbers written exactly once to a Kafka topic, by a job that can be killed and resumed.
//!
//! A generator counts from 0 to `--count` (rate-limited to `--rate` per second), two subtasks
//! write the numbers with an exactly-once `KafkaSink` (one transaction per checkpoint, every
//! `--checkpoint-interval-ms`), and checkpoints go to `--checkpoint-dir`. Kill the process at any
//! moment (SIGKILL included) and start it again with `--resume`: it restores the latest
//! checkpoint, commits the transactions that checkpoint had pre-committed, aborts the rest, and
//! writes on; a `read_committed` reader then sees every number once. While it runs it prints a
//! line each time a checkpoint completes.
//!
//! ```text
//! cargo run --example numbers_exactly_once -- --bootstrap 127.0.0.1:9092 --topic numbers \
//!     --checkpoint-dir /tmp/numbers --count 100000
//! ```

use anyhow::{Context, bail};
use sluice_kafka::{DeliveryGuarantee, KafkaRecordSerializer, KafkaSink, KafkaSinkExt};
use sluice_runtime::prelude::*;
use std::time::Duration;

struct Args {
    bootstrap: String,
    topic: String,
    checkpoint_dir: String,
    count: u64,
    rate: f64,
    interval_ms: u64,
    resume: bool,
}

fn parse() -> anyhow::Result<Args> {
    let mut a = Args {
        bootstrap: String::new(),
        topic: String::new(),
        checkpoint_dir: String::new(),
        count: 100_000,
        rate: 20_000.0,
        interval_ms: 200,
        resume: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value()?,
            "--topic" => a.topic = value()?,
            "--checkpoint-dir" => a.checkpoint_dir = value()?,
            "--count" => a.count = value()?.parse().context("--count")?,
            "--rate" => a.rate = value()?.parse().context("--rate")?,
            "--checkpoint-interval-ms" => {
                a.interval_ms = value()?.parse().context("--checkpoint-interval-ms")?
            }
            "--resume" => a.resume = true,
            other => bail!("unknown flag {other}"),
        }
    }
    if a.bootstrap.is_empty() || a.topic.is_empty() || a.checkpoint_dir.is_empty() {
        bail!("--bootstrap, --topic and --checkpoint-dir are required");
    }
    Ok(a)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = parse()?;
    let sink = KafkaSink::<u64>::builder()
        .bootstrap_servers(&a.bootstrap)
        .record_serializer(KafkaRecordSerializer::new(
            a.topic.clone(),
            |v: &u64, out: &mut Vec<u8>| {
                out.extend_from_slice(v.to_string().as_bytes());
                Ok(())
            },
        ))
        .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
        .transactional_id_prefix(format!("numbers-{}", a.topic))
        .build()?;
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(100);
    env.enable_checkpointing(Duration::from_millis(a.interval_ms));
    env.set_checkpoint_storage(&a.checkpoint_dir);
    if a.resume {
        env.resume_from_latest_checkpoint();
    }
    env.from_generator(Generator::new(|i| i).take(a.count).rate_limit(a.rate))
        .sink_to_kafka(sink);
    let job = env.submit("numbers exactly once")?;
    let observer = job.observer();
    let ticker = tokio::spawn(async move {
        let mut seen = 0;
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let completed = observer.snapshot().checkpoints.counts.completed;
            if completed > seen {
                seen = completed;
                println!("checkpoints completed: {completed}");
            }
        }
    });
    let result = job.await;
    ticker.abort();
    let result = result?;
    println!(
        "done: {} numbers, restored from {:?}",
        a.count, result.restored_from
    );
    Ok(())
}
