//! A server-sent events decoder that accepts bytes in pieces cut anywhere: inside a line,
//! between `\r` and `\n`, inside a multi-byte UTF-8 character.
//!
//! Hand-written rather than a crate: the usable SSE crates either wrap a whole client (with
//! reconnection we must not do: a model call is not idempotent) or pull a parser
//! combinator library for forty lines of line splitting.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, if any (Anthropic names every event; OpenAI names none).
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Incremental decoder: feed chunks with [`SseDecoder::push`], take complete events.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    pending: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A fresh decoder.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk; returns the events it completed, in order.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + offset;
            let mut line = &self.pending[start..end];
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            // Lines are complete here, so a character split across chunks is whole again.
            let line = String::from_utf8_lossy(line).into_owned();
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
            start = end + 1;
        }
        self.pending.drain(..start);
        events
    }

    /// Whether bytes of an unfinished line or event are held (a stream that ends here was
    /// cut short).
    #[cfg(test)]
    fn is_mid_event(&self) -> bool {
        !self.pending.is_empty() || self.has_data
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.has_data {
                self.event = None;
                return None;
            }
            self.has_data = false;
            return Some(SseEvent { event: self.event.take(), data: std::mem::take(&mut self.data) });
        }
        if line.starts_with(':') {
            // A comment: keep-alives look like this.
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            // `id` and `retry` serve reconnection, which a model call never does.
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = ": keep-alive\r\n\r\nevent: message_start\r\ndata: {\"a\":\"é—😀\"}\r\n\r\ndata: line one\ndata: line two\n\n: ping\n\ndata: [DONE]\n\n";

    fn decode_in_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            let cut = cut.clamp(start, bytes.len());
            events.extend(decoder.push(&bytes[start..cut]));
            start = cut;
        }
        assert!(!decoder.is_mid_event());
        events
    }

    #[test]
    fn every_cut_point_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        let whole = decode_in_pieces(bytes, &[]);
        assert_eq!(
            whole,
            [
                SseEvent { event: Some("message_start".into()), data: "{\"a\":\"é—😀\"}".into() },
                SseEvent { event: None, data: "line one\nline two".into() },
                SseEvent { event: None, data: "[DONE]".into() },
            ]
        );
        for first in 0..bytes.len() {
            for second in first..bytes.len().min(first + 7) {
                assert_eq!(decode_in_pieces(bytes, &[first, second]), whole, "cut at {first} and {second}");
            }
        }
        let byte_by_byte: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(decode_in_pieces(bytes, &byte_by_byte), whole);
    }

    #[test]
    fn an_unterminated_event_is_reported_as_mid_event() {
        let mut decoder = SseDecoder::new();
        assert!(decoder.push(b"data: {\"partial\"").is_empty());
        assert!(decoder.is_mid_event());
        let mut decoder = SseDecoder::new();
        assert!(decoder.push(b"data: x\n").is_empty());
        assert!(decoder.is_mid_event(), "data without its blank line was not dispatched");
    }
}
