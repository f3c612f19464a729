//! The agent's link to the head: a WebSocket re-established whenever it drops, with a backoff
//! that never exceeds half the heartbeat interval (after a head restart or a short cut, agents
//! must be back before the head's node timeout). The agent pings the head (every heartbeat
//! interval with a fence, AG-7; twice within the silence bound otherwise), and a link on
//! which a ping has gone unanswered, with nothing else heard since, for twice the head's node
//! timeout and at least `MIN_SILENCE_MS` is taken as dropped: a connection that died without
//! closing (a NAT or load balancer that lost it, a cut one way) is otherwise kept until the
//! kernel gives up on it, about a quarter of an hour, while the head has placed the node's
//! work elsewhere. The credential is read again before every attempt, so a rotated or
//! re-created token file is picked up. Messages both ways go through `NodeAgent`.

use super::{FromHead, HeadHeard, Linked, NodeAgent, Unlinked};
use crate::paths::Credential;
use actix::Addr;
use ftdrive::protocol::{ToAgent, ToHead};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const FIRST_BACKOFF_MS: u64 = 50;
/// The least a silent head is waited for: a head stalled past its node timeout (swapping,
/// starved, stopped) keeps its nodes because their heartbeats wait in its sockets, and reads
/// them before it expires anyone; a link dropped sooner loses them (at 10,000 agents, a 5 s
/// stall with links dropped after 3 s cost 579 nodes).
pub const MIN_SILENCE_MS: u64 = 10_000;

/// Pings sent within the silence bound, without a fence.
pub const PINGS_PER_SILENCE: u64 = 2;

/// How long a link waits on a head that answers nothing, for a head whose node timeout is
/// `node_timeout_ms` (0 before any head has said: the least).
pub fn silence_ms(node_timeout_ms: u64) -> u64 {
    node_timeout_ms.saturating_mul(2).max(MIN_SILENCE_MS)
}

/// What paces the link, as the head's welcome sets it: the heartbeat interval (pings, and the
/// backoff's cap) and how long a head that answers nothing is waited for (`silence_ms`).
#[derive(Clone)]
pub struct LinkTiming {
    pub heartbeat_ms: Arc<AtomicU64>,
    pub silence_ms: Arc<AtomicU64>,
    /// Tell the agent of every answer to a ping (a fence counts them, AG-7).
    pub report_pongs: bool,
}

impl LinkTiming {
    /// How often the head is pinged: every heartbeat interval for a fence, which counts from
    /// the last answer; otherwise twice within the silence bound, enough to tell a dead
    /// link from a quiet one (a pong is a frame the head writes: at 10,000 agents, one every
    /// 5 s from each costs the head about 0.06 of a core; `docs/benchmarks.md`).
    fn every(&self) -> Duration {
        let heartbeat_ms = self.heartbeat_ms.load(Ordering::Relaxed).max(10);
        let every_ms = match self.report_pongs {
            true => heartbeat_ms,
            false => heartbeat_ms.max(self.silence_ms.load(Ordering::Relaxed) / PINGS_PER_SILENCE),
        };
        Duration::from_millis(every_ms)
    }

    fn silence(&self) -> Duration {
        Duration::from_millis(self.silence_ms.load(Ordering::Relaxed))
    }
}
/// A failure is logged at most this often (the link retries much faster).
const LOG_EVERY_MS: u64 = 10_000;

/// Keeps a link up until the agent actor stops. A wss:// link verifies the head with `tls`.
pub async fn maintain(
    agent: Addr<NodeAgent>,
    head_url: String,
    credential: Credential,
    tls: Option<Arc<rustls::ClientConfig>>,
    timing: LinkTiming,
) {
    let ws_url = format!("{}/v1/agent", head_url.replacen("http://", "ws://", 1).replacen("https://", "wss://", 1));
    let mut backoff = FIRST_BACKOFF_MS;
    let mut last_logged: Option<std::time::Instant> = None;
    while agent.connected() {
        // A handshake the head never answers (a cut one way) is a failure, not a wait for ever.
        let silence = timing.silence();
        let attempt = tokio::time::timeout(silence, connect(&ws_url, &credential, tls.clone())).await;
        let connected = attempt.unwrap_or_else(|_| Err(format!("no answer within {} ms", silence.as_millis()).into()));
        match connected {
            Ok(socket) => {
                backoff = FIRST_BACKOFF_MS;
                if last_logged.take().is_some() {
                    tracing::info!("reached the head at {head_url} again");
                }
                carry(&agent, socket, &timing, &head_url).await;
                agent.do_send(Unlinked);
            }
            Err(e) if last_logged.is_none_or(|t| t.elapsed() >= Duration::from_millis(LOG_EVERY_MS)) => {
                let trust = crate::tls::Trust { flag: crate::tls::Trust::OWN_FLAG, given: None };
                if let Some(unreadable) = e.downcast_ref::<Unreadable>() {
                    // The head was not asked: the token is to fix here.
                    tracing::warn!("{}; retrying", unreadable.0);
                } else if let Some(refusal) = refused(&*e) {
                    // Reached, and refused: a credential to fix, not a network to wait for.
                    tracing::warn!("the head at {head_url} {}; retrying", refusal.tell(&credential));
                } else {
                    match crate::tls::diagnose("the head", &head_url, &*e, &trust).await {
                        Some(why) => tracing::warn!("cannot reach the head: {why}; retrying"),
                        None => tracing::warn!("cannot reach the head at {head_url}: {e}; retrying"),
                    }
                }
                last_logged = Some(std::time::Instant::now());
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(backoff)).await;
        backoff = (backoff * 2).min((timing.heartbeat_ms.load(Ordering::Relaxed) / 2).max(FIRST_BACKOFF_MS));
    }
}

/// The head's 401 to the WebSocket upgrade: its status, and whether it says the token came
/// from the wrong drawer (`presented` names the client token).
struct Refusal {
    status: tokio_tungstenite::tungstenite::http::StatusCode,
    client_token: bool,
}

impl Refusal {
    /// What the refusal says about the token presented, and how to give the right one.
    fn tell(&self, credential: &Credential) -> String {
        let (status, from) = (self.status, credential.source("FTDRIVE_AGENT_TOKEN"));
        if self.client_token {
            return format!(
                "refused the token from {from} ({status}): that is its client token; an agent presents the agent \
                 token (the `agent-token` file in the head's state dir)"
            );
        }
        let fix = match credential {
            Credential::Given(_) => {
                "set $FTDRIVE_AGENT_TOKEN to the contents of the `agent-token` file in the head's state dir, or \
                 unset it to read that file from --state-dir"
            }
            Credential::Stdin(_) => {
                "give the agent standard input from the `agent-token` file in the head's state dir, or drop \
                 --agent-token-stdin to read that file from --state-dir"
            }
            Credential::File(_) => {
                "that file is another head's: point --state-dir at this head's, or set $FTDRIVE_AGENT_TOKEN to \
                 the contents of its `agent-token` file"
            }
        };
        format!("refused the agent token from {from} ({status}): it is not its agent token; {fix}")
    }
}

/// The credential could not be read: nothing was sent.
#[derive(Debug)]
struct Unreadable(String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreadable {}

/// The head's 401 (or, from an older head, 403) to the WebSocket upgrade, if that is what `e` is.
fn refused(e: &(dyn std::error::Error + 'static)) -> Option<Refusal> {
    match e.downcast_ref::<tokio_tungstenite::tungstenite::Error>()? {
        tokio_tungstenite::tungstenite::Error::Http(response) if matches!(response.status().as_u16(), 401 | 403) => {
            let said: serde_json::Value =
                response.body().as_deref().and_then(|body| serde_json::from_slice(body).ok()).unwrap_or_default();
            let client_token = said["presented"] == "client_token" || response.status().as_u16() == 403;
            Some(Refusal { status: response.status(), client_token })
        }
        _ => None,
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

type LinkError = Box<dyn std::error::Error + Send + Sync>;

async fn connect(
    url: &str,
    credential: &Credential,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Socket, LinkError> {
    let token = credential.read().map_err(Unreadable)?;
    let mut request = url.into_client_request()?;
    let bearer = format!("Bearer {token}").parse().map_err(|_| "the token is not a valid header value".to_string())?;
    request.headers_mut().insert("authorization", bearer);
    let connector = tls.map(tokio_tungstenite::Connector::Rustls);
    // Nagle off: a report sent right after another (an exit after a heartbeat) must not wait
    // until the head has read and acknowledged the first.
    let disable_nagle = true;
    let (socket, _) = tokio_tungstenite::connect_async_tls_with_config(request, None, disable_nagle, connector).await?;
    Ok(socket)
}

/// Relays until the socket closes, a ping has gone unanswered for the silence bound, or the
/// agent lets go of the link. The head is pinged as `LinkTiming::every` says; with a fence
/// (AG-7) the agent hears of each answer.
async fn carry(agent: &Addr<NodeAgent>, socket: Socket, timing: &LinkTiming, head_url: &str) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ToHead>();
    agent.do_send(Linked { tx });
    // Silence is counted from the first ping the head has not answered (nor said anything
    // since): quiet between pings is no silence, so pings may be rare.
    let mut unanswered_since: Option<tokio::time::Instant> = None;
    let mut next_ping = tokio::time::Instant::now() + timing.every();
    loop {
        let silent_at = unanswered_since.map(|asked| asked + timing.silence());
        tokio::select! {
            _ = tokio::time::sleep_until(next_ping) => {
                let now = tokio::time::Instant::now();
                next_ping = now + timing.every();
                unanswered_since.get_or_insert(now);
                if sink.send(Message::Ping(Vec::new().into())).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(silent_at.unwrap_or(next_ping)), if silent_at.is_some() => {
                tracing::warn!(
                    "the head at {head_url} answered nothing for {} ms (no message, no answer to a ping): the link \
                     is taken as lost; reconnecting",
                    timing.silence().as_millis()
                );
                return;
            }
            incoming = stream.next() => {
                let Some(Ok(frame)) = incoming else { return };
                unanswered_since = None;
                match frame {
                    Message::Text(text) => match serde_json::from_str::<ToAgent>(text.as_str()) {
                        Ok(msg) => agent.do_send(FromHead(msg)),
                        Err(e) => tracing::warn!("unreadable message from the head: {e}"),
                    },
                    Message::Ping(data) => {
                        let answered = sink.send(Message::Pong(data)).await;
                        if answered.is_err() {
                            return;
                        }
                    }
                    Message::Pong(_) if timing.report_pongs => agent.do_send(HeadHeard),
                    Message::Close(_) => return,
                    _ => {}
                }
            }
            outgoing = rx.recv() => match outgoing {
                Some(msg) => {
                    let text = serde_json::to_string(&msg).expect("agent messages serialize");
                    if sink.send(Message::Text(text.into())).await.is_err() {
                        return;
                    }
                }
                None => return close(sink, stream).await,
            },
        }
    }
}

/// The agent let go of the link (it is shutting down): the closing handshake, reading until the
/// head's close answers ours, so the head has read everything this agent sent before the socket
/// goes away. Closing at once lost an idle agent's last message, its notice, in three tries of six.
async fn close(mut sink: SplitSink<Socket, Message>, mut stream: SplitStream<Socket>) {
    if sink.send(Message::Close(None)).await.is_err() {
        return;
    }
    while let Some(Ok(msg)) = stream.next().await {
        if matches!(msg, Message::Close(_)) {
            return;
        }
    }
}
