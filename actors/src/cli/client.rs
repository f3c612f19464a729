//! A small client for the head's HTTP API, mapping failures onto the command line's errors.

use super::args::HeadUrl;
use super::error::CliError;
use crate::paths;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

/// How long connecting to the head may take: a head's machine that is gone answers no SYN,
/// and the kernel's own limit is minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request may wait for its whole answer (an event stream, for its first line):
/// a stopped head accepts the connection in the kernel and never answers.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Silent keep-alive intervals after which an event stream is taken as lost: a head sends a
/// blank line whenever it was quiet for the interval it names (`x-ftdrive-keepalive-ms`).
const KEEPALIVES_MISSED: u32 = 3;

/// An NDJSON stream's lines, as they arrive (keep-alive lines left out).
pub type Lines = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<String, CliError>> + Send>>;

/// Whether a request changes something at the head (a submission, a stop): one that broke
/// after it was sent may have been carried out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    None,
    Acts,
}

pub struct Client {
    base: String,
    token: String,
    /// Where the token came from (`$FTDRIVE_TOKEN`, a file), named when the head refuses it.
    token_from: String,
    /// The CA file given with `--ca-cert`, named when the head's certificate is not its.
    ca_cert: Option<std::path::PathBuf>,
    http: reqwest::Client,
}

/// Where a read of a log starts: at a byte offset, or so many lines before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFrom {
    Offset(u64),
    Tail(u32),
}

/// A slice of an attempt's log.
pub struct LogChunk {
    pub bytes: bytes::Bytes,
    pub attempt: u32,
    pub node: String,
    pub running: bool,
    pub next_offset: u64,
}

impl Client {
    /// For a head at `base`, a URL with scheme and no trailing slash (`head_base_url`'s).
    pub fn new(base: &str, token: String, token_from: String) -> Client {
        let http = bounded(reqwest::Client::builder()).build().expect("a client without TLS settings builds");
        Client { base: base.to_string(), token, token_from, ca_cert: None, http }
    }

    /// For `--head URL` (or `$FTDRIVE_HEAD`), with the token from `$FTDRIVE_TOKEN` or the
    /// token file in the default state dir; an https:// head is verified with `--ca-cert` (or
    /// `$FTDRIVE_CA_CERT`), else the public roots.
    pub fn connect(head: &HeadUrl) -> Result<Client, CliError> {
        let url = super::head_url(head.head.clone())?;
        // The flags first: a bad --ca-cert is named before a missing token is looked for.
        let https = if url.starts_with("https://") {
            let bad_ca = |e: crate::tls::TlsError| CliError::BadInput(format!("--ca-cert: {e}"));
            let builder = crate::tls::http_client(head.ca_cert.as_deref()).map_err(bad_ca)?;
            Some(bounded(builder).build().map_err(|e| CliError::Failed(format!("cannot set up HTTPS: {e}")))?)
        } else {
            None
        };
        let (token, token_from) = paths::client_token(&paths::default_state_dir()).map_err(CliError::BadInput)?;
        let mut client = Client::new(&url, token, token_from);
        if let Some(http) = https {
            client.http = http;
            client.ca_cert = head.ca_cert.clone();
        }
        Ok(client)
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, CliError> {
        self.send_as(request, Effect::None).await
    }

    async fn send_as(&self, request: reqwest::RequestBuilder, effect: Effect) -> Result<reqwest::Response, CliError> {
        let response = match request.bearer_auth(&self.token).send().await {
            Ok(response) => response,
            // Sent, and then the connection broke or the answer was late: the head may have
            // done it. "Is the head running?" sent a script to submit the job again.
            Err(e) if effect == Effect::Acts && !e.is_connect() => {
                return Err(CliError::Unreachable(format!(
                    "the head at {} took the request, and then {}: it may have done it; look (`ftdrive status`) \
                     before sending it again",
                    self.base,
                    if e.is_timeout() {
                        format!("sent no answer within {} s", REQUEST_TIMEOUT.as_secs())
                    } else {
                        format!("the connection broke ({})", root_cause(&e))
                    }
                )))
            }
            Err(e) => return Err(self.unreachable(e).await),
        };
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let from_agent = response
            .headers()
            .get(crate::node::logs::SERVER_HEADER)
            .is_some_and(|v| v.as_bytes() == crate::node::logs::AGENT_SERVER.as_bytes());
        if from_agent {
            return Err(CliError::Unreachable(format!(
                "{} is an ftdrive agent's log server, not the head (it answered {status}): pass the head's address \
                 with --head URL or $FTDRIVE_HEAD (`ftdrive head` prints it, and writes it to head.url in its state dir)",
                self.base
            )));
        }
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let Some(message) = body["error"].as_str().map(str::to_string) else {
            // Every answer of an ftdrive head names its error: something else answered.
            return Err(CliError::Unreachable(format!(
                "{} answered {status} without an ftdrive error: is it an ftdrive head? pass the head's address \
                 with --head URL or $FTDRIVE_HEAD",
                self.base
            )));
        };
        Err(match status {
            reqwest::StatusCode::UNAUTHORIZED => CliError::BadInput(self.refused_token(&body)),
            reqwest::StatusCode::FORBIDDEN => {
                CliError::BadInput(format!("the head refused the token from {}: {message}", self.token_from))
            }
            reqwest::StatusCode::BAD_GATEWAY => CliError::Unavailable(message),
            // The head is stopping (its state database failed it) and changed nothing: as a
            // head that cannot be reached, a follower waits for it to be back.
            reqwest::StatusCode::SERVICE_UNAVAILABLE => CliError::Unreachable(message),
            // At a bound that passes (followers at once): nothing to fix in the command.
            reqwest::StatusCode::TOO_MANY_REQUESTS => CliError::Unavailable(message),
            // Refused as asked (a bad spec, an unknown job, a node that is not DEAD): the command
            // as given cannot run, and the head changed nothing.
            status if status.is_client_error() => CliError::BadInput(message),
            _ => CliError::Failed(message),
        })
    }

    /// A 401: the token is not this head's client token. Says where it came from, whether it
    /// is the head's agent token, and how to give the right one.
    fn refused_token(&self, answer: &Value) -> String {
        if answer["presented"] == "agent_token" {
            return format!(
                "the head at {} refused the token from {}: it is its agent token, which opens only the agent \
                 channel; give its client token, the `token` file in its state dir",
                self.base, self.token_from
            );
        }
        let fix = if self.token_from == paths::CLIENT_TOKEN_VAR {
            "set $FTDRIVE_TOKEN to the contents of the `token` file in the head's state dir, or unset it to use \
             that file from the default state dir"
                .to_string()
        } else {
            format!(
                "that file is another head's; set $FTDRIVE_TOKEN to the contents of the `token` file in the state \
                 dir of the head at {}",
                self.base
            )
        };
        format!(
            "the head at {} refused the token from {}: it is not its client token; {fix}",
            self.base, self.token_from
        )
    }

    /// Why the head did not answer: TLS's doing when it can be told (a wrong scheme, a
    /// certificate not trusted) — a command to fix, not a head to wait for (exit 2) — else
    /// the error and where to look.
    async fn unreachable(&self, e: reqwest::Error) -> CliError {
        let trust = crate::tls::Trust { flag: crate::tls::Trust::OWN_FLAG, given: self.ca_cert.as_deref() };
        if e.is_timeout() {
            return self.silent(if e.is_connect() { CONNECT_TIMEOUT } else { REQUEST_TIMEOUT });
        }
        if let Some(why) = crate::tls::diagnose("the head", &self.base, &e, &trust).await {
            return CliError::BadInput(format!("cannot reach the head: {why}"));
        }
        CliError::Unreachable(format!(
            "cannot reach the head at {}: {}\n  is `ftdrive head` running? pass --head URL or set $FTDRIVE_HEAD",
            self.base,
            root_cause(&e)
        ))
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        Ok(self.get_with_header(path, None).await?.0)
    }

    /// Like `get`, with the value of the answer's header `header`, if named (None without one).
    pub async fn get_with_header<T: DeserializeOwned>(
        &self,
        path: &str,
        header: Option<&str>,
    ) -> Result<(T, Option<String>), CliError> {
        let response = self.send(self.http.get(format!("{}{path}", self.base)).timeout(REQUEST_TIMEOUT)).await?;
        let value = header.and_then(|h| response.headers().get(h)).and_then(|v| v.to_str().ok()).map(str::to_string);
        let body =
            response.json().await.map_err(|e| CliError::Failed(format!("unexpected answer from the head: {e}")))?;
        Ok((body, value))
    }

    pub async fn post<T: DeserializeOwned>(&self, path: &str, body: Value) -> Result<T, CliError> {
        let request = self.http.post(format!("{}{path}", self.base)).json(&body).timeout(REQUEST_TIMEOUT);
        let response = self.send_as(request, Effect::Acts).await?;
        response.json().await.map_err(|e| CliError::Failed(format!("unexpected answer from the head: {e}")))
    }

    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        let request = self.http.delete(format!("{}{path}", self.base)).timeout(REQUEST_TIMEOUT);
        let response = self.send_as(request, Effect::Acts).await?;
        response.json().await.map_err(|e| CliError::Failed(format!("unexpected answer from the head: {e}")))
    }

    /// An NDJSON stream, line by line. A stream silent for `KEEPALIVES_MISSED` of the
    /// keep-alive intervals its head names ends with `Unreachable`, as one cut off does.
    pub async fn lines(&self, path: &str) -> Result<Lines, CliError> {
        let request = self.send(self.http.get(format!("{}{path}", self.base)));
        let response = match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
            Ok(response) => response?,
            Err(_) => return Err(self.silent(REQUEST_TIMEOUT)),
        };
        let keepalive_ms = response
            .headers()
            .get(crate::head::KEEPALIVE_HEADER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .filter(|ms| *ms > 0);
        // A head that names no interval sends no keep-alive: its silence tells nothing.
        let silence_limit = keepalive_ms.map(|ms| Duration::from_millis(ms) * KEEPALIVES_MISSED);
        let bytes = response.bytes_stream();
        let base = self.base.clone();
        let lines = futures_util::stream::unfold((bytes, Vec::<u8>::new()), move |(mut bytes, mut buffer)| {
            let base = base.clone();
            async move {
                loop {
                    if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buffer.drain(..=end).collect();
                        let text = String::from_utf8_lossy(&line).trim_end().to_string();
                        if text.is_empty() {
                            continue; // a keep-alive
                        }
                        return Some((Ok(text), (bytes, buffer)));
                    }
                    let next = match silence_limit {
                        Some(limit) => match tokio::time::timeout(limit, bytes.next()).await {
                            Ok(next) => next,
                            Err(_) => return Some((Err(silent_stream(&base, limit)), (bytes, buffer))),
                        },
                        None => bytes.next().await,
                    };
                    match next {
                        Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                        Some(Err(e)) => {
                            let broke = format!("its answer broke off: {}", root_cause(&e));
                            return Some((Err(CliError::Unreachable(broke)), (bytes, buffer)));
                        }
                        None => return None,
                    }
                }
            }
        });
        Ok(Box::pin(lines))
    }

    fn silent(&self, waited: Duration) -> CliError {
        CliError::Unreachable(format!(
            "the head at {} did not answer within {} s: is it stopped, overloaded or cut off?",
            self.base,
            waited.as_secs()
        ))
    }

    pub async fn log_chunk(
        &self,
        job: &str,
        actor: u32,
        attempt: Option<u32>,
        local_rank: Option<u32>,
        at: LogFrom,
    ) -> Result<LogChunk, CliError> {
        let (offset, from) = match at {
            LogFrom::Offset(offset) => (offset, format!("offset={offset}")),
            LogFrom::Tail(lines) => (0, format!("tail={lines}")),
        };
        let mut url = format!("{}/v1/jobs/{job}/logs?actor={actor}&{from}", self.base);
        if let Some(attempt) = attempt {
            url.push_str(&format!("&attempt={attempt}"));
        }
        if let Some(local_rank) = local_rank {
            url.push_str(&format!("&local_rank={local_rank}"));
        }
        let response = self.send(self.http.get(url).timeout(REQUEST_TIMEOUT)).await?;
        let header =
            |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let (attempt, node, running, next) = (
            header("x-ftdrive-attempt"),
            header("x-ftdrive-node"),
            header("x-ftdrive-running"),
            header("x-ftdrive-next-offset"),
        );
        let bytes = response
            .bytes()
            .await
            .map_err(|e| CliError::Unreachable(format!("lost the head mid-answer: {}", root_cause(&e))))?;
        Ok(LogChunk {
            attempt: attempt.parse().unwrap_or(0),
            node,
            running: running == "true",
            next_offset: next.parse().unwrap_or(offset + bytes.len() as u64),
            bytes,
        })
    }
}

/// Connect and keep-alive limits for a client of the head (timeouts per request are set on
/// each, as an event stream must have none).
/// How long a connection may sit idle and still be used again: the head closes one idle for
/// 5 s (actix-web's keep-alive), and a request sent on it as it closes breaks ("connection
/// closed before message completed") — `ftdrive logs j1 | less` stopped after its first MiB.
const POOL_IDLE: Duration = Duration::from_secs(2);

fn bounded(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    builder.connect_timeout(CONNECT_TIMEOUT).tcp_keepalive(Duration::from_secs(30)).pool_idle_timeout(POOL_IDLE)
}

fn silent_stream(base: &str, waited: Duration) -> CliError {
    CliError::Unreachable(format!(
        "the head at {base} sent nothing for {:.1} s, not even the keep-alive it sends when quiet: is it stopped, \
         or cut off?",
        waited.as_secs_f64()
    ))
}

/// What actually went wrong, from the bottom of an error's chain: reqwest's own message
/// ("error sending request for url", "error decoding response body") names the step, while
/// the last source says why ("Connection refused", "connection closed before message
/// completed").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(source) = last.source() {
        last = source;
    }
    last.to_string()
}
