//! Reaching a running gateway's admin API, or the store when no gateway runs.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::config::Config;
use crate::store::{SledStore, Store, StoreError};

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
    pub async fn find(config: &Config) -> anyhow::Result<Target> {
        let dir = &config.gateway.data_dir;
        if let Some((addr, token)) = crate::http::admin::running_at(dir) {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(600))
                .connect_timeout(Duration::from_secs(2))
                .build()?;
            let base = format!("http://{addr}");
            let alive = http
                .get(format!("{base}/admin/sessions"))
                .bearer_auth(&token)
                .timeout(Duration::from_secs(3))
                .send()
                .await
                .is_ok();
            if alive {
                return Ok(Target::Remote { base, token, http });
            }
        }
        match SledStore::open(dir) {
            Ok(s) => Ok(Target::Local(Arc::new(s))),
            Err(StoreError::Locked(_)) => bail!(
                "the store in {} is in use by a running gateway, but its admin API did not answer",
                dir.display()
            ),
            Err(e) => Err(e).context("opening the store"),
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
            let msg = v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("request failed");
            bail!("{msg}");
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
