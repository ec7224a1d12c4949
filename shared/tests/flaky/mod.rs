//! The handler the stream history tests replay: each record (numbered by its payload's `index`)
//! fails a given number of times before its effect happens, or for good when it is poison, and
//! a log of the effects in order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_lambda_events::kafka::KafkaRecord;
use aws_lambda_events::kinesis::KinesisEventRecord;
use lambda_idempotency::batch::{RecordContext, RecordError, RecordHandler, json};

/// A record's payload: its number and its order key.
#[derive(serde::Deserialize)]
pub struct Work {
    pub index: usize,
    pub key: String,
}

/// What happened: the effects (key, record) in order, and how many times each record was tried.
#[derive(Default)]
pub struct Log {
    pub effects: Vec<(String, usize)>,
    pub tries: HashMap<usize, u32>,
}

/// A handler whose record `i` fails `fails[i]` times before it succeeds, or for good
/// (permanently) when `poison[i]`.
pub fn flaky(
    log: Arc<Mutex<Log>>,
    fails: Vec<u32>,
    poison: Vec<bool>,
) -> impl RecordHandler<KinesisEventRecord, Output = usize> + RecordHandler<KafkaRecord> + 'static {
    json(move |w: Work, _ctx: RecordContext| {
        let log = log.clone();
        let (fails, poison) = (
            fails[w.index],
            poison.get(w.index).copied().unwrap_or(false),
        );
        async move {
            if poison {
                return Err(RecordError::permanent(format!(
                    "record {} is poison",
                    w.index
                )));
            }
            let mut log = log.lock().unwrap();
            let tries = log.tries.entry(w.index).or_default();
            *tries += 1;
            if *tries <= fails {
                return Err(RecordError::handler(format!("record {} failed", w.index)));
            }
            log.effects.push((w.key, w.index));
            Ok(w.index)
        }
    })
}
