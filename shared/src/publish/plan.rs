//! Packing messages into `SendMessageBatch` calls.

use std::borrow::Borrow;
use std::collections::HashMap;

use super::{MAX_BATCH_ENTRIES, MAX_MESSAGE_BYTES, Message};

/// One planned call: the indices of its messages, and their total size.
#[derive(Default)]
struct Planned {
    indices: Vec<usize>,
    size: usize,
}

impl Planned {
    fn fits(&self, size: usize) -> bool {
        self.indices.len() < MAX_BATCH_ENTRIES && self.size + size <= MAX_MESSAGE_BYTES
    }

    fn push(&mut self, index: usize, size: usize) {
        self.indices.push(index);
        self.size += size;
    }
}

/// Packs messages into `SendMessageBatch` calls of at most 10 entries and 1 MiB; returns the
/// indices of each call, in the order the calls may be sent.
///
/// A call never holds two messages of one group, and each message of a group is in a later call
/// than the one before it in `messages`: a partial failure of one call can then never let a
/// later message of a group in ahead of an earlier one. A message joins the first call it may
/// join that has room, so many groups still fill calls of 10; a single group goes one message per
/// call. Messages without a group are packed in order, by size alone.
pub(crate) fn plan_batches<M: Borrow<Message>>(messages: &[M]) -> Vec<Vec<usize>> {
    let mut batches: Vec<Planned> = Vec::new();
    // The first call the next message of a group may join: the one after its previous message's.
    let mut next_for_group: HashMap<&str, usize> = HashMap::new();
    // Every call before this one holds 10 entries.
    let mut first_open = 0;
    for (i, message) in messages.iter().enumerate() {
        let message = message.borrow();
        let size = message.size();
        let group = message.group_id().map(|g| g.as_str());
        let earliest = match group {
            Some(g) => next_for_group.get(g).copied().unwrap_or(0).max(first_open),
            None => batches.len().saturating_sub(1),
        };
        let b = match (earliest..batches.len()).find(|&b| batches[b].fits(size)) {
            Some(b) => b,
            None => {
                batches.push(Planned::default());
                batches.len() - 1
            }
        };
        batches[b].push(i, size);
        if let Some(g) = group {
            next_for_group.insert(g, b + 1);
        }
        while batches
            .get(first_open)
            .is_some_and(|b| b.indices.len() == MAX_BATCH_ENTRIES)
        {
            first_open += 1;
        }
    }
    batches.into_iter().map(|b| b.indices).collect()
}

/// Packs items of the given sizes, in order, into `SendMessageBatch` calls of at most 10 entries
/// and 1 MiB; returns the indices of each batch. It knows nothing of message groups: for FIFO
/// messages, use [`plan_batches`]. The proptests compare the two.
#[cfg(test)]
fn plan_batches_by_size(sizes: &[usize]) -> Vec<Vec<usize>> {
    let mut batches: Vec<Planned> = Vec::new();
    for (i, &s) in sizes.iter().enumerate() {
        match batches.last_mut() {
            Some(batch) if batch.fits(s) => batch.push(i, s),
            _ => {
                let mut batch = Planned::default();
                batch.push(i, s);
                batches.push(batch);
            }
        }
    }
    batches.into_iter().map(|b| b.indices).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::{DeduplicationId, MessageGroupId};
    use proptest::prelude::*;

    #[test]
    fn a_group_never_has_two_messages_in_one_call() {
        let message = |group: &str, key: &str| {
            Message::fifo(
                MessageGroupId::new(group).unwrap(),
                DeduplicationId::from_key(key),
                "{}",
            )
            .unwrap()
        };
        let messages = [
            message("a", "1"),
            message("a", "2"),
            message("b", "3"),
            message("b", "4"),
        ];
        assert_eq!(plan_batches(&messages), vec![vec![0, 2], vec![1, 3]]);
    }

    #[test]
    fn by_size_alone_items_are_packed_in_order_within_one_mebibyte() {
        assert_eq!(
            plan_batches_by_size(&[600_000, 500_000, 10]),
            vec![vec![0], vec![1, 2]]
        );
    }

    fn sized(n: usize) -> Message {
        Message::standard("x".repeat(n)).unwrap()
    }

    fn grouped(group: usize, n: usize) -> Message {
        Message::fifo(
            MessageGroupId::new(format!("g{group}")).unwrap(),
            DeduplicationId::from_key(&n.to_string()),
            "x".repeat(n),
        )
        .unwrap()
    }

    fn lengths(batches: &[Vec<usize>]) -> Vec<usize> {
        batches.iter().map(Vec::len).collect()
    }

    #[test]
    fn batches_of_ten_and_one_mib() {
        let m: Vec<_> = (0..25).map(|_| sized(10)).collect();
        assert_eq!(lengths(&plan_batches(&m)), [10, 10, 5]);
        let big: Vec<_> = (0..5).map(|_| sized(400 * 1024)).collect();
        assert_eq!(lengths(&plan_batches(&big)), [2, 2, 1]);
    }

    #[test]
    fn many_groups_fill_calls_and_one_group_goes_one_per_call() {
        let many: Vec<_> = (0..30).map(|i| grouped(i % 10, i)).collect();
        assert_eq!(lengths(&plan_batches(&many)), [10, 10, 10]);
        let one: Vec<_> = (0..4).map(|i| grouped(0, i)).collect();
        assert_eq!(plan_batches(&one), [[0], [1], [2], [3]]);
    }

    #[test]
    fn a_busy_group_does_not_hold_back_the_others() {
        // Four messages of g0, then nine of other groups: those fill the first call.
        let mut m: Vec<_> = (0..4).map(|i| grouped(0, i)).collect();
        m.extend((1..10).map(|g| grouped(g, 10 + g)));
        let batches = plan_batches(&m);
        assert_eq!(batches[0], [0, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(batches[1..], [[1], [2], [3]]);
    }

    proptest! {
        // Each case builds up to 60 bodies of up to 400 KB, each validated character by
        // character: 64 cases keep the two properties under a few seconds in a debug build.
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn planned_batches_hold_the_limits(sizes in proptest::collection::vec(0usize..400_000, 0..60)) {
            let messages: Vec<_> = sizes.iter().map(|&s| sized(s)).collect();
            let batches = plan_batches(&messages);
            let flat: Vec<usize> = batches.iter().flatten().copied().collect();
            prop_assert_eq!(flat, (0..messages.len()).collect::<Vec<_>>());
            prop_assert_eq!(&batches, &plan_batches_by_size(&sizes));
            for b in &batches {
                prop_assert!(!b.is_empty() && b.len() <= MAX_BATCH_ENTRIES);
                prop_assert!(b.iter().map(|&i| messages[i].size()).sum::<usize>() <= MAX_MESSAGE_BYTES);
            }
        }

        #[test]
        fn a_group_is_never_twice_in_a_call_and_keeps_its_order(
            items in proptest::collection::vec((0usize..4, 0usize..300_000), 0..60)
        ) {
            let messages: Vec<_> = items.iter().map(|&(g, s)| grouped(g, s)).collect();
            let batches = plan_batches(&messages);
            let mut call_of = vec![usize::MAX; messages.len()];
            for (b, batch) in batches.iter().enumerate() {
                prop_assert!(!batch.is_empty() && batch.len() <= MAX_BATCH_ENTRIES);
                prop_assert!(batch.iter().map(|&i| messages[i].size()).sum::<usize>() <= MAX_MESSAGE_BYTES);
                for &i in batch {
                    prop_assert_eq!(call_of[i], usize::MAX, "message {} planned twice", i);
                    call_of[i] = b;
                }
            }
            prop_assert!(call_of.iter().all(|&b| b != usize::MAX), "every message planned");
            for (i, &(g, _)) in items.iter().enumerate() {
                if let Some(next) = (i + 1..items.len()).find(|&j| items[j].0 == g) {
                    prop_assert!(call_of[i] < call_of[next], "{} and {} of g{}", i, next, g);
                }
            }
        }
    }
}
