//! Queues: creating them with the template's attributes, and reading them back.

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;
use lambda_idempotency::publish::is_missing_queue;

use super::{ABSENT, Difference, Diffs, ProvisionError, ProvisionedQueue, aws};
use crate::arn::Arn;
use crate::template::{Queue, Template};

/// The ARN of the template queue `logical_id` next to a queue whose ARN is `own_arn`: queue ARNs
/// of one account and region differ only in the name.
fn sibling_arn(template: &Template, own_arn: &str, logical_id: &str) -> String {
    let name = template
        .queues
        .get(logical_id)
        .map_or(logical_id, |q| q.name.as_str());
    match Arn::parse(own_arn) {
        Ok(arn) => arn.with_resource(name),
        Err(_) => name.to_owned(),
    }
}

/// The `RedriveAllowPolicy` attribute of `queue` (whose ARN is `own_arn`), with each source
/// queue's local ARN; `None` when the template sets none.
///
/// ```
/// use local_aws::provision::redrive_allow_policy_document;
/// use local_aws::template::{Naming, Template, TemplateOptions};
///
/// let t = Template::load_project(&TemplateOptions::default().naming(Naming::prefix("x-"))).unwrap();
/// let dlq = &t.queues["PaymentsDeadLetterQueue"];
/// let doc = redrive_allow_policy_document(&t, dlq, "arn:aws:sqs:us-east-1:123456789012:x-payments-dlq.fifo").unwrap();
/// assert_eq!(doc["redrivePermission"], "byQueue");
/// assert_eq!(doc["sourceQueueArns"][0], "arn:aws:sqs:us-east-1:123456789012:x-payments.fifo");
/// ```
pub fn redrive_allow_policy_document(
    template: &Template,
    queue: &Queue,
    own_arn: &str,
) -> Option<serde_json::Value> {
    queue
        .redrive_allow_policy
        .as_ref()
        .map(|p| p.document(|source| sibling_arn(template, own_arn, source)))
}

/// Sets `queue`'s `RedriveAllowPolicy` (when the template gives it one) on the provisioned
/// queue. Separate from [`create_queue`] because the policy names other queues of the template;
/// [`provision`](super::provision) calls it before any source queue names this one as its
/// dead-letter queue. A policy already on the queue and not in the template is left.
pub async fn set_redrive_allow_policy(
    sqs: &aws_sdk_sqs::Client,
    template: &Template,
    queue: &Queue,
    provisioned: &ProvisionedQueue,
) -> Result<(), ProvisionError> {
    let Some(document) = redrive_allow_policy_document(template, queue, &provisioned.arn) else {
        return Ok(());
    };
    sqs.set_queue_attributes()
        .queue_url(&provisioned.url)
        .attributes(QueueAttributeName::RedriveAllowPolicy, document.to_string())
        .send()
        .await
        .map_err(aws("SetQueueAttributes", &provisioned.name))?;
    Ok(())
}

/// A `RedriveAllowPolicy` document in a form that compares: permission, then the sorted
/// source ARNs.
fn redrive_allow_summary(policy: &serde_json::Value) -> String {
    let permission = policy["redrivePermission"].as_str().unwrap_or("?");
    let mut sources: Vec<&str> = policy["sourceQueueArns"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    sources.sort_unstable();
    if sources.is_empty() {
        permission.to_owned()
    } else {
        format!("{permission} {}", sources.join(", "))
    }
}

/// The attributes CreateQueue/SetQueueAttributes get for `queue` (`dlq_arn` for its redrive).
fn queue_attributes(
    queue: &Queue,
    dlq_arn: Option<&str>,
    creating: bool,
) -> HashMap<QueueAttributeName, String> {
    let mut a = HashMap::new();
    if queue.fifo {
        if creating {
            a.insert(QueueAttributeName::FifoQueue, "true".to_owned());
        }
        a.insert(
            QueueAttributeName::ContentBasedDeduplication,
            queue.content_based_deduplication.to_string(),
        );
    }
    a.insert(
        QueueAttributeName::VisibilityTimeout,
        queue.visibility_timeout.to_string(),
    );
    a.insert(
        QueueAttributeName::MessageRetentionPeriod,
        queue.message_retention_period.to_string(),
    );
    a.insert(
        QueueAttributeName::DelaySeconds,
        queue.delay_seconds.to_string(),
    );
    if let Some(w) = queue.receive_message_wait_time_seconds {
        a.insert(
            QueueAttributeName::ReceiveMessageWaitTimeSeconds,
            w.to_string(),
        );
    }
    if let Some(m) = queue.maximum_message_size {
        a.insert(QueueAttributeName::MaximumMessageSize, m.to_string());
    }
    if let (Some(r), Some(arn)) = (&queue.redrive, dlq_arn) {
        a.insert(
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({
                "deadLetterTargetArn": arn,
                "maxReceiveCount": r.max_receive_count,
            })
            .to_string(),
        );
    }
    a
}

/// Creates one queue (or brings an existing one to the template's attributes; `FifoQueue`
/// cannot change, [`verify`](super::verify) reports that) and returns it. `dlq_arn`: its
/// dead-letter queue's ARN.
///
/// ```no_run
/// # async fn f(clients: local_aws::Clients, template: local_aws::template::Template) -> Result<(), local_aws::provision::ProvisionError> {
/// let dlq = local_aws::provision::create_queue(&clients.sqs, &template.queues["ReceiptsDeadLetterQueue"], None).await?;
/// let q = local_aws::provision::create_queue(&clients.sqs, &template.queues["ReceiptsQueue"], Some(&dlq.arn)).await?;
/// # Ok(()) }
/// ```
pub async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    queue: &Queue,
    dlq_arn: Option<&str>,
) -> Result<ProvisionedQueue, ProvisionError> {
    let name = &queue.name;
    let created = sqs
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(queue_attributes(queue, dlq_arn, true)))
        .send()
        .await;
    let url = match created {
        Ok(out) => out.queue_url.ok_or(ProvisionError::Missing {
            operation: "CreateQueue",
            resource: name.clone(),
            field: "QueueUrl",
        })?,
        Err(e)
            if e.as_service_error().is_some_and(|e| {
                e.is_queue_name_exists() || e.meta().code() == Some("QueueAlreadyExists")
            }) =>
        {
            let url = sqs
                .get_queue_url()
                .queue_name(name)
                .send()
                .await
                .map_err(aws("GetQueueUrl", name))?
                .queue_url
                .ok_or(ProvisionError::Missing {
                    operation: "GetQueueUrl",
                    resource: name.clone(),
                    field: "QueueUrl",
                })?;
            tracing::info!(queue = %name, "queue exists; setting the template's attributes");
            sqs.set_queue_attributes()
                .queue_url(&url)
                .set_attributes(Some(queue_attributes(queue, dlq_arn, false)))
                .send()
                .await
                .map_err(aws("SetQueueAttributes", name))?;
            url
        }
        Err(e) => return Err(aws("CreateQueue", name)(e)),
    };
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(aws("GetQueueAttributes", name))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or(ProvisionError::Missing {
            operation: "GetQueueAttributes",
            resource: name.clone(),
            field: "QueueArn",
        })?;
    Ok(ProvisionedQueue {
        name: name.clone(),
        url,
        arn,
        fifo: queue.fifo,
    })
}

pub(super) async fn verify_queue(
    sqs: &aws_sdk_sqs::Client,
    queue: &Queue,
    template: &Template,
) -> Result<Vec<Difference>, ProvisionError> {
    let mut d = Diffs {
        out: Vec::new(),
        resource: &queue.logical_id,
        name: &queue.name,
    };
    let url = match sqs.get_queue_url().queue_name(&queue.name).send().await {
        Ok(out) => out.queue_url.unwrap_or_default(),
        Err(e)
            if e.as_service_error().is_some_and(|e| {
                e.is_queue_does_not_exist() || e.meta().code().is_some_and(is_missing_queue)
            }) =>
        {
            d.check("exists", "yes", "no");
            return Ok(d.out);
        }
        Err(e) => return Err(aws("GetQueueUrl", &queue.name)(e)),
    };
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(aws("GetQueueAttributes", &queue.name))?
        .attributes
        .unwrap_or_default();
    let get = |n: QueueAttributeName| attributes.get(&n).cloned();
    let own_arn = get(QueueAttributeName::QueueArn).unwrap_or_default();
    let or_absent = |v: Option<String>| v.unwrap_or_else(|| ABSENT.to_owned());
    d.check(
        "FifoQueue",
        queue.fifo.to_string(),
        get(QueueAttributeName::FifoQueue).unwrap_or_else(|| "false".into()),
    );
    if queue.fifo {
        d.check(
            "ContentBasedDeduplication",
            queue.content_based_deduplication.to_string(),
            or_absent(get(QueueAttributeName::ContentBasedDeduplication)),
        );
    }
    d.check(
        "VisibilityTimeout",
        queue.visibility_timeout.to_string(),
        or_absent(get(QueueAttributeName::VisibilityTimeout)),
    );
    d.check(
        "MessageRetentionPeriod",
        queue.message_retention_period.to_string(),
        or_absent(get(QueueAttributeName::MessageRetentionPeriod)),
    );
    d.check(
        "DelaySeconds",
        queue.delay_seconds.to_string(),
        get(QueueAttributeName::DelaySeconds).unwrap_or_else(|| "0".into()),
    );
    if let Some(w) = queue.receive_message_wait_time_seconds {
        d.check(
            "ReceiveMessageWaitTimeSeconds",
            w.to_string(),
            or_absent(get(QueueAttributeName::ReceiveMessageWaitTimeSeconds)),
        );
    }
    if let Some(m) = queue.maximum_message_size {
        d.check(
            "MaximumMessageSize",
            m.to_string(),
            or_absent(get(QueueAttributeName::MaximumMessageSize)),
        );
    }
    let policy: Option<serde_json::Value> = get(QueueAttributeName::RedrivePolicy)
        .filter(|p| !p.is_empty())
        .and_then(|p| serde_json::from_str(&p).ok());
    match (&queue.redrive, policy) {
        (None, None) => {}
        (None, Some(p)) => d.check("RedrivePolicy", ABSENT, p.to_string()),
        (Some(r), None) => d.check(
            "RedrivePolicy",
            format!(
                "maxReceiveCount {} to {}",
                r.max_receive_count, r.dead_letter_queue
            ),
            ABSENT,
        ),
        (Some(r), Some(p)) => {
            let count = match &p["maxReceiveCount"] {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            d.check(
                "RedrivePolicy.maxReceiveCount",
                r.max_receive_count.to_string(),
                count,
            );
            d.check(
                "RedrivePolicy.deadLetterTargetArn",
                sibling_arn(template, &own_arn, &r.dead_letter_queue),
                p["deadLetterTargetArn"].as_str().unwrap_or(ABSENT),
            );
        }
    }
    // SQS without a policy allows every source queue.
    let expected = redrive_allow_policy_document(template, queue, &own_arn)
        .map_or_else(|| "allowAll".to_owned(), |p| redrive_allow_summary(&p));
    let actual = get(QueueAttributeName::RedriveAllowPolicy)
        .filter(|p| !p.is_empty())
        .map_or_else(
            || "allowAll".to_owned(),
            |p| match serde_json::from_str(&p) {
                Ok(doc) => redrive_allow_summary(&doc),
                Err(_) => p,
            },
        );
    d.check("RedriveAllowPolicy", expected, actual);
    Ok(d.out)
}
