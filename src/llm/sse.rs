//! Server-sent events: split a byte stream into `(event, data)` pairs, and the `error:`
//! field llama.cpp's older servers send a failure in.
//!
//! Bytes are buffered until a full line arrives, so a UTF-8 character or a JSON document
//! split across network chunks is reassembled before it is parsed.

/// One SSE event: its `event:` name (empty when absent) and its joined `data:` lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
    /// An `error:` field (not standard SSE: llama.cpp's older servers end a failed stream
    /// with `error: {…}` then `data: [DONE]`).
    pub error: Option<String>,
}

/// Incremental SSE parser.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
    current: Event,
    has_data: bool,
}

impl Parser {
    /// Feed a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if self.has_data || !self.current.event.is_empty() || self.current.error.is_some() {
                    out.push(std::mem::take(&mut self.current));
                    self.has_data = false;
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "event" => self.current.event = value.to_string(),
                "error" => self.current.error = Some(value.to_string()),
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        out
    }

    /// The stream ended: an event not followed by a blank line still counts.
    pub fn finish(&mut self) -> Option<Event> {
        if !self.buf.is_empty() {
            let mut rest = std::mem::take(&mut self.buf);
            rest.push(b'\n');
            let mut events = self.push(&rest);
            if let Some(e) = events.pop() {
                return Some(e);
            }
        }
        if self.has_data || self.current.error.is_some() {
            self.has_data = false;
            return Some(std::mem::take(&mut self.current));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembles_events_split_across_chunks() {
        let full = "event: message_start\ndata: {\"a\":\"h\u{e9}\"}\n\n: comment\ndata: [DONE]\n\n";
        let mut p = Parser::default();
        let mut events = Vec::new();
        for chunk in full.as_bytes().chunks(3) {
            events.extend(p.push(chunk));
        }
        assert_eq!(
            events,
            vec![
                Event {
                    event: "message_start".into(),
                    data: "{\"a\":\"h\u{e9}\"}".into(),
                    error: None,
                },
                Event {
                    event: String::new(),
                    data: "[DONE]".into(),
                    error: None,
                },
            ]
        );
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn an_error_field_is_an_event_of_its_own() {
        let mut p = Parser::default();
        let events = p.push(b"error: {\"code\":400}\n\ndata: [DONE]\n\n");
        assert_eq!(events[0].error.as_deref(), Some("{\"code\":400}"));
        assert_eq!(events[0].data, "");
        assert_eq!(events[1].data, "[DONE]");
        assert_eq!(events[1].error, None);
        let mut p = Parser::default();
        assert!(p.push(b"error: cut").is_empty());
        assert_eq!(p.finish().and_then(|e| e.error).as_deref(), Some("cut"));
    }
}
