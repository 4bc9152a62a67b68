//! A webhook receiver on loopback: records every request and answers with the status its
//! script says. HTTP/1.1 with keep-alive, enough for the service's client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: HashMap<String, String>,
    pub body: String,
    pub received_at: chrono::DateTime<chrono::Utc>,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("json body")
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// Verifies the Standard Webhooks signature with the `standardwebhooks` crate.
    pub fn verify(&self, secret: &str) -> Result<(), String> {
        let mut headers = http::HeaderMap::new();
        for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            headers.insert(
                name,
                self.header(name).parse().map_err(|_| name.to_owned())?,
            );
        }
        standardwebhooks::Webhook::new(secret)
            .map_err(|e| e.to_string())?
            .verify(self.body.as_bytes(), &headers)
            .map_err(|e| e.to_string())
    }
}

type Script = Box<dyn Fn(usize) -> u16 + Send + Sync>;

#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<Script>>,
}

impl Receiver {
    /// Answers 200 until told otherwise.
    pub async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let receiver = Receiver {
            url,
            received: Arc::default(),
            script: Arc::new(Mutex::new(Box::new(|_| 200))),
        };
        let r = receiver.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let r = r.clone();
                tokio::spawn(async move {
                    let _ = r.serve(stream).await;
                });
            }
        });
        receiver
    }

    /// How many requests arrived.
    pub fn len(&self) -> usize {
        self.received.lock().expect("received").len()
    }

    /// Takes what arrived so far, leaving nothing.
    #[allow(dead_code)] // the webhook benchmark's
    pub fn take(&self) -> Vec<Received> {
        std::mem::take(&mut *self.received.lock().expect("received"))
    }

    /// The status of the n-th request (from 0) from now on; 0 means never answer.
    pub fn answer(&self, script: impl Fn(usize) -> u16 + Send + Sync + 'static) {
        *self.script.lock().expect("script") = Box::new(script);
    }

    /// How many requests arrived, and how many distinct `webhook-id`s they carried: equal
    /// when no event was delivered twice.
    #[allow(dead_code)] // not every test target that includes this file checks duplicates
    pub fn deliveries_and_distinct_ids(&self) -> (usize, usize) {
        let got = self.received();
        let ids: std::collections::HashSet<&str> =
            got.iter().map(|r| r.header("webhook-id")).collect();
        (got.len(), ids.len())
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("received").clone()
    }

    /// Waits until `done` holds for what was received, or panics after `limit`.
    pub async fn wait_for(
        &self,
        limit: Duration,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let started = std::time::Instant::now();
        loop {
            let got = self.received();
            if done(&got) {
                return got;
            }
            if started.elapsed() > limit {
                panic!(
                    "receiver: {what} not seen in {limit:?}; got {} requests",
                    got.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn serve(&self, stream: tokio::net::TcpStream) -> std::io::Result<()> {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_owned();
            let path = parts.next().unwrap_or_default().to_owned();
            let mut headers = HashMap::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).await?;
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
                }
            }
            let length: usize = headers
                .get("content-length")
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; length];
            reader.read_exact(&mut body).await?;
            let n = {
                let mut received = self.received.lock().expect("received");
                received.push(Received {
                    method,
                    path,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                    received_at: chrono::Utc::now(),
                });
                received.len() - 1
            };
            let status = (self.script.lock().expect("script"))(n);
            if status == 0 {
                // A black hole: never answers, the caller times out.
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return Ok(());
            }
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"
            );
            write.write_all(reply.as_bytes()).await?;
        }
    }
}
