//! A leading `<think>…</think>` block taken out of the content as it streams: reasoning
//! that servers without a reasoning parser (vLLM, SGLang, Groq's `reasoning_format=raw`,
//! Qwen3 and R1 distills on Ollama) leave in `delta.content`. It is neither shown nor
//! kept. Only a block at the very start counts (after whitespace): a `<think>` later on
//! is the model's ordinary text.

use std::borrow::Cow;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Where the content stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet, or the beginning of an opening tag.
    #[default]
    Start,
    /// Inside the block.
    Inside,
    /// Just after the block: the whitespace that separates it is not shown either.
    After,
    /// The answer proper: passed on as it comes.
    Pass,
}

/// Filters one answer's content deltas.
#[derive(Debug, Default)]
pub(super) struct Think {
    state: State,
    /// Text held back until it is known whether it is shown: leading whitespace or a
    /// partial opening tag (`Start`), a partial closing tag (`Inside`).
    held: String,
}

impl Think {
    /// Take one content delta; returns what of it (and of what was held) is to be shown:
    /// once past the block, the delta itself.
    pub fn push<'a>(&mut self, delta: &'a str) -> Cow<'a, str> {
        if self.state == State::Pass {
            return Cow::Borrowed(delta);
        }
        Cow::Owned(self.held_back(delta))
    }

    fn held_back(&mut self, delta: &str) -> String {
        self.held.push_str(delta);
        loop {
            match self.state {
                State::Start => {
                    let text = self.held.trim_start();
                    if let Some(reasoning) = text.strip_prefix(OPEN) {
                        self.held = reasoning.to_string();
                        self.state = State::Inside;
                        continue;
                    }
                    if text.is_empty() || OPEN.starts_with(text) {
                        return String::new();
                    }
                    self.state = State::Pass;
                    return std::mem::take(&mut self.held);
                }
                State::Inside => {
                    if let Some(at) = self.held.find(CLOSE) {
                        self.held.drain(..at + CLOSE.len());
                        self.state = State::After;
                        continue;
                    }
                    // Only what may begin the closing tag is kept (ASCII, so the cut is
                    // on a character boundary).
                    let keep = (1..CLOSE.len())
                        .rev()
                        .find(|&n| self.held.ends_with(&CLOSE[..n]))
                        .unwrap_or(0);
                    self.held.drain(..self.held.len() - keep);
                    return String::new();
                }
                State::After => {
                    let answer = self.held.trim_start().to_string();
                    self.held.clear();
                    if !answer.is_empty() {
                        self.state = State::Pass;
                    }
                    return answer;
                }
                State::Pass => return std::mem::take(&mut self.held),
            }
        }
    }

    /// The content ended: what is still held and is not reasoning (whitespace, or text
    /// that only began like an opening tag). A block never closed was all reasoning.
    pub fn finish(&mut self) -> String {
        match self.state {
            State::Start => std::mem::take(&mut self.held),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(deltas: &[&str]) -> String {
        let mut think = Think::default();
        let mut out: String = deltas.iter().map(|d| think.push(d)).collect();
        out.push_str(&think.finish());
        out
    }

    #[test]
    fn only_a_leading_block_is_reasoning() {
        assert_eq!(filtered(&["<think>a</think>\n\nHi"]), "Hi");
        assert_eq!(
            filtered(&[" \n<", "think", ">a<", "/", "think>", " ", "\n", "Hi"]),
            "Hi"
        );
        assert_eq!(filtered(&["<think>a</thin", "k is not it</think>Hi"]), "Hi");
        assert_eq!(filtered(&["<think>never closed"]), "");
        assert_eq!(filtered(&["Say <think>x</think>"]), "Say <think>x</think>");
        assert_eq!(filtered(&[" ", "<t", "able>"]), " <table>");
        assert_eq!(filtered(&["<thin"]), "<thin");
        assert_eq!(filtered(&["  "]), "  ");
        assert_eq!(
            filtered(&["<think>a</think>x <think>b</think>"]),
            "x <think>b</think>"
        );
        assert_eq!(filtered(&["é<think>"]), "é<think>");
    }
}
