//! How a cache's positions were computed: the forward passes that ran them.
//!
//! The bits of a position's keys and values depend on how many rows its
//! forward pass ran and where in that pass it sat (llama.cpp's orders differ
//! between one row, fours and eights, and prefill and decode attention sum
//! differently). Not on the rows after it: attention is causal and every
//! matmul row is its own sum. So a cache is reproduced bit for bit by
//! running the same passes over the same tokens, with any tokens standing
//! in for the rows a later truncation dropped. Replay relies on that.

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// The passes that computed a cache's positions, in order, run-length coded
/// (a reply's decode steps are thousands of one-row passes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Pass>", into = "Vec<Pass>")]
pub struct Passes {
    runs: Vec<Pass>,
    len: usize,
}

/// `count` forward passes in a row, each of `rows` rows, of which the first
/// `kept` positions are still in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "[u32; 3]", into = "[u32; 3]")]
pub struct Pass {
    pub rows: u32,
    pub kept: u32,
    pub count: u32,
}

impl Passes {
    /// A pass of `rows` rows, all kept.
    pub fn push(&mut self, rows: usize) {
        self.push_runs(Pass { rows: rows as u32, kept: rows as u32, count: 1 });
    }

    /// `count` one-row passes (decode steps).
    pub fn push_steps(&mut self, count: usize) {
        if count > 0 {
            self.push_runs(Pass { rows: 1, kept: 1, count: count as u32 });
        }
    }

    /// `pass` after the passes so far.
    pub fn push_pass(&mut self, pass: Pass) {
        self.push_runs(pass);
    }

    fn push_runs(&mut self, pass: Pass) {
        self.len += pass.kept as usize * pass.count as usize;
        match self.runs.last_mut() {
            Some(last)
                if last.rows == pass.rows && last.kept == pass.kept && last.count.checked_add(pass.count).is_some() =>
            {
                last.count += pass.count
            }
            _ => self.runs.push(pass),
        }
    }

    /// Positions covered.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn runs(&self) -> &[Pass] {
        &self.runs
    }

    /// Keeps the first `len` positions; a pass cut through keeps fewer.
    pub fn truncate(&mut self, len: usize) {
        let mut at = 0usize;
        for i in 0..self.runs.len() {
            let Pass { rows, kept, count } = self.runs[i];
            let span = kept as usize * count as usize;
            if at + span <= len {
                at += span;
                continue;
            }
            let whole = (len - at) / kept as usize;
            let part = (len - at) % kept as usize;
            self.runs.truncate(i);
            self.len = at;
            if whole > 0 {
                self.push_runs(Pass { rows, kept, count: whole as u32 });
            }
            if part > 0 {
                self.push_runs(Pass { rows, kept: part as u32, count: 1 });
            }
            return;
        }
    }

    /// Each pass on its own: (first position, rows, kept).
    pub fn each(&self) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
        let mut at = 0usize;
        self.runs.iter().flat_map(|p| std::iter::repeat_n((p.rows, p.kept), p.count as usize)).map(
            move |(rows, kept)| {
                let start = at;
                at += kept as usize;
                (start, rows, kept)
            },
        )
    }

    /// The passes from position `from` on, if a pass starts there.
    pub fn after(&self, from: usize) -> Option<Passes> {
        let mut rest = Passes::default();
        let mut at = 0usize;
        for (start, rows, kept) in self.each() {
            if start >= from {
                if rest.is_empty() && start != from {
                    return None;
                }
                rest.push_runs(Pass { rows, kept, count: 1 });
            } else if start + kept as usize > from {
                return None;
            }
            at = start + kept as usize;
        }
        (at == from || !rest.is_empty()).then_some(rest)
    }

    /// Appends `other`, which covers the positions after these.
    pub fn extend(&mut self, other: &Passes) {
        for p in &other.runs {
            self.push_runs(*p);
        }
    }
}

impl TryFrom<Vec<Pass>> for Passes {
    type Error = EngineError;

    fn try_from(runs: Vec<Pass>) -> Result<Self> {
        let mut passes = Passes::default();
        for p in runs {
            if p.kept == 0 || p.kept > p.rows || p.count == 0 {
                return Err(EngineError::CorruptCache(format!(
                    "a pass of {} rows keeping {} ({} times) is impossible",
                    p.rows, p.kept, p.count
                )));
            }
            // No cache holds 2^32 positions: a total past that is hostile.
            if passes.len.saturating_add(p.kept as usize * p.count as usize) > u32::MAX as usize {
                return Err(EngineError::CorruptCache("passes covering more than 2^32 positions".into()));
            }
            passes.push_runs(p);
        }
        Ok(passes)
    }
}

impl From<Passes> for Vec<Pass> {
    fn from(p: Passes) -> Self {
        p.runs
    }
}

impl From<[u32; 3]> for Pass {
    fn from([rows, kept, count]: [u32; 3]) -> Self {
        Self { rows, kept, count }
    }
}

impl From<Pass> for [u32; 3] {
    fn from(p: Pass) -> Self {
        [p.rows, p.kept, p.count]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_truncate_and_split() {
        let mut p = Passes::default();
        p.push(40);
        p.push_steps(10);
        p.push_steps(5);
        p.push(7);
        assert_eq!(p.len(), 62);
        assert_eq!(p.runs().len(), 3);
        let each: Vec<_> = p.each().take(3).collect();
        assert_eq!(each, [(0, 40, 40), (40, 1, 1), (41, 1, 1)]);

        assert!(p.after(20).is_none(), "20 is inside the first pass");
        let rest = p.after(45).unwrap();
        assert_eq!(rest.len(), 17);
        assert_eq!(rest.runs(), &[Pass { rows: 1, kept: 1, count: 10 }, Pass { rows: 7, kept: 7, count: 1 }]);
        assert_eq!(p.after(62).unwrap().len(), 0);

        let mut cut = p.clone();
        cut.truncate(30);
        assert_eq!(cut.runs(), &[Pass { rows: 40, kept: 30, count: 1 }]);
        assert_eq!(cut.len(), 30);
        let mut cut = p.clone();
        cut.truncate(47);
        assert_eq!(cut.runs(), &[Pass { rows: 40, kept: 40, count: 1 }, Pass { rows: 1, kept: 1, count: 7 }]);
        let mut cut = p.clone();
        cut.truncate(60);
        assert_eq!(cut.runs().last(), Some(&Pass { rows: 7, kept: 5, count: 1 }));
        assert_eq!(cut.len(), 60);

        let mut joined = Passes::default();
        joined.push(40);
        joined.push_steps(5);
        joined.extend(&p.after(45).unwrap());
        assert_eq!(joined, p);
    }

    #[test]
    fn impossible_passes_are_refused() {
        assert!(Passes::try_from(vec![Pass { rows: 2, kept: 3, count: 1 }]).is_err());
        assert!(Passes::try_from(vec![Pass { rows: 2, kept: 0, count: 1 }]).is_err());
        let p: Passes = serde_json::from_str("[[40,40,1],[1,1,12]]").unwrap();
        assert_eq!(p.len(), 52);
        assert_eq!(serde_json::to_string(&p).unwrap(), "[[40,40,1],[1,1,12]]");
        assert!(serde_json::from_str::<Passes>("[[1,2,1]]").is_err());
    }
}
