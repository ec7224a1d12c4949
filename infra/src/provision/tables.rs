//! Tables: creating them (with TTL and stream), and reading them back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, ProjectionType,
    ScalarAttributeType, StreamSpecification, TableDescription, TableStatus,
    TimeToLiveSpecification, TimeToLiveStatus,
};

use super::{Difference, Diffs, ProvisionError, ProvisionedTable, aws};
use crate::template::{AttributeType, KeyAttribute, KeyType, Projection, StreamViewType, Table};

fn scalar_type(t: AttributeType) -> ScalarAttributeType {
    match t {
        AttributeType::String => ScalarAttributeType::S,
        AttributeType::Number => ScalarAttributeType::N,
        AttributeType::Binary => ScalarAttributeType::B,
    }
}

fn key_type(t: KeyType) -> aws_sdk_dynamodb::types::KeyType {
    match t {
        KeyType::Hash => aws_sdk_dynamodb::types::KeyType::Hash,
        KeyType::Range => aws_sdk_dynamodb::types::KeyType::Range,
    }
}

fn stream_specification(view: StreamViewType) -> StreamSpecification {
    StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::from(view.as_str()))
        .build()
        .expect("stream_enabled is set")
}

/// The table's description once it is `ACTIVE` (at most 60 s).
async fn describe_active(
    ddb: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<TableDescription, ProvisionError> {
    let started = Instant::now();
    loop {
        let described = ddb
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(aws("DescribeTable", name))?;
        let t = described.table.ok_or(ProvisionError::Missing {
            operation: "DescribeTable",
            resource: name.to_owned(),
            field: "Table",
        })?;
        if t.table_status == Some(TableStatus::Active) {
            return Ok(t);
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(ProvisionError::NotActive(name.to_owned()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The view type of the table's stream, if it has one enabled.
fn enabled_stream(t: &TableDescription) -> Option<&str> {
    t.stream_specification
        .as_ref()
        .filter(|s| s.stream_enabled)
        .map(|s| s.stream_view_type.as_ref().map_or("?", |v| v.as_str()))
}

/// Creates one table, on demand (`PAY_PER_REQUEST`, with its stream when the template gives it
/// one), waits until it is `ACTIVE`, and enables TTL when the template does. An existing table
/// is left as it is apart from enabling TTL and a stream it lacks; [`verify`](super::verify)
/// reports a different key schema or stream view type.
///
/// ```no_run
/// # async fn f(clients: local_aws::Clients, template: local_aws::template::Template) -> Result<(), local_aws::provision::ProvisionError> {
/// let t = local_aws::provision::create_table(&clients.dynamodb, &template.tables["IdempotencyTable"]).await?;
/// # Ok(()) }
/// ```
pub async fn create_table(
    ddb: &aws_sdk_dynamodb::Client,
    table: &Table,
) -> Result<ProvisionedTable, ProvisionError> {
    let name = &table.name;
    let mut create = ddb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest);
    let mut defined = BTreeSet::new();
    let all_keys = table.key_schema.iter().chain(
        table
            .global_secondary_indexes
            .iter()
            .flat_map(|i| &i.key_schema),
    );
    for key in all_keys {
        if defined.insert(key.name.as_str()) {
            create = create.attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(&key.name)
                    .attribute_type(scalar_type(key.attribute_type))
                    .build()
                    .expect("name and type are set"),
            );
        }
    }
    create = create.set_key_schema(Some(key_schema(&table.key_schema)));
    for index in &table.global_secondary_indexes {
        create = create.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(&index.name)
                .set_key_schema(Some(key_schema(&index.key_schema)))
                .projection(projection(&index.projection))
                .build()
                .expect("name, key schema and projection are set"),
        );
    }
    if let Some(view) = table.stream_view_type {
        create = create.stream_specification(stream_specification(view));
    }
    match create.send().await {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            tracing::info!(table = %name, "table exists");
        }
        Err(e) => return Err(aws("CreateTable", name)(e)),
    }
    let mut described = describe_active(ddb, name).await?;
    if let Some(view) = table.stream_view_type
        && enabled_stream(&described).is_none()
    {
        tracing::info!(table = %name, "enabling the table's stream");
        ddb.update_table()
            .table_name(name)
            .stream_specification(stream_specification(view))
            .send()
            .await
            .map_err(aws("UpdateTable", name))?;
        described = describe_active(ddb, name).await?;
    }
    if let Some(attribute) = &table.ttl_attribute {
        let current = ddb
            .describe_time_to_live()
            .table_name(name)
            .send()
            .await
            .map_err(aws("DescribeTimeToLive", name))?
            .time_to_live_description;
        let enabled = current.as_ref().is_some_and(|d| {
            matches!(
                d.time_to_live_status,
                Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
            ) && d.attribute_name.as_deref() == Some(attribute)
        });
        if !enabled {
            ddb.update_time_to_live()
                .table_name(name)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .enabled(true)
                        .attribute_name(attribute)
                        .build()
                        .expect("enabled and name are set"),
                )
                .send()
                .await
                .map_err(aws("UpdateTimeToLive", name))?;
        }
    }
    let stream_arn = enabled_stream(&described).and(described.latest_stream_arn.clone());
    Ok(ProvisionedTable {
        name: name.clone(),
        arn: described.table_arn.unwrap_or_default(),
        stream_arn,
    })
}

pub(super) async fn verify_table(
    ddb: &aws_sdk_dynamodb::Client,
    table: &Table,
) -> Result<Vec<Difference>, ProvisionError> {
    let mut d = Diffs {
        out: Vec::new(),
        resource: &table.logical_id,
        name: &table.name,
    };
    let described = match ddb.describe_table().table_name(&table.name).send().await {
        Ok(out) => out
            .table
            .unwrap_or_else(|| aws_sdk_dynamodb::types::TableDescription::builder().build()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            d.check("exists", "yes", "no");
            return Ok(d.out);
        }
        Err(e) => return Err(aws("DescribeTable", &table.name)(e)),
    };
    let types: BTreeMap<&str, &str> = described
        .attribute_definitions()
        .iter()
        .map(|a| (a.attribute_name(), a.attribute_type().as_str()))
        .collect();
    let show = |keys: Vec<(String, String, String)>| {
        keys.iter()
            .map(|(n, k, t)| format!("{n} {k} {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let expected = table
        .key_schema
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                k.key_type.as_str().to_owned(),
                k.attribute_type.as_str().to_owned(),
            )
        })
        .collect();
    let actual = described
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
                types
                    .get(k.attribute_name())
                    .copied()
                    .unwrap_or("?")
                    .to_owned(),
            )
        })
        .collect();
    d.check("KeySchema", show(expected), show(actual));
    let mut expected_indexes: Vec<&str> = table
        .global_secondary_indexes
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    expected_indexes.sort_unstable();
    let mut actual_indexes: Vec<&str> = described
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name())
        .collect();
    actual_indexes.sort_unstable();
    d.check(
        "GlobalSecondaryIndexes",
        expected_indexes.join(", "),
        actual_indexes.join(", "),
    );
    let billing = described
        .billing_mode_summary()
        .and_then(|b| b.billing_mode())
        .map_or("PROVISIONED", |b| b.as_str());
    d.check("BillingMode", "PAY_PER_REQUEST", billing);
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&table.name)
        .send()
        .await
        .map_err(aws("DescribeTimeToLive", &table.name))?
        .time_to_live_description;
    let actual_ttl = match ttl {
        Some(t)
            if matches!(
                t.time_to_live_status,
                Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
            ) =>
        {
            format!("enabled on {}", t.attribute_name.unwrap_or_default())
        }
        _ => "disabled".to_owned(),
    };
    let expected_ttl = match &table.ttl_attribute {
        Some(a) => format!("enabled on {a}"),
        None => "disabled".to_owned(),
    };
    d.check("TimeToLive", expected_ttl, actual_ttl);
    d.check(
        "StreamSpecification",
        table
            .stream_view_type
            .map_or("disabled", StreamViewType::as_str),
        enabled_stream(&described).unwrap_or("disabled"),
    );
    Ok(d.out)
}

fn key_schema(keys: &[KeyAttribute]) -> Vec<KeySchemaElement> {
    keys.iter()
        .map(|key| {
            KeySchemaElement::builder()
                .attribute_name(&key.name)
                .key_type(key_type(key.key_type))
                .build()
                .expect("name and type are set")
        })
        .collect()
}

fn projection(projection: &Projection) -> aws_sdk_dynamodb::types::Projection {
    let p = aws_sdk_dynamodb::types::Projection::builder();
    match projection {
        Projection::KeysOnly => p.projection_type(ProjectionType::KeysOnly),
        Projection::All => p.projection_type(ProjectionType::All),
        Projection::Include(names) => p
            .projection_type(ProjectionType::Include)
            .set_non_key_attributes(Some(names.clone())),
    }
    .build()
}
