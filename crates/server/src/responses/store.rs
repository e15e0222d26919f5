//! The responses kept for `previous_response_id` and `GET`: a count and an
//! age bound them, and the clock is an argument so a test can move it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hearth_engine::ChatMessage;
use serde_json::Value;

/// Stored responses kept at most: the oldest go first.
pub const MAX_STORED: usize = 512;
/// How long a stored response is kept.
pub const STORED_FOR: Duration = Duration::from_secs(24 * 3600);

/// Responses kept for `previous_response_id` and `GET`, within a count and an age.
pub struct ResponseStore {
    max: usize,
    age: Duration,
    kept: VecDeque<Stored>,
}

#[derive(Clone)]
pub(super) struct Stored {
    pub id: String,
    pub at: Instant,
    /// The response object, as `GET` returns it.
    pub object: Value,
    /// The conversation through this response's output, without its
    /// `instructions` (which a next response does not inherit).
    pub history: Vec<ChatMessage>,
}

impl ResponseStore {
    pub fn new(max: usize, age: Duration) -> Self {
        Self { max, age, kept: VecDeque::new() }
    }

    fn expire(&mut self, now: Instant) {
        while self.kept.front().is_some_and(|s| now.duration_since(s.at) > self.age) {
            self.kept.pop_front();
        }
        while self.kept.len() > self.max {
            self.kept.pop_front();
        }
    }

    pub(super) fn put(&mut self, stored: Stored, now: Instant) {
        self.kept.push_back(stored);
        self.expire(now);
    }

    pub(super) fn get(&mut self, id: &str, now: Instant) -> Option<&Stored> {
        self.expire(now);
        self.kept.iter().find(|s| s.id == id)
    }

    /// The response object with `id`.
    pub fn object(&mut self, id: &str) -> Option<Value> {
        self.get(id, Instant::now()).map(|s| s.object.clone())
    }

    /// Forgets `id`; whether it was kept.
    pub fn delete(&mut self, id: &str) -> bool {
        let before = self.kept.len();
        self.kept.retain(|s| s.id != id);
        self.kept.len() < before
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stored(id: &str, at: Instant) -> Stored {
        Stored { id: id.into(), at, object: json!({"id": id}), history: Vec::new() }
    }

    #[test]
    fn the_store_keeps_a_bounded_count_for_a_bounded_time() {
        let start = Instant::now();
        let mut store = ResponseStore::new(3, Duration::from_secs(60));
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            store.put(stored(id, start + Duration::from_secs(i as u64)), start + Duration::from_secs(i as u64));
        }
        assert!(store.get("a", start + Duration::from_secs(4)).is_none(), "the oldest goes past the count");
        assert!(store.get("b", start + Duration::from_secs(4)).is_some());
        assert!(store.get("b", start + Duration::from_secs(62)).is_none(), "b is over a minute old");
        assert!(store.get("d", start + Duration::from_secs(62)).is_some());
        assert!(store.delete("d"));
        assert!(!store.delete("d"));
    }
}
