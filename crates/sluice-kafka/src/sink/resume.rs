//! Finishing a transaction that an earlier producer left pre-committed: librdkafka cannot resume
//! a transaction of another producer instance, so after a restore the sink sends the transaction
//! coordinator an `EndTxn` request itself, with the transactional id, producer id and epoch stored
//! in the checkpoint (what Flink's `KafkaCommitter` does through the Java client's internals).
//!
//! The wire part is small and blocking (it runs inside `block_in_place` or on a plain thread):
//! `ApiVersions` to pick versions the broker speaks, `FindCoordinator` for the transactional id,
//! then `EndTxn`. What the answer means is the pure [`outcome`].

use kafka_protocol::messages::{
    ApiVersionsRequest, EndTxnRequest, FindCoordinatorRequest, ProducerId, RequestHeader,
    ResponseHeader, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// What the coordinator's answer to an `EndTxn` commit means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Committed now, or it had been committed before with this producer epoch (a retry).
    Committed,
    /// The transactional id moved on (a newer epoch or producer id): the transaction was ended
    /// before, by this sink's own commit followed by a new producer (the sink re-initialises an
    /// id after every commit) or, if something else fenced it first, lost. Logged, not fatal, as
    /// in Flink's committer.
    AlreadyEnded,
    /// Worth asking again (the coordinator moved or is loading).
    Retry,
    /// Anything else: fails the job.
    Failed,
}

/// The meaning of `EndTxn`'s error code (Kafka's protocol error codes).
pub(crate) fn outcome(error_code: i16) -> Outcome {
    match error_code {
        0 => Outcome::Committed,
        // INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED
        47 | 48 | 49 | 90 => Outcome::AlreadyEnded,
        // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
        // CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT, NETWORK_EXCEPTION
        14 | 15 | 16 | 51 | 7 | 13 => Outcome::Retry,
        _ => Outcome::Failed,
    }
}

/// How the broker answered one resume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) outcome: Outcome,
    pub(crate) error_code: i16,
}

/// One blocking connection to a broker, with its request versions.
struct Connection {
    stream: TcpStream,
    correlation: i32,
    versions: Vec<(i16, i16, i16)>,
}

const CLIENT_ID: &str = "sluice-kafka-resume";

impl Connection {
    fn open(address: &str, timeout: Duration) -> Result<Self, String> {
        let addr = address
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {address}: {e}"))?
            .next()
            .ok_or_else(|| format!("{address} resolves to no address"))?;
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("cannot connect to {address}: {e}"))?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| format!("cannot set timeouts on {address}: {e}"))?;
        let mut c = Connection {
            stream,
            correlation: 0,
            versions: Vec::new(),
        };
        let answer = c.call(&ApiVersionsRequest::default(), 0)?;
        if answer.error_code != 0 {
            return Err(format!(
                "{address} refused ApiVersions (error {})",
                answer.error_code
            ));
        }
        c.versions = answer
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        Ok(c)
    }

    /// The highest version of `R` both sides speak, up to `ours`.
    fn version<R: Request>(&self, ours: i16) -> Result<i16, String> {
        let (_, min, max) = self
            .versions
            .iter()
            .copied()
            .find(|(k, _, _)| *k == R::KEY)
            .ok_or_else(|| format!("the broker does not support API key {}", R::KEY))?;
        let v = ours.min(max);
        if v < min {
            return Err(format!(
                "the broker speaks versions {min}-{max} of API key {}, sluice up to {ours}",
                R::KEY
            ));
        }
        Ok(v)
    }

    fn call<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response, String> {
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut body = bytes::BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .and_then(|()| request.encode(&mut body, version))
            .map_err(|e| format!("cannot encode API key {} v{version}: {e}", R::KEY))?;
        let len = i32::try_from(body.len()).map_err(|_| "request too large".to_string())?;
        self.stream
            .write_all(&len.to_be_bytes())
            .and_then(|()| self.stream.write_all(&body))
            .map_err(|e| format!("cannot send a request: {e}"))?;
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .map_err(|e| format!("no answer: {e}"))?;
        let size = usize::try_from(i32::from_be_bytes(size))
            .map_err(|_| "a negative answer size".to_string())?;
        let mut answer = vec![0u8; size];
        self.stream
            .read_exact(&mut answer)
            .map_err(|e| format!("the answer was cut short: {e}"))?;
        let mut answer = bytes::Bytes::from(answer);
        let head = ResponseHeader::decode(
            &mut answer,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .map_err(|e| format!("cannot decode an answer header: {e}"))?;
        if head.correlation_id != self.correlation {
            return Err(format!(
                "an answer to request {} arrived for request {}",
                head.correlation_id, self.correlation
            ));
        }
        R::Response::decode(&mut answer, version)
            .map_err(|e| format!("cannot decode the answer to API key {}: {e}", R::KEY))
    }
}

/// Commits the pre-committed transaction of `transactional_id` left by producer
/// `producer_id` / `epoch`, asking the brokers at `bootstrap` (comma-separated). Retries a
/// coordinator that moved or is loading, `attempts` times in all.
pub(crate) fn commit(
    bootstrap: &str,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    attempts: u32,
    timeout: Duration,
) -> Result<Answer, String> {
    let mut last = String::from("no attempt made");
    for attempt in 0..attempts.max(1) {
        if attempt > 0 {
            // Backing off between attempts; this runs outside the tokio workers.
            std::thread::sleep(Duration::from_millis(100 << attempt.min(5)));
        }
        match commit_once(bootstrap, transactional_id, producer_id, epoch, timeout) {
            Ok(a) if a.outcome == Outcome::Retry => {
                last = format!("the coordinator answered error {}", a.error_code);
            }
            Ok(a) => return Ok(a),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn commit_once(
    bootstrap: &str,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    timeout: Duration,
) -> Result<Answer, String> {
    let mut errors = Vec::new();
    for server in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        match end_txn_via(server, transactional_id, producer_id, epoch, timeout) {
            Ok(a) => return Ok(a),
            Err(e) => errors.push(format!("{server}: {e}")),
        }
    }
    Err(errors.join("; "))
}

fn end_txn_via(
    server: &str,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    timeout: Duration,
) -> Result<Answer, String> {
    let mut bootstrap = Connection::open(server, timeout)?;
    // FindCoordinator up to v3 (v4 batches keys); key type 1 is a transaction coordinator.
    let v = bootstrap.version::<FindCoordinatorRequest>(3)?;
    let found = bootstrap.call(
        &FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(transactional_id.to_string()))
            .with_key_type(1),
        v,
    )?;
    if found.error_code != 0 {
        let o = outcome(found.error_code);
        return Ok(Answer {
            outcome: if o == Outcome::Committed {
                Outcome::Failed
            } else {
                o
            },
            error_code: found.error_code,
        });
    }
    let address = format!("{}:{}", found.host.as_str(), found.port);
    let mut coordinator = if address == server {
        bootstrap
    } else {
        Connection::open(&address, timeout)?
    };
    // EndTxn up to v3: v4 and later carry transaction-version-2 semantics (KIP-890).
    let v = coordinator.version::<EndTxnRequest>(3)?;
    let ended = coordinator.call(
        &EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_committed(true),
        v,
    )?;
    Ok(Answer {
        outcome: outcome(ended.error_code),
        error_code: ended.error_code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_txn_answers_mean_what_kafka_documents() {
        assert_eq!(outcome(0), Outcome::Committed);
        for code in [47, 48, 49, 90] {
            assert_eq!(outcome(code), Outcome::AlreadyEnded, "{code}");
        }
        for code in [14, 15, 16, 51] {
            assert_eq!(outcome(code), Outcome::Retry, "{code}");
        }
        assert_eq!(outcome(53), Outcome::Failed); // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    }

    #[test]
    fn an_absent_broker_is_named() {
        let e = commit("127.0.0.1:1", "t-0-0", 1, 0, 1, Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("127.0.0.1:1"), "{e}");
    }
}
