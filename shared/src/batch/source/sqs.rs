//! SQS: every failed message named by its message id.

use std::collections::HashSet;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};

use super::EventSource;

impl EventSource for SqsEvent {
    type Record = SqsMessage;
    type Response = SqsBatchResponse;

    fn records(&self) -> Vec<&SqsMessage> {
        self.records.iter().collect()
    }

    fn source_arn(&self) -> Option<&str> {
        self.records
            .first()
            .and_then(|r| r.event_source_arn.as_deref())
    }

    fn ordered(&self) -> bool {
        self.records
            .first()
            .and_then(|r| r.event_source_arn.as_deref())
            .is_some_and(|arn| arn.ends_with(".fifo"))
    }

    fn response(failed: &[&SqsMessage]) -> SqsBatchResponse {
        let mut seen = HashSet::new();
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = failed
            .iter()
            .filter_map(|m| m.message_id.clone())
            .filter(|id| seen.insert(id.clone()))
            .map(|id| {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id;
                failure
            })
            .collect();
        response
    }
}
