//! Each reply's tokens with how likely the model found them and the
//! likeliest alternatives at each position, kept compactly beside the
//! reply: per token its id, its log-probability, and `k` (id,
//! log-probability) pairs, as little-endian bytes.

use rusqlite::{params, OptionalExtension};

use crate::error::{Result, StoreError};
use crate::store::Store;

/// A reply's tokens and their alternatives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenChoices {
    pub tokens: Vec<TokenChoice>,
}

/// One generated token: what was sampled and what the model found likeliest.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct TokenChoice {
    pub id: u32,
    pub logprob: f32,
    /// Most likely first.
    pub top: Vec<(u32, f32)>,
}

/// The most alternatives kept per token.
pub const MAX_TOP: usize = 20;

/// Alternatives the app keeps for each generated token (and asks the
/// sampler for, so a replay samples on the same path).
pub const KEPT_ALTERNATIVES: usize = 5;

impl TokenChoices {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.tokens.len() * 9 * 8);
        out.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        for t in &self.tokens {
            out.extend_from_slice(&t.id.to_le_bytes());
            out.extend_from_slice(&t.logprob.to_le_bytes());
            out.push(t.top.len().min(MAX_TOP) as u8);
            for (id, lp) in t.top.iter().take(MAX_TOP) {
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&lp.to_le_bytes());
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let b = bytes.get(at..at + n)?;
            at += n;
            Some(b)
        };
        let word = |b: &[u8]| -> [u8; 4] { b.try_into().expect("four bytes") };
        let n = u32::from_le_bytes(word(take(4)?)) as usize;
        let mut tokens = Vec::with_capacity(n.min(bytes.len() / 9));
        for _ in 0..n {
            let id = u32::from_le_bytes(word(take(4)?));
            let logprob = f32::from_le_bytes(word(take(4)?));
            let k = take(1)?[0] as usize;
            let mut top = Vec::with_capacity(k);
            for _ in 0..k {
                let pair = take(8)?;
                top.push((u32::from_le_bytes(word(&pair[..4])), f32::from_le_bytes(word(&pair[4..]))));
            }
            tokens.push(TokenChoice { id, logprob, top });
        }
        take(1).is_none().then_some(Self { tokens })
    }
}

impl Store {
    /// Keeps a reply's token choices, replacing any earlier ones.
    pub fn set_token_choices(&self, message_id: i64, choices: &TokenChoices) -> Result<()> {
        self.conn.execute(
            "INSERT INTO token_alternatives(message_id, data) VALUES (?1, ?2) ON CONFLICT(message_id) DO UPDATE SET data = excluded.data",
            params![message_id, choices.encode()],
        )?;
        Ok(())
    }

    /// Forgets a reply's token choices (its text was written without them).
    pub fn clear_token_choices(&self, message_id: i64) -> Result<()> {
        self.conn.execute("DELETE FROM token_alternatives WHERE message_id = ?1", [message_id])?;
        Ok(())
    }

    /// A reply's token choices, if they were kept (`None` for replies
    /// written before they were, or that failed).
    pub fn token_choices(&self, message_id: i64) -> Result<Option<TokenChoices>> {
        let data: Option<Vec<u8>> = self
            .conn
            .query_row("SELECT data FROM token_alternatives WHERE message_id = ?1", [message_id], |r| r.get(0))
            .optional()?;
        data.map(|d| {
            TokenChoices::decode(&d)
                .ok_or(StoreError::Corrupt(format!("the token alternatives of message {message_id} are damaged")))
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageStatus, Role};

    #[test]
    fn choices_round_trip_compactly_and_go_with_their_message() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("h.db")).unwrap();
        let c = store.create_conversation().unwrap();
        let m = store.add_message(c.id, None, Role::Assistant, "hi", MessageStatus::Complete).unwrap();
        assert_eq!(store.token_choices(m.id).unwrap(), None);
        let choices = TokenChoices {
            tokens: (0..100)
                .map(|i| TokenChoice {
                    id: i,
                    logprob: -0.5 * i as f32,
                    top: (0..5).map(|j| (i + j, -(j as f32))).collect(),
                })
                .collect(),
        };
        store.set_token_choices(m.id, &choices).unwrap();
        assert_eq!(store.token_choices(m.id).unwrap().as_ref(), Some(&choices));
        // 4 + 100 × (9 + 5 × 8) bytes.
        assert_eq!(choices.encode().len(), 4 + 100 * 49);
        assert!(TokenChoices::decode(&choices.encode()[..200]).is_none(), "a cut blob is refused");
        store.delete_conversation(c.id).unwrap();
        store.purge_deleted(i64::MAX).unwrap();
        let n: i64 = store.conn.query_row("SELECT COUNT(*) FROM token_alternatives", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0, "deleted with the message");
    }
}
