//! Where a message's item is: the lookup the [`Inline`](super::Inline) and
//! [`Transactional`](super::Transactional) wrappers read on a failure, so that a key whose work
//! another delivery did is answered as a duplicate instead of counted towards its budget.

use std::fmt;
use std::sync::Arc;

use aws_lambda_events::sqs::SqsMessage;

/// The item a message's work writes, as a write of the backend that names it (its key), from
/// the message's idempotency key and the message; `None` when the lookup does not know it.
type Locate<W> = dyn Fn(&str, &SqsMessage) -> Option<W> + Send + Sync;

/// A wrapper's item lookup: none until one is set.
pub(crate) struct ItemLookup<W>(Option<Arc<Locate<W>>>);

impl<W> ItemLookup<W> {
    /// `locate`, converting what it finds into the backend's write.
    pub(crate) fn new<I, F>(locate: F) -> Self
    where
        F: Fn(&str, &SqsMessage) -> Option<I> + Send + Sync + 'static,
        I: Into<W>,
    {
        Self(Some(Arc::new(move |key: &str, message: &SqsMessage| {
            locate(key, message).map(Into::into)
        })))
    }

    /// The item of `message`, if the lookup knows it.
    /// The item of `record`'s work: of SQS messages only (a lookup takes an `SqsMessage`).
    pub(crate) fn item<R: crate::record::Record>(&self, key: &str, record: &R) -> Option<W> {
        let message = (record as &dyn std::any::Any).downcast_ref::<SqsMessage>()?;
        self.0.as_ref().and_then(|locate| locate(key, message))
    }
}

impl<W> Default for ItemLookup<W> {
    fn default() -> Self {
        Self(None)
    }
}

impl<W> Clone for ItemLookup<W> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<W> fmt::Debug for ItemLookup<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}
