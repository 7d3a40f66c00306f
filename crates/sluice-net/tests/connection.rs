//! Connections over loopback: channels multiplexed both ways keep their order; a slow consumer
//! holds at most its window of buffers (measured by counters); a peer without the secret, or
//! one that does not speak the protocol, is refused and counted; a dropped peer fails the
//! channels instead of hanging them.

use sluice_net::auth::Secret;
use sluice_net::{Connection, Listener, NetConfig, NetError, connect};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncWriteExt;

fn config(secret: &[u8]) -> NetConfig {
    NetConfig::new(Secret::new(secret.to_vec()).unwrap())
}

async fn pair(window: u32) -> (Connection, Connection) {
    let mut cfg = config(b"the cluster's shared secret");
    cfg.window = window;
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), cfg.clone())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (server, client) = tokio::join!(listener.accept(), connect(addr, &cfg));
    (server.unwrap(), client.unwrap())
}

fn message(channel: u64, i: u64) -> Vec<u8> {
    format!("{channel}:{i}").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_both_ways_keep_their_order() {
    let (server, client) = pair(16).await;
    let (server, client) = (Arc::new(server), Arc::new(client));
    const N: u64 = 2_000;
    let mut tasks = Vec::new();
    // Four channels client → server, one server → client, all at once.
    for (from, to, channel) in [
        (&client, &server, 0u64),
        (&client, &server, 1),
        (&client, &server, 2),
        (&client, &server, 3),
        (&server, &client, 100),
    ] {
        let mut rx = to.receiver(channel).await.unwrap();
        let mut tx = from.sender(channel);
        tasks.push(tokio::spawn(async move {
            for i in 0..N {
                tx.send(message(channel, i)).await.unwrap();
            }
            tx.close().await.unwrap();
        }));
        tasks.push(tokio::spawn(async move {
            for i in 0..N {
                assert_eq!(rx.recv().await.unwrap(), Some(message(channel, i)));
            }
            assert_eq!(rx.recv().await.unwrap(), None);
            assert!(rx.max_queued() <= 16);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_holds_at_most_its_window() {
    // The smallest window (`MAX_FRAME_CREDITS`); each small message costs one credit.
    const WINDOW: u32 = 16;
    const N: u64 = 1_000;
    let (server, client) = pair(WINDOW).await;
    let mut rx = server.receiver(1).await.unwrap();
    let mut tx = client.sender(1);
    let sent = Arc::new(AtomicU64::new(0));
    let full = Arc::new(tokio::sync::Notify::new());
    let (counter, filled) = (sent.clone(), full.clone());
    let producer = tokio::spawn(async move {
        for i in 0..N {
            tx.send(message(1, i)).await.unwrap();
            if counter.fetch_add(1, Ordering::SeqCst) + 1 == u64::from(WINDOW) {
                // Nothing was taken yet: the window is spent, the next send must wait.
                assert_eq!(tx.credit(), 0);
                filled.notify_one();
            }
        }
        tx.close().await.unwrap();
    });
    // The consumer starts only once the producer has spent its whole window.
    full.notified().await;
    let mut received = 0u64;
    let mut most_in_flight = 0u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    while let Some(m) = rx.recv().await.unwrap() {
        assert_eq!(m, message(1, received));
        received += 1;
        // Sent but not yet taken by the consumer: never more than the window (plus the one
        // whose count the producer has not yet added).
        most_in_flight =
            most_in_flight.max((sent.load(Ordering::SeqCst) + 1).saturating_sub(received));
        // A consumer slower than the producer: it lets the producer run between takes.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        for _ in 0..rng % 64 {
            tokio::task::yield_now().await;
        }
    }
    producer.await.unwrap();
    assert_eq!(received, N);
    assert!(rx.max_queued() <= WINDOW, "queued {}", rx.max_queued());
    assert!(
        most_in_flight <= u64::from(WINDOW) + 1,
        "{most_in_flight} buffers in flight with a window of {WINDOW}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_counts_bytes_not_frames() {
    // 32 credits of 4 KiB: 32 small frames, or 4 frames of 32 KiB, or 2 of any larger size.
    let (server, client) = pair(32).await;
    let mut rx = server.receiver(5).await.unwrap();
    let mut tx = client.sender(5);
    let frame = vec![7u8; 8 * sluice_net::credit::CREDIT_BYTES];
    tx.ready().await.unwrap();
    for _ in 0..4 {
        tx.send(frame.clone()).await.unwrap();
    }
    assert_eq!(tx.credit(), 0);
    // Taking two frames frees half the window, which goes back at once.
    let mut got = 0;
    while got < 2 {
        assert_eq!(rx.recv().await.unwrap().unwrap().len(), frame.len());
        got += 1;
    }
    assert!(rx.max_queued() <= 32, "{}", rx.max_queued());
    // A frame larger than the most a frame costs still goes once enough credit is back.
    tx.send(vec![1u8; 1 << 20]).await.unwrap();
    tx.close().await.unwrap();
    let mut sizes = Vec::new();
    while let Some(m) = rx.recv().await.unwrap() {
        sizes.push(m.len());
    }
    assert_eq!(sizes, vec![frame.len(), frame.len(), 1 << 20]);
    assert!(rx.max_queued() <= 32, "{}", rx.max_queued());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_without_the_secret_are_refused_and_counted() {
    let good = config(b"the cluster's shared secret");
    let listener = Arc::new(
        Listener::bind("127.0.0.1:0".parse().unwrap(), good.clone())
            .await
            .unwrap(),
    );
    let addr = listener.local_addr().unwrap();
    let accepting = {
        let listener = listener.clone();
        tokio::spawn(async move { listener.accept().await })
    };
    // A peer with another secret: it finds out that the server does not know its secret.
    let err = connect(addr, &config(b"not the cluster's secret"))
        .await
        .unwrap_err();
    assert!(matches!(err, NetError::Refused { .. }), "{err}");
    // A peer that does not speak the protocol at all.
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    raw.write_all(b"\x00\x00\x00\x05hello").await.unwrap();
    raw.shutdown().await.unwrap();
    // Then a good one is accepted; the two before it were refused.
    let client = connect(addr, &good).await.unwrap();
    let server = accepting.await.unwrap().unwrap();
    assert_eq!(listener.rejected(), 2);
    let mut rx = server.receiver(5).await.unwrap();
    let mut tx = client.sender(5);
    tx.send(b"ok".to_vec()).await.unwrap();
    assert_eq!(rx.recv().await.unwrap(), Some(b"ok".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_peer_fails_its_channels() {
    let (server, client) = pair(2).await;
    let mut rx = client.receiver(9).await.unwrap();
    let mut tx = client.sender(10);
    drop(server);
    let err = rx.recv().await.unwrap_err();
    assert!(matches!(err, NetError::Closed { .. }), "{err}");
    // The sender has no credit (the peer never opened channel 10) and the connection is gone:
    // it fails instead of waiting forever.
    let err = tx.send(b"x".to_vec()).await.unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
}
