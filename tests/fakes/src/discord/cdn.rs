//! The fake's CDN: attachment files under `/attachments/{channel}/{id}/{filename}`, as
//! `cdn.discordapp.com` serves them (no token needed). Requests are recorded.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{FakeDiscord, Shared};

/// Files served and requests seen.
#[derive(Default)]
pub(crate) struct Cdn {
    /// Path → (bytes, content type).
    files: HashMap<String, (Vec<u8>, String)>,
    gets: Vec<FileGet>,
}

/// A request for a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileGet {
    pub path: String,
    /// `Authorization` as sent: the CDN needs none, so `None` is right.
    pub authorization: Option<String>,
}

pub(crate) async fn serve(
    AxState(shared): AxState<Arc<Shared>>,
    Path((channel, id, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let path = format!("attachments/{channel}/{id}/{name}");
    let found = {
        let mut st = shared.lock();
        st.cdn.gets.push(FileGet {
            path: path.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
        st.cdn.files.get(&path).cloned()
    };
    shared.bump();
    match found {
        Some((bytes, content_type)) => {
            ([(header::CONTENT_TYPE, content_type)], bytes).into_response()
        }
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

impl FakeDiscord {
    /// Serve `bytes` as an attachment and return its object, as Discord sends it in a
    /// message, its URL on this fake.
    pub fn add_attachment(
        &self,
        id: u64,
        filename: &str,
        bytes: &[u8],
        content_type: &str,
    ) -> Value {
        let path = format!("attachments/1/{id}/{filename}");
        let url = format!(
            "{}/{}?ex=1&is=2&hm=3",
            self.base_url,
            path.replace(' ', "%20")
        );
        self.shared
            .lock()
            .cdn
            .files
            .insert(path, (bytes.to_vec(), content_type.to_string()));
        json!({
            "id": id.to_string(),
            "filename": filename,
            "size": bytes.len(),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        })
    }

    /// Every file request, in order.
    pub fn file_gets(&self) -> Vec<FileGet> {
        self.shared.lock().cdn.gets.clone()
    }
}
