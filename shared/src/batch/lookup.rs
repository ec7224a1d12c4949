//! Where a message's item is: the lookup the [`Inline`](super::Inline) and
//! [`Transactional`](super::Transactional) wrappers read on a failure, so that a key whose work
//! another delivery did is answered as a duplicate instead of counted towards its budget.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// The item a record's work writes, as a write of the backend that names it (its key), from
/// the record's idempotency key and the record (an SQS message, a stream or Kafka record: the
/// one the lookup was made for); `None` when the lookup does not know it.
type Locate<W> = dyn Fn(&str, &dyn Any) -> Option<W> + Send + Sync;

/// A wrapper's item lookup: none until one is set.
pub(crate) struct ItemLookup<W>(Option<Arc<Locate<W>>>);

impl<W> ItemLookup<W> {
    /// `locate`, converting what it finds into the backend's write.
    /// `locate`, of records of type `R`, converting what it finds into the backend's write.
    pub(crate) fn new<R, I, F>(locate: F) -> Self
    where
        R: crate::record::Record,
        F: Fn(&str, &R) -> Option<I> + Send + Sync + 'static,
        I: Into<W>,
    {
        Self(Some(Arc::new(move |key: &str, record: &dyn Any| {
            let record = record.downcast_ref::<R>()?;
            locate(key, record).map(Into::into)
        })))
    }

    /// The item of `record`'s work, if the lookup knows it (a lookup made for another record
    /// type knows none: the consumer's builder types it by its source).
    pub(crate) fn item<R: crate::record::Record>(&self, key: &str, record: &R) -> Option<W> {
        self.0
            .as_ref()
            .and_then(|locate| locate(key, record as &dyn Any))
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
