//! Mentions in a message's text as names the model can read: `<@id>` and `<@!id>` as
//! `@username` (the message's `mentions` array names every user it mentions), `<@&id>` as
//! `@role` and `<#id>` as `#channel` when the cache (or what the adapter learned of the
//! channel) knows them. Unknown ones stay as they are.

use std::collections::HashMap;

use serenity::model::user::User;

/// A mention token in a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    User(u64),
    Role(u64),
    Channel(u64),
}

/// The names mentions are read as.
#[derive(Debug, Default)]
pub(crate) struct Names {
    users: HashMap<u64, String>,
    roles: HashMap<u64, String>,
    channels: HashMap<u64, String>,
    /// The bot itself: read as its name alone (the model has no use pinging itself).
    me: Option<u64>,
}

impl Names {
    /// The users named in `mentions` arrays.
    pub(crate) fn of_users<'a>(users: impl IntoIterator<Item = &'a User>) -> Self {
        Self {
            users: users
                .into_iter()
                .map(|u| (u.id.get(), u.name.clone()))
                .collect(),
            ..Self::default()
        }
    }

    /// `me` is the bot's own user id.
    pub(crate) fn with_me(mut self, me: u64) -> Self {
        self.me = Some(me);
        self
    }

    /// Look up the roles and channels `texts` mention that are not known yet.
    pub(crate) fn look_up<'a>(
        &mut self,
        texts: impl IntoIterator<Item = &'a str>,
        role: impl Fn(u64) -> Option<String>,
        channel: impl Fn(u64) -> Option<String>,
    ) {
        for text in texts {
            for (_, token) in tokens(text) {
                match token {
                    Token::Role(id) if !self.roles.contains_key(&id) => {
                        if let Some(n) = role(id) {
                            self.roles.insert(id, n);
                        }
                    }
                    Token::Channel(id) if !self.channels.contains_key(&id) => {
                        if let Some(n) = channel(id) {
                            self.channels.insert(id, n);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    fn name(&self, token: Token) -> Option<String> {
        match token {
            Token::User(id) if self.me == Some(id) => self.users.get(&id).map(|n| format!("@{n}")),
            // With the mention itself, so the model can write it back to ping them.
            Token::User(id) => self.users.get(&id).map(|n| format!("@{n} (<@{id}>)")),
            Token::Role(id) => self.roles.get(&id).map(|n| format!("@{n}")),
            Token::Channel(id) => self.channels.get(&id).map(|n| format!("#{n}")),
        }
    }
}

/// Each mention token in `text`, with where it is.
pub(crate) fn tokens(text: &str) -> Vec<(std::ops::Range<usize>, Token)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find('<').map(|i| from + i) {
        from = at + 1;
        let rest = &text[at + 1..];
        let (make, skip): (fn(u64) -> Token, usize) = if rest.starts_with("@!") {
            (Token::User, 2)
        } else if rest.starts_with("@&") {
            (Token::Role, 2)
        } else if rest.starts_with('@') {
            (Token::User, 1)
        } else if rest.starts_with('#') {
            (Token::Channel, 1)
        } else {
            continue;
        };
        let digits = &rest[skip..];
        let len = digits.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 || digits.as_bytes().get(len) != Some(&b'>') {
            continue;
        }
        let Ok(id) = digits[..len].parse::<u64>() else {
            continue;
        };
        let end = at + 1 + skip + len + 1;
        found.push((at..end, make(id)));
        from = end;
    }
    found
}

/// `text` with each known mention read as its name.
pub(crate) fn render(text: &str, names: &Names) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (range, token) in tokens(text) {
        if let Some(name) = names.name(token) {
            out.push_str(&text[last..range.start]);
            out.push_str(&name);
            last = range.end;
        }
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_and_malformed_ones_skipped() {
        let t = tokens("a <@1> b <@!22> <@&3> <#44> <@x> <@5 <#> <:emoji:9> <@6>");
        let got: Vec<Token> = t.iter().map(|(_, k)| *k).collect();
        assert_eq!(
            got,
            [
                Token::User(1),
                Token::User(22),
                Token::Role(3),
                Token::Channel(44),
                Token::User(6)
            ]
        );
    }

    #[test]
    fn known_mentions_read_as_names_and_unknown_ones_stay() {
        let mut names = Names::default();
        names.users.insert(1, "bob".into());
        names.look_up(
            ["<@&3> <@&4> <#5> <#6>"],
            |r| (r == 3).then(|| "helpers".to_string()),
            |c| (c == 5).then(|| "general".to_string()),
        );
        assert_eq!(
            render(
                "hi <@1> and <@!1>, <@2>; <@&3> <@&4> in <#5> not <#6> é",
                &names
            ),
            "hi @bob (<@1>) and @bob (<@1>), <@2>; @helpers <@&4> in #general not <#6> é"
        );
    }
}
