//! The accept loop: every connection served by hyper with a deadline for
//! its request headers, and a bound on how many are open at once. Without
//! them, any local process could open idle connections until the server ran
//! out of file descriptors (1,024 on a desktop's default), or trickle
//! headers forever, and lock every client out, `/health` included; no key
//! is needed to open a connection.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
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

/// An open connection: whether it ever sent a request, and how to close it.
struct Open {
    id: u64,
    served: Arc<AtomicBool>,
    close: CancellationToken,
}

/// Serves `app` on `listener` until `stop` is cancelled, then closes the
/// connections (those in a reply after a moment to end it). At the bound, a
/// new connection closes the oldest one that has not sent a request yet
/// (one that has waits for its header deadline), so a flood of idle
/// connections cannot keep a real client out.
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
        let (served, close) = (Arc::new(AtomicBool::new(false)), CancellationToken::new());
        {
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            if open.len() >= MAX_CONNECTIONS {
                match open.iter().position(|c| !c.served.load(Ordering::Relaxed)) {
                    Some(k) => {
                        if let Some(idle) = open.remove(k) {
                            idle.close.cancel();
                        }
                    }
                    // Every one is a client's: this one is closed (the
                    // stream drops), and the client may try again.
                    None => continue,
                }
            }
            open.push_back(Open { id: next_id, served: served.clone(), close: close.clone() });
        }
        let id = next_id;
        next_id += 1;
        let (app, open) = (app.clone(), open.clone());
        tokio::spawn(async move {
            let service = tower::service_fn(move |request: axum::extract::Request<hyper::body::Incoming>| {
                served.store(true, Ordering::Relaxed);
                let mut app = app.clone();
                async move { tower::Service::call(&mut app, request.map(axum::body::Body::new)).await }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(HEADER_DEADLINE);
            let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            tokio::select! {
                _ = connection => {}
                _ = close.cancelled() => {}
            }
            open.lock().unwrap_or_else(|e| e.into_inner()).retain(|c| c.id != id);
        });
    }
    // Stopped: replies still streaming end with their finish reason (the
    // server's jobs were stopped first) if they do so soon; then the rest close.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < deadline
        && open.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|c| c.served.load(Ordering::Relaxed))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for c in open.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        c.close.cancel();
    }
}
