//! Server-sent events: split a byte stream into `(event, data)` pairs.
//!
//! Bytes are buffered until a full line arrives, so a UTF-8 character or a JSON document
//! split across network chunks is reassembled before it is parsed.

/// One SSE event: its `event:` name (empty when absent) and its joined `data:` lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
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
                if self.has_data || !self.current.event.is_empty() {
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
        if self.has_data {
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
                    data: "{\"a\":\"h\u{e9}\"}".into()
                },
                Event {
                    event: String::new(),
                    data: "[DONE]".into()
                },
            ]
        );
        assert_eq!(p.finish(), None);
    }
}
