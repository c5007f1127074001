//! Senders' names: `users.info`, asked once per user (a lookup under way is shared) and
//! cached in `memory`, since `allow_from` may name people by username and the model is shown
//! a name rather than an id.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{debug, warn};

use crate::{Shared, web};

impl Shared {
    /// Fill the sender's names from the `users.info` cache. A user not cached yet is looked
    /// up first, since `allow_from` may name them by username — but only `until` (see
    /// [`crate::USER_LOOKUP_WAIT`]), so intake (and Slack's ack) never hangs on it: a lookup that
    /// fails or runs late leaves the id, and a late answer still fills the cache.
    pub(crate) async fn name_sender(
        self: &Arc<Self>,
        sender: &mut switchboard_channel::Sender,
        until: tokio::time::Instant,
    ) {
        let lookup = {
            let mut mem = self.memory();
            if mem.users.contains(&sender.id) {
                None
            } else if let Some(pending) = mem.users_pending.get(&sender.id) {
                Some(pending.clone())
            } else {
                let pending = self.look_up_user(&sender.id);
                mem.users_pending.insert(sender.id.clone(), pending.clone());
                Some(pending)
            }
        };
        if let Some(mut done) = lookup {
            // Resolves when the lookup task drops its sender, after it filled the cache.
            if tokio::time::timeout_at(until, done.changed())
                .await
                .is_err()
            {
                debug!(user = %sender.id, "slack users.info slow; showing the user id");
            }
        }
        if let Some(Some(n)) = self.memory().users.get(&sender.id).cloned() {
            sender.username = n.username;
            sender.display_name = n.display_name;
        }
    }

    /// Start one `users.info` lookup; the receiver sees its sender dropped when it is over.
    fn look_up_user(self: &Arc<Self>, id: &str) -> watch::Receiver<()> {
        let (done, pending) = watch::channel(());
        let (sh, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            let names = sh.web.user_names(&id).await;
            let mut mem = sh.memory();
            mem.users_pending.remove(&id);
            match names {
                Ok(n) => mem.users.insert(id, n),
                // Slack answered (user_not_found, missing_scope…): don't ask again.
                Err(web::WebError::Api(code)) => {
                    if sh.cfg.names_decide_access {
                        warn!(%code, user = %id, "slack users.info refused, so this user's \
                            name is unknown and allow_from's names cannot match them; list \
                            their member id (or grant the users:read scope)");
                    } else {
                        debug!(%code, "slack users.info refused; showing the user id");
                    }
                    mem.users.insert(id, None);
                }
                Err(e) => debug!(error = %e, "slack users.info failed"),
            }
            // The cache is filled: now wake the waiters.
            drop(mem);
            drop(done);
        });
        pending
    }
}
