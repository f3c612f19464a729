//! Agent sessions: one WebSocket per connected agent, relaying JSON messages between it and
//! the `HeadActor`. A session knows its node once the agent registers. What agents have sent
//! and the head actor has not yet handled is bounded across all sessions (`AgentBacklog`).

use super::api::{AgentAuthorized, ApiState};
use super::{AgentGone, FromAgent};
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::Message;
use ftdrive::protocol::{ToAgent, ToHead};
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// Messages queued for one agent. An agent that lets this many pile up loses its binding
/// and registers again once it catches up; the head never waits for it.
pub(super) const SESSION_QUEUE_MESSAGES: usize = 16_384;

/// Agent messages handed to the head actor and not yet handled, across all sessions. A head
/// that falls this far behind (starved, stalled) stops reading agents' sockets until it
/// catches up, so that TCP pushes back on the agents instead of its mailbox growing without
/// limit. Ten heartbeat intervals of 10,000 agents fit with room to spare.
pub(super) const MAX_AGENT_MESSAGES_QUEUED: usize = 131_072;

/// Largest WebSocket message an agent may send (a registration listing thousands of
/// attempts fits many times over).
const MAX_AGENT_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// The count of queued agent messages, and the sessions waiting for it to drop.
pub(super) struct AgentBacklog {
    limit: usize,
    queued: AtomicUsize,
    drained: Notify,
}

/// One queued message's place in the backlog, given back when the message is dropped —
/// handled by the head actor, or discarded with its mailbox.
pub struct Queued(Arc<AgentBacklog>);

impl AgentBacklog {
    pub(super) fn new(limit: usize) -> Arc<AgentBacklog> {
        Arc::new(AgentBacklog { limit, queued: AtomicUsize::new(0), drained: Notify::new() })
    }

    fn queue(self: &Arc<Self>) -> Queued {
        self.queued.fetch_add(1, Ordering::AcqRel);
        Queued(self.clone())
    }

    /// Returns once the backlog is under its limit.
    async fn room(&self) {
        if self.queued.load(Ordering::Acquire) < self.limit {
            return; // the common case, without touching the waiters' list
        }
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable(); // a drop from here on wakes us
            if self.queued.load(Ordering::Acquire) < self.limit {
                return;
            }
            drained.await;
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.0.queued.fetch_sub(1, Ordering::AcqRel) == self.0.limit {
            self.0.drained.notify_waiters();
        }
    }
}

pub(super) async fn channel(
    _: AgentAuthorized,
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<ApiState>,
) -> actix_web::Result<HttpResponse> {
    let (response, mut session, incoming) = actix_ws::handle(&req, body).map_err(|e| {
        super::ApiError::BadRequest(format!(
            "the agent channel is a WebSocket ({e}); `ftdrive node` connects to it, nothing else should"
        ))
    })?;
    let mut incoming = incoming.max_frame_size(MAX_AGENT_MESSAGE_BYTES);
    let head = state.head.clone();
    let backlog = state.agent_backlog.clone();
    let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
    let (tx, mut outgoing) = tokio::sync::mpsc::channel::<ToAgent>(SESSION_QUEUE_MESSAGES);
    let stopping = super::api::stopping(state.closing.clone());
    actix_web::rt::spawn(async move {
        let mut node = None;
        tokio::pin!(stopping);
        loop {
            tokio::select! {
                // A stopping head closes the channel: the agent then reconnects to the next one.
                _ = &mut stopping => break,
                msg = incoming.next() => match msg {
                    Some(Ok(Message::Text(text))) => match serde_json::from_str::<ToHead>(&text) {
                        Ok(msg) => {
                            node.get_or_insert_with(|| msg.node().clone());
                            head.do_send(FromAgent { session: id, tx: tx.clone(), msg, queued: backlog.queue() });
                            backlog.room().await;
                        }
                        Err(e) => {
                            let refusal = ToAgent::Refused { reason: format!("unreadable message: {e}"), register_again: false };
                            let _ = tx.try_send(refusal);
                        }
                    },
                    Some(Ok(Message::Ping(bytes))) => {
                        if session.pong(&bytes).await.is_err() {
                            break;
                        }
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => {}
                },
                out = outgoing.recv() => match out {
                    Some(msg) => {
                        let text = serde_json::to_string(&msg).expect("head messages serialize");
                        if session.text(text).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
            }
        }
        head.do_send(AgentGone { session: id, node });
        let _ = session.close(None).await;
    });
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A full backlog holds a session back until a queued message is handled.
    #[tokio::test]
    async fn a_full_backlog_waits_until_a_message_is_handled() {
        let backlog = AgentBacklog::new(2);
        let first = backlog.queue();
        backlog.room().await; // one of two: room left
        let second = backlog.queue();
        let waiting = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.room().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "at its limit the backlog holds the session back");
        drop(first);
        tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("woken").unwrap();
        drop(second);
        assert_eq!(backlog.queued.load(Ordering::Acquire), 0);
    }
}
