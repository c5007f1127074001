//! The in-memory ordered index of enabled jobs by next due time: the earliest is found in
//! O(log n), so the engine sleeps until exactly then instead of polling.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Due times (unix milliseconds) by job id, and job ids by due time.
#[derive(Debug, Default)]
pub(crate) struct Index {
    by_due: BTreeSet<(i64, Arc<str>)>,
    due_of: HashMap<Arc<str>, i64>,
}

impl Index {
    /// Set (or, with `None`, clear) the due time of a job.
    pub(crate) fn set(&mut self, id: &str, due: Option<i64>) {
        if let Some((key, old)) = self.due_of.remove_entry(id) {
            self.by_due.remove(&(old, key));
        }
        if let Some(due) = due {
            let key: Arc<str> = Arc::from(id);
            self.by_due.insert((due, key.clone()));
            self.due_of.insert(key, due);
        }
    }

    /// The earliest due time.
    pub(crate) fn first(&self) -> Option<i64> {
        self.by_due.first().map(|(due, _)| *due)
    }

    /// Remove and return up to `max` jobs due at or before `now`, earliest first.
    pub(crate) fn pop_due(&mut self, now: i64, max: usize) -> Vec<(i64, Arc<str>)> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.by_due.first() {
                Some((due, _)) if *due <= now => {
                    if let Some((due, id)) = self.by_due.pop_first() {
                        self.due_of.remove(&id);
                        out.push((due, id));
                    }
                }
                _ => break,
            }
        }
        out
    }

    pub(crate) fn clear(&mut self) {
        self.by_due.clear();
        self.due_of.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.due_of.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_due_and_replaces_on_set() {
        let mut ix = Index::default();
        ix.set("a", Some(30));
        ix.set("b", Some(10));
        ix.set("c", Some(20));
        ix.set("b", Some(40));
        assert_eq!(ix.first(), Some(20));
        let due: Vec<_> = ix
            .pop_due(30, 10)
            .into_iter()
            .map(|(d, id)| (d, id.to_string()))
            .collect();
        assert_eq!(due, vec![(20, "c".into()), (30, "a".into())]);
        ix.set("b", None);
        assert_eq!(ix.len(), 0);
        assert_eq!(ix.first(), None);
    }
}
