//! The sides of the `kafka` scenario: the records (about 100 bytes of text each), the sluice
//! jobs (`KafkaSource` into a counting sink; a generator into `KafkaSink`) and the plain rdkafka
//! loops beside them (a `BaseConsumer` reading to the high watermarks; a producer sending
//! everything and flushing).

use super::broker::{Broker, RECEIVE_MAX, checksum, cpu_time_of, fresh_name, read_to_end};
use crate::measure::{Run, process_cpu_time, timed};
use sluice::prelude::*;
use sluice_kafka::{
    DeliveryGuarantee, KafkaDeserializer, KafkaRecordSerializer, KafkaSink, KafkaSinkExt,
    KafkaSource, StartingOffsets, StoppingOffsets,
};
use sluice_source::FromSource;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Filler text the values are cut from.
const FILLER: &str = "page=/products/shoes/running&user=u-7f3a91&session=s-0c44e2&ref=search&campaign=winter-sale-2026";

/// Record `i`: its number and a cut of the filler, 90 to 110 bytes (the length varies with `i`,
/// so the byte sum in the checksum catches a lost or doubled record).
pub fn value(i: u64) -> String {
    let mut s = String::with_capacity(112);
    let _ = write!(s, "{i:016} ");
    let len = 90 + (i % 21) as usize;
    s.push_str(&FILLER[..len - s.len()]);
    s
}

/// What one run cost beyond its wall-clock time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// CPU time of this process (the side's threads and librdkafka's) during the timed part.
    pub cpu: Duration,
    /// CPU time of the broker's process during the timed part, when it is known.
    pub broker_cpu: Option<Duration>,
    /// Checkpoints completed during the job (zero for the plain clients).
    pub checkpoints: u64,
}

/// Times `f` (which returns its checksum) and measures the CPU time it took, its own and the
/// broker's.
pub fn metered(
    broker: &Broker,
    f: impl FnOnce() -> anyhow::Result<u64>,
) -> anyhow::Result<(Run, Usage)> {
    let broker_before = broker.pid.and_then(cpu_time_of);
    let before = process_cpu_time()?;
    let run = timed(f)?;
    let cpu = process_cpu_time()?.saturating_sub(before);
    let broker_cpu = match (broker_before, broker.pid.and_then(cpu_time_of)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    Ok((
        run,
        Usage {
            cpu,
            broker_cpu,
            checkpoints: 0,
        },
    ))
}

/// Counts the records and value bytes it gets; at the end adds them to shared totals.
#[derive(Clone)]
struct CountBytes {
    records: u64,
    bytes: u64,
    totals: Arc<(AtomicU64, AtomicU64)>,
}

impl Sink<Vec<u8>> for CountBytes {
    fn write_batch(&mut self, batch: Vec<Vec<u8>>) -> Result<(), UserError> {
        self.records += batch.len() as u64;
        self.bytes += batch.iter().map(|v| v.len() as u64).sum::<u64>();
        Ok(())
    }

    fn finish(&mut self) -> Result<(), UserError> {
        self.totals.0.fetch_add(self.records, Ordering::Relaxed);
        self.totals.1.fetch_add(self.bytes, Ordering::Relaxed);
        Ok(())
    }
}

/// The sluice side of `source-p1`: a bounded `KafkaSource` (earliest to latest, the values'
/// bytes) at parallelism 1 into a counting sink. Times the job from submission to its end.
pub fn source_job(broker: &Broker, topic: &str) -> anyhow::Result<(Run, Usage)> {
    let source = KafkaSource::<Vec<u8>>::builder()
        .bootstrap_servers(&broker.bootstrap)
        .topics([topic])
        .starting_offsets(StartingOffsets::Earliest)
        .bounded(StoppingOffsets::Latest)
        .deserializer(KafkaDeserializer::bytes())
        .property(RECEIVE_MAX.0, RECEIVE_MAX.1)
        .build()?;
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let totals = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    env.from_source(source, None, "kafka").sink_to(CountBytes {
        records: 0,
        bytes: 0,
        totals: totals.clone(),
    });
    let (mut run, usage) = metered(broker, || {
        env.execute_blocking("kafka source")?;
        Ok(0)
    })?;
    run.checksum = checksum(
        totals.0.load(Ordering::Relaxed),
        totals.1.load(Ordering::Relaxed),
    );
    Ok((run, usage))
}

/// The baseline of `source-p1`: one thread, one plain `BaseConsumer` with the source's own
/// consumer settings, assigned every partition from offset 0 and read to the high watermarks
/// fetched at its start, each value copied into a `Vec<u8>` (what `KafkaDeserializer::bytes`
/// does). Times it from the consumer's creation to the last record.
pub fn consumer_loop(broker: &Broker, topic: &str) -> anyhow::Result<(Run, Usage)> {
    let group = fresh_name("loop");
    metered(broker, || {
        let consumer = broker.consumer(&group, false)?;
        let (records, bytes) = read_to_end(&consumer, topic, false, |v| {
            let owned: Vec<u8> = v.to_vec();
            std::hint::black_box(&owned);
            owned.len() as u64
        })?;
        Ok(checksum(records, bytes))
    })
}

/// The sluice side of the sink cases: a generator of `n` numbers mapped to the records, into
/// a `KafkaSink` with `guarantee` at parallelism 1, checkpoints every second, into a fresh
/// topic. Times the job from submission to its end (for exactly-once, the last transaction
/// committed); the checksum is what a `read_committed` reader then finds in the topic.
pub fn sink_job(
    broker: &Broker,
    guarantee: DeliveryGuarantee,
    n: u64,
) -> anyhow::Result<(Run, Usage)> {
    let topic = fresh_name(match guarantee {
        DeliveryGuarantee::ExactlyOnce => "sink-eo",
        DeliveryGuarantee::AtLeastOnce => "sink-alo",
        DeliveryGuarantee::None => "sink-none",
    });
    broker.create_topic(&topic)?;
    let result = (|| {
        let dir = tempfile::tempdir()?;
        let sink = KafkaSink::<String>::builder()
            .bootstrap_servers(&broker.bootstrap)
            .record_serializer(KafkaRecordSerializer::bytes(topic.as_str()))
            .delivery_guarantee(guarantee)
            .transactional_id_prefix(topic.as_str())
            .build()?;
        let env = StreamEnvironment::new();
        env.set_parallelism(1)
            .enable_checkpointing(Duration::from_secs(1));
        env.set_checkpoint_storage(dir.path().join("checkpoints"));
        env.from_generator(Generator::new(|i| i).take(n))
            .map(value)
            .sink_to_kafka(sink);
        let mut checkpoints = 0;
        let (mut run, mut usage) = metered(broker, || {
            checkpoints = env.execute_blocking("kafka sink")?.completed_checkpoints;
            Ok(0)
        })?;
        usage.checkpoints = checkpoints;
        run.checksum = broker.read_back(&topic)?;
        Ok((run, usage))
    })();
    broker.delete_topic(&topic);
    result
}

/// The baseline of the sink cases: a plain producer (librdkafka's defaults, `linger.ms` 5 as
/// the sink leaves it) sending the same `n` records (made by the same function, one `String`
/// each) into a fresh topic, then flushing. Times it from the producer's creation to the end of
/// the flush; the checksum is what a `read_committed` reader then finds in the topic.
pub fn producer_loop(broker: &Broker, n: u64) -> anyhow::Result<(Run, Usage)> {
    let topic = fresh_name("sink-loop");
    broker.create_topic(&topic)?;
    let result = (|| {
        let (mut run, usage) = metered(broker, || broker.produce(&topic, n, false, value))?;
        let sent = run.checksum;
        run.checksum = broker.read_back(&topic)?;
        anyhow::ensure!(
            run.checksum == sent,
            "the plain producer sent {sent:#x} but {topic} holds {:#x}",
            run.checksum
        );
        Ok((run, usage))
    })();
    broker.delete_topic(&topic);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_90_to_110_bytes_and_distinct() {
        let lens: Vec<usize> = (0..21).map(|i| value(i).len()).collect();
        assert_eq!(lens.iter().min(), Some(&90));
        assert_eq!(lens.iter().max(), Some(&110));
        assert!(value(7).starts_with("0000000000000007 "));
        assert_ne!(value(1), value(22));
    }
}
