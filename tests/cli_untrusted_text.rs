//! What the CLI prints from elsewhere (a stranger's display name, a cron job's message, a
//! chat's messages) reaches the owner's terminal with its control characters shown as
//! escapes, not obeyed: no screen cleared, no window retitled, no line forged.

mod common;

use std::sync::Arc;

use common::Env;
use common::platform::cli;
use switchboard::agent::session::Session;
use switchboard::llm::{ChatMessage, Role};
use switchboard::scheduler::{NewJob, ScheduleSpec, Scheduler, SystemClock};
use switchboard::store::{Batch, SledStore, Store};
use switchboard_channel::{ChatKey, Sender};

const NAME: &str = "Eve\u{1b}[2J\u{1b}]0;owned\u{7}\u{1b}[31mRED";
const REMINDER: &str = "hello\u{1b}[2J\u{1b}[1A\rFAKE LINE";

/// Nothing a terminal would act on but new lines and tabs.
fn inert(out: &str) -> bool {
    !out.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

#[tokio::test]
async fn untrusted_text_is_printed_with_its_control_characters_escaped() {
    let env = Env::new("http://127.0.0.1:9/v1", "");
    let key: ChatKey = "telegram:42".parse().unwrap();
    {
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&env.data_dir()).unwrap());
        let eve = Sender {
            id: "666".into(),
            username: None,
            display_name: NAME.into(),
            is_owner: false,
        };
        switchboard::pairing::code_for(store.as_ref(), "telegram", &eve, None)
            .await
            .unwrap()
            .unwrap();
        let scheduler = Scheduler::new(
            store.clone(),
            None,
            Arc::new(env.load().config),
            Default::default(),
            Arc::new(SystemClock),
        );
        let job = NewJob::new(
            key.clone(),
            REMINDER,
            ScheduleSpec::Every("1h".into()),
            "test",
        );
        scheduler.add(job).await.unwrap();
        drop(scheduler);
        let mut session = Session::default();
        session.messages.push(ChatMessage::new(
            Role::User,
            format!("{REMINDER}\nsecond line"),
        ));
        let mut b = Batch::default();
        session.save(&key, &mut b);
        store.commit(b).await.unwrap();
    }

    let (ok, out, err) = cli(&env, &["pairing", "list"]);
    assert!(ok, "{err}");
    assert!(inert(&out), "{out:?}");
    assert!(
        out.contains("from Eve\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\u{1b}[31mRED (666)"),
        "{out}"
    );
    assert_eq!(
        out.lines().count(),
        3,
        "pending:, Eve's line, approved: {out}"
    );

    let (ok, out, err) = cli(&env, &["cron", "list"]);
    assert!(ok, "{err}");
    assert!(inert(&out), "{out:?}");
    assert!(
        out.contains("hello\\u{1b}[2J\\u{1b}[1A\\u{d}FAKE LINE"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");

    let (ok, out, err) = cli(&env, &["sessions", "show", "telegram:42"]);
    assert!(ok, "{err}");
    assert!(inert(&out), "{out:?}");
    assert!(
        out.contains("user: hello\\u{1b}[2J\\u{1b}[1A\\u{d}FAKE LINE\nsecond line"),
        "{out}"
    );
    let (ok, out, err) = cli(&env, &["sessions", "list"]);
    assert!(ok && inert(&out), "{out:?} {err}");
    assert!(out.contains("telegram:42\t1 messages"), "{out}");
}
