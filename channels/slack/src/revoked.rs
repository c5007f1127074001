//! The app losing its access while the gateway runs: Slack's `app_uninstalled`, or
//! `tokens_revoked` naming the bot, for the bot's workspace. Its tokens no longer work and
//! no more events will come, which nothing else would show (every later call just fails),
//! so it is logged at error level with what to do, and the channel is reported not ready
//! (`/readyz`) until the gateway is restarted with new tokens.

use serde_json::Value;
use tracing::{debug, error};

use crate::Shared;
use crate::web::BotIdentity;

/// Which event says the bot's access is gone, if `callback` is one.
pub(crate) fn lost(callback: &Value, me: &BotIdentity) -> Option<&'static str> {
    let ev = callback.get("event")?;
    let kind = match ev.get("type").and_then(Value::as_str)? {
        "app_uninstalled" => "app_uninstalled",
        "tokens_revoked" => "tokens_revoked",
        _ => return None,
    };
    let team = callback.get("team_id").and_then(Value::as_str);
    if let (Some(team), Some(mine)) = (team, me.team_id.as_deref()) {
        if team != mine {
            debug!(
                event = kind,
                team, "slack: another workspace's event; not ours"
            );
            return None;
        }
    }
    if kind == "app_uninstalled" {
        return Some(kind);
    }
    // `tokens.bot` lists the bot users whose tokens were revoked (`tokens.oauth`: people's).
    let bots = ev.pointer("/tokens/bot").and_then(Value::as_array);
    let ours = bots
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|b| b == me.user_id || me.bot_id.as_deref() == Some(b));
    if !ours {
        debug!("slack tokens_revoked for other tokens than the bot's; nothing to do");
    }
    ours.then_some(kind)
}

impl Shared {
    /// Say that the app's access is gone (`what`: the event) and keep the channel not ready.
    pub(crate) fn lose_access(&self, what: &str) {
        let var = &self.cfg.bot_token_env;
        let why = format!(
            "{what}: Slack revoked the app's tokens in this workspace; reinstall the app, put \
             its new bot token in ${var} and restart"
        );
        error!(
            event = what,
            "slack: the app was uninstalled or its bot token revoked, so \
            its tokens no longer work and Slack sends no more events. Reinstall the app \
            (https://api.slack.com/apps → the app → Install App), put the new bot token \
            (xoxb-…) in ${var} — and, for Socket Mode, a new app-level token in ${} — then \
            restart the gateway",
            self.cfg.app_token_env
        );
        *self.revoked.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
        self.set_connected(false, &why);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn me() -> BotIdentity {
        BotIdentity {
            team_id: Some("T1".into()),
            ..BotIdentity::test()
        }
    }

    fn cb(team: &str, event: Value) -> Value {
        json!({"type": "event_callback", "event_id": "Ev1", "team_id": team, "event": event})
    }

    #[test]
    fn the_bots_own_revocations_only() {
        let uninstalled = json!({"type": "app_uninstalled"});
        assert_eq!(
            lost(&cb("T1", uninstalled.clone()), &me()),
            Some("app_uninstalled")
        );
        assert_eq!(
            lost(&cb("T2", uninstalled), &me()),
            None,
            "another workspace"
        );
        let revoked =
            |bot: Value| json!({"type": "tokens_revoked", "tokens": {"oauth": ["U7"], "bot": bot}});
        assert_eq!(
            lost(&cb("T1", revoked(json!(["UBOT"]))), &me()),
            Some("tokens_revoked")
        );
        assert_eq!(
            lost(&cb("T1", revoked(json!([]))), &me()),
            None,
            "a person's token"
        );
        assert_eq!(lost(&cb("T1", revoked(json!(["UOTHER"]))), &me()), None);
        let message = json!({"type": "message", "user": "U1", "text": "hi", "ts": "1.0"});
        assert_eq!(lost(&cb("T1", message), &me()), None);
    }
}
