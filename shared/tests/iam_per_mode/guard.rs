//! The guard: an SDK interceptor that lets a request through only when the table grants every
//! IAM action it is authorized by, on the resource it names, and the map from a request to those
//! actions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::client::interceptors::context::Input;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

use crate::table::{Grant, Resource};

/// The guard's state for one run.
#[derive(Debug, Default)]
pub struct Ledger {
    pub allowed: BTreeSet<Grant>,
    /// Table names and queue names, by the resource they are in the run.
    pub resources: BTreeMap<String, Resource>,
    pub used: BTreeSet<Grant>,
    pub refused: Vec<String>,
}

/// An SDK interceptor that lets a request through only when the table grants every IAM action
/// it is authorized by, on the resource it names; it records the actions used and the requests
/// refused.
#[derive(Debug, Clone, Default)]
pub struct Guard(Arc<Mutex<Ledger>>);

impl Guard {
    pub fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Passes `request` (an operation and its input) or refuses it.
    fn check(&self, operation: &str, input: &Input) -> Result<(), String> {
        let mut ledger = self.ledger();
        let mut wanted = Vec::new();
        let authorizations = authorizations(operation, input).inspect_err(|refusal| {
            ledger.refused.push(refusal.clone());
        })?;
        for (action, name) in authorizations {
            let Some(&resource) = ledger.resources.get(&name) else {
                let refusal = format!("{operation}: {action} on {name}, not a resource of the run");
                ledger.refused.push(refusal.clone());
                return Err(refusal);
            };
            wanted.push((action, resource));
        }
        if let Some(grant) = wanted.iter().find(|g| !ledger.allowed.contains(*g)) {
            let refusal = format!("{operation}: {} on {:?} is not granted", grant.0, grant.1);
            ledger.refused.push(refusal.clone());
            return Err(refusal);
        }
        ledger.used.extend(wanted);
        Ok(())
    }
}

impl Intercept for Guard {
    fn name(&self) -> &'static str {
        "IamGuard"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let operation = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_owned())
            .unwrap_or_default();
        match self.check(&operation, context.input()) {
            Ok(()) => Ok(()),
            Err(refusal) => {
                // A refusal no library path may swallow unnoticed: the run asserts none.
                Err(format!("AccessDenied (the IAM table): {refusal}").into())
            }
        }
    }
}

/// The IAM actions a request is authorized by, each with the table or queue (by name) it names.
fn authorizations(operation: &str, input: &Input) -> Result<Vec<(String, String)>, String> {
    use aws_sdk_dynamodb::operation as ddb;
    use aws_sdk_sqs::operation as sqs;
    fn get<T: std::fmt::Debug + Send + Sync + 'static>(input: &Input) -> &T {
        input
            .downcast_ref::<T>()
            .expect("the input of its operation")
    }
    let queue = |url: Option<&str>| {
        url.and_then(|u| u.rsplit('/').next())
            .unwrap_or("")
            .to_owned()
    };
    let one = |action: &str, name: Option<&str>| {
        Ok(vec![(action.to_owned(), name.unwrap_or("").to_owned())])
    };
    match operation {
        "UpdateItem" => one(
            "dynamodb:UpdateItem",
            get::<ddb::update_item::UpdateItemInput>(input).table_name(),
        ),
        "GetItem" => one(
            "dynamodb:GetItem",
            get::<ddb::get_item::GetItemInput>(input).table_name(),
        ),
        "PutItem" => one(
            "dynamodb:PutItem",
            get::<ddb::put_item::PutItemInput>(input).table_name(),
        ),
        "DeleteItem" => one(
            "dynamodb:DeleteItem",
            get::<ddb::delete_item::DeleteItemInput>(input).table_name(),
        ),
        "DescribeTable" => one(
            "dynamodb:DescribeTable",
            get::<ddb::describe_table::DescribeTableInput>(input).table_name(),
        ),
        "DescribeTimeToLive" => one(
            "dynamodb:DescribeTimeToLive",
            get::<ddb::describe_time_to_live::DescribeTimeToLiveInput>(input).table_name(),
        ),
        // No `dynamodb:TransactWriteItems`: each action is authorized as its item operation.
        "TransactWriteItems" => Ok(get::<ddb::transact_write_items::TransactWriteItemsInput>(
            input,
        )
        .transact_items()
        .iter()
        .map(|item| {
            match (
                item.put(),
                item.update(),
                item.delete(),
                item.condition_check(),
            ) {
                (Some(p), ..) => ("dynamodb:PutItem", p.table_name()),
                (_, Some(u), ..) => ("dynamodb:UpdateItem", u.table_name()),
                (_, _, Some(d), _) => ("dynamodb:DeleteItem", d.table_name()),
                (.., Some(c)) => ("dynamodb:ConditionCheckItem", c.table_name()),
                _ => ("dynamodb:(an empty action)", ""),
            }
        })
        .map(|(action, table)| (action.to_owned(), table.to_owned()))
        .collect()),
        "GetQueueUrl" => one(
            "sqs:GetQueueUrl",
            get::<sqs::get_queue_url::GetQueueUrlInput>(input).queue_name(),
        ),
        "GetQueueAttributes" => one(
            "sqs:GetQueueAttributes",
            Some(&queue(
                get::<sqs::get_queue_attributes::GetQueueAttributesInput>(input).queue_url(),
            )),
        ),
        "ChangeMessageVisibilityBatch" => one(
            "sqs:ChangeMessageVisibility",
            Some(&queue(
                get::<sqs::change_message_visibility_batch::ChangeMessageVisibilityBatchInput>(
                    input,
                )
                .queue_url(),
            )),
        ),
        "SendMessageBatch" => one(
            "sqs:SendMessage",
            Some(&queue(
                get::<sqs::send_message_batch::SendMessageBatchInput>(input).queue_url(),
            )),
        ),
        other => Err(format!(
            "{other:?}: an operation the guard does not map, refused"
        )),
    }
}
