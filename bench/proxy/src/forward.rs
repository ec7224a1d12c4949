//! Forwarding: accepting connections, connecting each to the upstream, and copying the bytes
//! each way with the latency, until an end of stream, a failure, an outage or the shutdown.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::state::{Counters, Open, Shared};

/// The size of one read; a chunk is at most this long.
const CHUNK: usize = 16 * 1024;
/// Chunks on their way in one direction of one connection before reading waits. With 16 KiB
/// chunks this allows 16 MiB per latency period, far more than the endpoint needs.
const CHUNKS_IN_FLIGHT: usize = 1024;

/// Accepts connections until the shutdown, and forwards each (or, during an outage, resets
/// it).
pub(super) async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!("proxy accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let cut = {
            let state = shared.availability();
            state.available.then(|| state.epoch.child_token())
        };
        match cut {
            Some(cut) => {
                Counters::add(&shared.counters.accepted, 1);
                connections.spawn(connection(stream, Open::new(&shared), cut));
            }
            None => {
                Counters::add(&shared.counters.refused, 1);
                reset(&stream);
            }
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Makes the coming close a reset (RST) rather than an orderly end of stream.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

enum End {
    /// Both directions ended with an end of stream.
    Closed,
    /// A read or write failed (a side reset or went away).
    Failed,
    /// An outage or the shutdown.
    Cut,
}

async fn connection(mut client: TcpStream, open: Open, cut: CancellationToken) {
    let shared = &open.0;
    let _ = client.set_nodelay(true);
    let upstream = tokio::select! {
        biased;
        _ = cut.cancelled() => None,
        connected = TcpStream::connect(shared.upstream) => match connected {
            Ok(upstream) => Some(upstream),
            Err(e) => {
                tracing::debug!(upstream = %shared.upstream, "proxy cannot connect upstream: {e}");
                Counters::add(&shared.counters.upstream_failures, 1);
                reset(&client);
                return;
            }
        },
    };
    let end = match upstream {
        None => {
            reset(&client);
            End::Cut
        }
        Some(mut upstream) => {
            let _ = upstream.set_nodelay(true);
            let latency = shared.options.latency_each_way;
            let counters = &shared.counters;
            let end = {
                let (mut client_read, mut client_write) = client.split();
                let (mut upstream_read, mut upstream_write) = upstream.split();
                let forward = async {
                    tokio::try_join!(
                        pipe(
                            &mut client_read,
                            &mut upstream_write,
                            latency,
                            &cut,
                            &counters.bytes_to_upstream
                        ),
                        pipe(
                            &mut upstream_read,
                            &mut client_write,
                            latency,
                            &cut,
                            &counters.bytes_to_client
                        ),
                    )
                };
                tokio::select! {
                    biased;
                    _ = cut.cancelled() => End::Cut,
                    forwarded = forward => match forwarded {
                        Ok(_) if !cut.is_cancelled() => End::Closed,
                        Ok(_) => End::Cut,
                        Err(_) if cut.is_cancelled() => End::Cut,
                        Err(_) => End::Failed,
                    },
                }
            };
            if !matches!(end, End::Closed) {
                reset(&client);
                reset(&upstream);
            }
            end
        }
    };
    if matches!(end, End::Cut) && !shared.shutdown.is_cancelled() {
        Counters::add(&shared.counters.cut, 1);
    }
}

/// Copies `from` to `to`, each chunk `latency` after it was read, then forwards the end of
/// stream (also delayed). Fails when either side fails, or when `cut` is cancelled before a
/// write.
async fn pipe<R, W>(
    from: &mut R,
    to: &mut W,
    latency: Duration,
    cut: &CancellationToken,
    bytes: &AtomicU64,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let cut_error = || std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "outage");
    if latency.is_zero() {
        let mut buf = vec![0; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            if cut.is_cancelled() {
                return Err(cut_error());
            }
            if n == 0 {
                return to.shutdown().await;
            }
            to.write_all(&buf[..n]).await?;
            Counters::add(bytes, n as u64);
        }
    }
    // A chunk, or the end of stream (`None`), and when to deliver it.
    let (tx, mut rx) = mpsc::channel::<(Instant, Option<Bytes>)>(CHUNKS_IN_FLIGHT);
    let read = async move {
        let mut buf = vec![0; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            let due = Instant::now() + latency;
            let chunk = (n > 0).then(|| Bytes::copy_from_slice(&buf[..n]));
            if tx.send((due, chunk)).await.is_err() || n == 0 {
                // Delivered the end of stream, or the writing side is gone (its error is the
                // one reported).
                return Ok::<_, std::io::Error>(());
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if cut.is_cancelled() {
                return Err(cut_error());
            }
            match chunk {
                Some(chunk) => {
                    to.write_all(&chunk).await?;
                    Counters::add(bytes, chunk.len() as u64);
                }
                None => return to.shutdown().await,
            }
        }
        Ok(())
    };
    tokio::try_join!(read, write).map(|_| ())
}
