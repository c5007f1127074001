//! The fake Bot API on the wire, without teloxide: method names in any case, form and query
//! parameters, token check, redelivery until an offset confirms, injected faults.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_fakes::telegram::{FakeTelegram, TgUser};

const WAIT: Duration = Duration::from_secs(5);

async fn call(fake: &FakeTelegram, method: &str, query: &str) -> (u16, Value) {
    let url = format!("{}/bot{}/{method}?{query}", fake.url(), fake.token());
    let r = reqwest::get(url).await.expect("request");
    (r.status().as_u16(), r.json().await.expect("json"))
}

#[tokio::test]
async fn updates_are_redelivered_until_an_offset_confirms_them() {
    let fake = FakeTelegram::start().await;
    let id = fake.push_update(fake.dm_text(&TgUser::new(1, "ann"), "hi"));
    let (_, first) = call(&fake, "getUpdates", "timeout=0").await;
    let (_, again) = call(&fake, "GETUPDATES", "offset=0&timeout=0").await;
    assert_eq!(first["result"][0]["update_id"], id);
    assert_eq!(
        first["result"], again["result"],
        "not confirmed yet: redelivered"
    );
    assert!(first["result"][0]["message"]["message_id"].is_i64());
    let (_, after) = call(&fake, "getUpdates", &format!("offset={}&timeout=0", id + 1)).await;
    assert_eq!(after["result"], json!([]));
    assert!(fake.wait_for_offset_confirmed(id, WAIT).await);
}

#[tokio::test]
async fn long_poll_returns_when_an_update_arrives() {
    let fake = FakeTelegram::start().await;
    let url = format!("{}/bot{}/getUpdates?timeout=30", fake.url(), fake.token());
    let poll =
        tokio::spawn(async move { reqwest::get(url).await.expect("poll").json::<Value>().await });
    fake.wait_for_requests("getupdates", 1, WAIT)
        .await
        .expect("polling");
    fake.push_update(fake.dm_text(&TgUser::new(1, "ann"), "wake up"));
    let body = tokio::time::timeout(WAIT, poll)
        .await
        .expect("answered")
        .expect("task")
        .expect("json");
    assert_eq!(body["result"][0]["message"]["text"], "wake up");
}

#[tokio::test]
async fn form_bodies_wrong_tokens_and_faults() {
    let fake = FakeTelegram::start().await;
    let client = reqwest::Client::new();
    let url = format!("{}/bot{}/sendmessage", fake.url(), fake.token());
    let form = "chat_id=-100&text=hello&parse_mode=HTML&message_thread_id=7\
                &reply_parameters=%7B%22message_id%22%3A5%7D";
    let send = || {
        client
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
    };
    let ok: Value = send().await.expect("send").json().await.expect("json");
    assert_eq!(ok["result"]["chat"]["id"], -100);
    let sent = fake.wait_for_sent(1, WAIT).await.expect("recorded");
    assert_eq!(
        (sent[0].chat_id, sent[0].thread_id, sent[0].reply_to),
        (-100, Some(7), Some(5))
    );
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));

    fake.fail_sends_with_retry_after(1, 3);
    let r = send().await.expect("send");
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(
        r.json::<Value>().await.expect("json")["parameters"]["retry_after"],
        3
    );
    fake.reject_html(true);
    let r = send().await.expect("send");
    let body: Value = r.json().await.expect("json");
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .starts_with("Bad Request: can't parse entities")
    );
    fake.conflict_polls(1);
    assert_eq!(call(&fake, "getUpdates", "").await.0, 409);

    let wrong = format!("{}/botnope/getMe", fake.url());
    let r = reqwest::get(wrong).await.expect("request");
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"ok": false, "error_code": 401, "description": "Unauthorized"})
    );
    assert_eq!(fake.sent().len(), 1);
}
