//! Reaching a running gateway's admin API, or the store when no gateway runs.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::config::Config;
use crate::store::{SledStore, Store, StoreError, holder};

/// Where a CLI command does its work.
pub enum Target {
    /// A gateway runs: talk to its admin API.
    Remote {
        base: String,
        token: String,
        http: reqwest::Client,
    },
    /// No gateway runs: the store, opened directly.
    Local(Arc<dyn Store>),
}

impl Target {
    /// [`Target::find`] for commands that only read or change what is there: without a
    /// store (no gateway ever ran with this config) they fail, instead of making an empty
    /// one where the config points (a wrong `--config` would look like "nothing there").
    pub async fn find_existing(config: &Config) -> anyhow::Result<Target> {
        let store = config.gateway.data_dir.join("store");
        if !store.exists() {
            bail!(
                "no store at {}: no gateway has run with this config yet (is --config right?)",
                store.display()
            );
        }
        Self::find(config).await
    }

    pub async fn find(config: &Config) -> anyhow::Result<Target> {
        let dir = &config.gateway.data_dir;
        // The store first: when it opens, no gateway runs, and the token is sent nowhere
        // (an `admin.addr` a crashed gateway left may name a port another program has now).
        let in_use = match SledStore::open_unless_locked(dir) {
            Ok(s) => return Ok(Target::Local(Arc::new(s))),
            Err(StoreError::Locked(in_use)) => in_use,
            Err(e) => return Err(e).context("opening the store"),
        };
        // Held by another command (an open `switchboard chat` prompt): no admin API to go
        // through, whatever address a gateway that ran before left behind.
        if holder::read(dir).is_some_and(|h| h.is_command()) {
            bail!("{in_use}");
        }
        let Some((addr, token)) = crate::http::admin::running_at(dir) else {
            bail!("{in_use}, and no gateway admin address is written there (one starting?)");
        };
        let http = reqwest::Client::builder()
            // Longer than the gateway waits for a reply (`chat`): it answers first.
            .timeout(crate::http::api::REPLY_TIMEOUT + Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        let base = format!("http://{addr}");
        let status = http
            .get(format!("{base}/admin/ping"))
            .bearer_auth(&token)
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .map(|r| r.status());
        match status {
            Ok(s) if s.is_success() => Ok(Target::Remote { base, token, http }),
            Ok(reqwest::StatusCode::UNAUTHORIZED) => bail!(
                "the running gateway's admin API refused the token in {} (HTTP 401): was the \
                 file replaced while it runs? Restart the gateway",
                dir.join("admin.token").display()
            ),
            _ => bail!("{in_use}, but no gateway admin API answers at {addr}"),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let Target::Remote { base, token, http } = self else {
            bail!("not connected to a gateway");
        };
        let mut rb = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(token);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| anyhow!("admin API: {}", e.without_url()))?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            match v.get("error").and_then(Value::as_str) {
                Some(msg) => bail!("{msg}"),
                None => bail!("the gateway's admin API answered HTTP {status}"),
            }
        }
        Ok(v)
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::DELETE, path, None).await
    }
}
