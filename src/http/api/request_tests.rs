use serde_json::json;

use super::{ChatRequest, parse};

fn parsed(body: &serde_json::Value) -> Result<ChatRequest, String> {
    parse(body.to_string().as_bytes())
}

#[test]
fn a_body_of_very_many_messages_gives_the_last_user_message() {
    // ~600k messages (~20 MiB): each looked at and let go, the last user one kept.
    let mut body = String::from(r#"{"model": "m", "messages": ["#);
    for i in 0..600_000 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        body.push_str(&format!(r#"{{"role":"{role}","content":"m{i}"}},"#));
    }
    body.push_str(r#"{"role":"user","content":"the last"},{"role":"system","content":"be brief"}],"user":"u"}"#);
    let r = parse(body.as_bytes()).unwrap();
    assert_eq!(
        r,
        ChatRequest {
            text: "the last".into(),
            user: "u".into(),
            stream: false,
            include_usage: false,
            model: "m".into(),
        }
    );
}

#[test]
fn what_the_gateway_uses_is_taken_as_before() {
    let r = parsed(
        &json!({"stream": true, "stream_options": {"include_usage": true},
        "model": "gpt", "user": null, "temperature": 0.2, "tools": [{"a": [1, 2]}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "one"}, {"type": "image_url", "image_url": {"url": "x"}},
            {"type": "text", "text": "two"}]}]}),
    )
    .unwrap();
    assert_eq!(
        r,
        ChatRequest {
            text: "one\ntwo\n\n[1 attachment(s), such as an image, left out: this API takes text only]"
                .into(),
            user: "default".into(),
            stream: true,
            include_usage: true,
            model: "gpt".into(),
        }
    );
    // A repeated key: the last one, as a JSON object read whole would have it.
    let r = parse(br#"{"user": "a", "messages": [{"role": "user", "content": "x", "content": "y"}], "user": "b"}"#)
        .unwrap();
    assert_eq!((r.user.as_str(), r.text.as_str()), ("b", "y"));
    // Usage only for a stream; anything odd there is ignored.
    let r = parsed(&json!({"stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "x"}]}))
    .unwrap();
    assert!(!r.include_usage);
    let r = parsed(
        &json!({"stream": true, "stream_options": [true], "model": 5,
        "messages": [{"role": "user", "content": "x"}]}),
    )
    .unwrap();
    assert!(!r.include_usage);
    assert_eq!(r.model, "switchboard");
}

#[test]
fn bad_bodies_are_named() {
    for (body, want) in [
        ("{not json", "malformed JSON"),
        (
            "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]} trailing",
            "malformed JSON",
        ),
        ("[]", "the body must be a JSON object"),
        ("5", "the body must be a JSON object"),
        ("{}", "`messages` must be a non-empty array"),
        ("{\"messages\": {}}", "`messages` must be a non-empty array"),
        ("{\"messages\": []}", "no message with role `user`"),
        (
            "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}]}",
            "no message with role `user`",
        ),
        (
            "{\"messages\": [5]}",
            "the last message must have role `user`",
        ),
        (
            "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
            "no text `content`",
        ),
        (
            "{\"messages\": [{\"role\": \"user\"}]}",
            "no text `content`",
        ),
        (
            "{\"messages\": [{\"role\": \"user\", \"content\": \" \"}]}",
            "the last user message is empty",
        ),
        (
            "{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", \"content\": \"A\"}]}",
            "the last message must have role `user`",
        ),
        (
            "{\"user\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
            "`user` must be a string",
        ),
        (
            "{\"stream\": \"yes\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
            "`stream` must be true or false",
        ),
    ] {
        let e = parse(body.as_bytes()).expect_err(body);
        assert!(e.contains(want), "{body}: {e}");
    }
}

#[test]
fn user_is_trimmed_and_checked() {
    let user = |u: &str| {
        parsed(&json!({"user": u, "messages": [{"role": "user", "content": "x"}]})).map(|r| r.user)
    };
    assert_eq!(user("  eve \t").unwrap(), "eve");
    assert_eq!(user("   ").unwrap(), "default");
    assert_eq!(user(&"é".repeat(128)).unwrap(), "é".repeat(128));
    let e = user("eve\nFAKE api:mallory 99 turns").unwrap_err();
    assert_eq!(e, "`user` must not contain control characters");
    assert!(user("a\u{7f}b").is_err());
    let e = user(&"u".repeat(257)).unwrap_err();
    assert_eq!(e, "`user` is over 256 bytes");
}
