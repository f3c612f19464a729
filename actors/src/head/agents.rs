//! Agent sessions: one WebSocket per connected agent, relaying JSON messages between it and
//! the `HeadActor`. A session knows its node once the agent registers.

use super::api::{AgentAuthorized, ApiState};
use super::{AgentGone, FromAgent};
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::Message;
use ftdrive::protocol::{ToAgent, ToHead};
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// Messages queued for one agent. An agent that lets this many pile up loses its binding
/// and registers again once it catches up; the head never waits for it.
pub(super) const SESSION_QUEUE_MESSAGES: usize = 16_384;

/// Largest WebSocket message an agent may send (a registration listing thousands of
/// attempts fits many times over).
const MAX_AGENT_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

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
    let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
    let (tx, mut outgoing) = tokio::sync::mpsc::channel::<ToAgent>(SESSION_QUEUE_MESSAGES);
    actix_web::rt::spawn(async move {
        let mut node = None;
        loop {
            tokio::select! {
                msg = incoming.next() => match msg {
                    Some(Ok(Message::Text(text))) => match serde_json::from_str::<ToHead>(&text) {
                        Ok(msg) => {
                            node.get_or_insert_with(|| msg.node().clone());
                            head.do_send(FromAgent { session: id, tx: tx.clone(), msg });
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
