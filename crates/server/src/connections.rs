//! The accept loop: every connection served by hyper with a deadline for
//! its request headers, and a bound on how many are open at once. Without
//! them, any local process could open idle connections until the server ran
//! out of file descriptors (1,024 on a desktop's default), or trickle
//! headers forever, and lock every client out, `/health` included; no key
//! is needed to open a connection.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use futures_util::StreamExt;
use hearth_worker::CancellationToken;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Connections open at once at most: well under a desktop's default limit
/// of 1,024 file descriptors, with room for the model, caches and the app.
pub const MAX_CONNECTIONS: usize = 512;
/// How long a connection may take to send a request's headers, the first
/// or the next on a kept-alive connection: then it is closed.
pub const HEADER_DEADLINE: Duration = Duration::from_secs(10);
/// After the server stops, how long a reply in progress has to end (its
/// job was stopped, which takes a step) before its connection is closed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// An open connection: its requests in progress (a response counts until
/// its body has been sent or dropped), and how to close it.
struct Open {
    id: u64,
    busy: Arc<AtomicUsize>,
    close: CancellationToken,
}

/// Counts a request from its headers to its response body's end.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `app` on `listener` until `stop` is cancelled; then each
/// connection closes once its reply in progress has ended (idle ones at
/// once). At the bound, a new connection closes the oldest one with no
/// request in progress (a client's next request opens a new one), so idle
/// connections cannot keep a real client out; when every one is busy, the
/// new one is closed.
pub async fn serve(listener: TcpListener, app: Router, stop: CancellationToken) {
    let open: Arc<Mutex<VecDeque<Open>>> = Arc::default();
    let mut next_id = 0u64;
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors (or a connection reset before it was
                    // taken): wait for some to close rather than spin.
                    tracing::warn!("the API server could not take a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (busy, close) = (Arc::new(AtomicUsize::new(0)), CancellationToken::new());
        {
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            if open.len() >= MAX_CONNECTIONS {
                match open.iter().position(|c| c.busy.load(Ordering::Relaxed) == 0) {
                    Some(k) => {
                        if let Some(idle) = open.remove(k) {
                            idle.close.cancel();
                        }
                    }
                    // Every one is in a reply: this one is closed (the
                    // stream drops), and the client may try again.
                    None => continue,
                }
            }
            open.push_back(Open { id: next_id, busy: busy.clone(), close: close.clone() });
        }
        let id = next_id;
        next_id += 1;
        let (app, open, stop) = (app.clone(), open.clone(), stop.clone());
        tokio::spawn(async move {
            let service = tower::service_fn(move |request: axum::extract::Request<hyper::body::Incoming>| {
                let guard = Busy::new(&busy);
                let mut app = app.clone();
                async move {
                    let response = tower::Service::call(&mut app, request.map(axum::body::Body::new)).await?;
                    // The guard goes with the body, so a streamed reply
                    // counts until its last event is sent.
                    Ok::<_, std::convert::Infallible>(response.map(|body| {
                        axum::body::Body::from_stream(body.into_data_stream().map(move |chunk| {
                            let _ = &guard;
                            chunk
                        }))
                    }))
                }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(HEADER_DEADLINE);
            let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = close.cancelled() => {}
                _ = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(STOP_GRACE, connection.as_mut()).await;
                }
            }
            open.lock().unwrap_or_else(|e| e.into_inner()).retain(|c| c.id != id);
        });
    }
}
