//! Where a stream mapping reads: DynamoDB Streams or Kinesis Data Streams. Both are a stream
//! of shards, each read in order from a position with shard iterators; only the calls and the
//! record shape differ, so one [`Source`] serves the shard pollers of both.

use aws_sdk_dynamodbstreams::types::ShardIteratorType as DynamoDbIteratorType;
use aws_sdk_kinesis::types::ShardIteratorType as KinesisIteratorType;

use super::event::ShardRecord;
use crate::template::StartingPosition;

/// Which service a stream ARN belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// A DynamoDB table's stream (`arn:aws:dynamodb:...:table/T/stream/LABEL`).
    DynamoDb,
    /// A Kinesis data stream (`arn:aws:kinesis:...:stream/NAME`).
    Kinesis,
}

impl StreamKind {
    /// The kind of the stream `arn` names; `None` for an ARN of another service (or not an ARN).
    ///
    /// ```
    /// use local_aws::runner::StreamKind;
    /// assert_eq!(StreamKind::of_arn("arn:aws:kinesis:us-east-1:1:stream/s"), Some(StreamKind::Kinesis));
    /// assert_eq!(StreamKind::of_arn("arn:aws:dynamodb:us-east-1:1:table/t/stream/x"), Some(StreamKind::DynamoDb));
    /// assert_eq!(StreamKind::of_arn("arn:aws:sqs:us-east-1:1:q"), None);
    /// ```
    pub fn of_arn(arn: &str) -> Option<Self> {
        let arn = crate::arn::Arn::parse(arn).ok()?;
        match arn.service {
            "dynamodb" if arn.resource.contains("/stream/") => Some(Self::DynamoDb),
            "kinesis" if arn.resource.starts_with("stream/") => Some(Self::Kinesis),
            _ => None,
        }
    }

    /// The key of the batch description in the invocation record Lambda sends to an on-failure
    /// destination: `DDBStreamBatchInfo` or `KinesisBatchInfo`.
    pub fn batch_info_key(self) -> &'static str {
        match self {
            Self::DynamoDb => "DDBStreamBatchInfo",
            Self::Kinesis => "KinesisBatchInfo",
        }
    }
}

/// A shard as the mapping needs it.
pub(super) struct ShardInfo {
    pub(super) id: String,
    /// The parent shard (split) and the adjacent parent (merge): read to their end first.
    pub(super) parents: Vec<String>,
}

/// Where a shard's iterator (re)starts.
#[derive(Clone, Debug)]
pub(super) enum Position {
    /// The mapping's starting position (nothing read yet).
    Start(StartingPosition),
    /// After the last record read.
    After(String),
}

/// Why no shard iterator could be had.
pub(super) struct IteratorError {
    pub(super) message: String,
    /// The position is past the stream's retention.
    pub(super) trimmed: bool,
}

/// One `GetRecords` answer.
pub(super) struct Page {
    pub(super) records: Vec<ShardRecord>,
    /// Records without a sequence number (skipped).
    pub(super) skipped: usize,
    /// `None`: the shard is closed and read to its end.
    pub(super) next: Option<String>,
}

/// The client a stream mapping reads with.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    DynamoDb(aws_sdk_dynamodbstreams::Client),
    Kinesis(aws_sdk_kinesis::Client),
}

fn ddb_error<E: std::error::Error + 'static>(e: E) -> String {
    aws_sdk_dynamodbstreams::error::DisplayErrorContext(&e).to_string()
}

fn kinesis_error<E: std::error::Error + 'static>(e: E) -> String {
    aws_sdk_kinesis::error::DisplayErrorContext(&e).to_string()
}

/// The execution role Lambda names as `invokeIdentityArn`: locally, the role named after the
/// function, in its account.
fn execution_role(function_arn: &str, function_name: &str) -> String {
    match crate::arn::Arn::parse(function_arn) {
        Ok(a) => format!(
            "arn:{}:iam::{}:role/{function_name}",
            a.partition, a.account
        ),
        Err(_) => format!("arn:aws:iam:::role/{function_name}"),
    }
}

impl Source {
    /// Every shard of the stream (`DescribeStream` or `ListShards`, page by page).
    pub(super) async fn shards(&self, stream_arn: &str) -> Result<Vec<ShardInfo>, String> {
        let mut out = Vec::new();
        match self {
            Self::DynamoDb(client) => {
                let mut start: Option<String> = None;
                loop {
                    let page = client
                        .describe_stream()
                        .stream_arn(stream_arn)
                        .set_exclusive_start_shard_id(start.take())
                        .send()
                        .await
                        .map_err(ddb_error)?;
                    let description = page
                        .stream_description
                        .ok_or("DescribeStream: the answer has no StreamDescription")?;
                    out.extend(
                        description
                            .shards
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|s| {
                                Some(ShardInfo {
                                    id: s.shard_id?,
                                    parents: s.parent_shard_id.into_iter().collect(),
                                })
                            }),
                    );
                    match description.last_evaluated_shard_id {
                        Some(last) => start = Some(last),
                        None => return Ok(out),
                    }
                }
            }
            Self::Kinesis(client) => {
                let mut token: Option<String> = None;
                loop {
                    // A page after the first names its token alone.
                    let request = match token.take() {
                        Some(t) => client.list_shards().next_token(t),
                        None => client.list_shards().stream_arn(stream_arn),
                    };
                    let page = request.send().await.map_err(kinesis_error)?;
                    out.extend(page.shards().iter().map(|s| {
                        ShardInfo {
                            id: s.shard_id().to_owned(),
                            parents: s
                                .parent_shard_id()
                                .into_iter()
                                .chain(s.adjacent_parent_shard_id())
                                .map(str::to_owned)
                                .collect(),
                        }
                    }));
                    match page.next_token() {
                        Some(t) => token = Some(t.to_owned()),
                        None => return Ok(out),
                    }
                }
            }
        }
    }

    /// A shard iterator at `position`; `None`: the shard has nothing more (DynamoDB Streams).
    pub(super) async fn iterator(
        &self,
        stream_arn: &str,
        shard_id: &str,
        position: &Position,
    ) -> Result<Option<String>, IteratorError> {
        match self {
            Self::DynamoDb(client) => {
                let request = client
                    .get_shard_iterator()
                    .stream_arn(stream_arn)
                    .shard_id(shard_id);
                let request = match position {
                    Position::Start(StartingPosition::TrimHorizon) => {
                        request.shard_iterator_type(DynamoDbIteratorType::TrimHorizon)
                    }
                    Position::Start(StartingPosition::Latest) => {
                        request.shard_iterator_type(DynamoDbIteratorType::Latest)
                    }
                    Position::After(seq) => request
                        .shard_iterator_type(DynamoDbIteratorType::AfterSequenceNumber)
                        .sequence_number(seq),
                };
                match request.send().await {
                    Ok(out) => Ok(out.shard_iterator),
                    Err(e) => Err(IteratorError {
                        trimmed: e
                            .as_service_error()
                            .is_some_and(|e| e.is_trimmed_data_access_exception()),
                        message: ddb_error(e),
                    }),
                }
            }
            Self::Kinesis(client) => {
                let request = client
                    .get_shard_iterator()
                    .stream_arn(stream_arn)
                    .shard_id(shard_id);
                let request = match position {
                    Position::Start(StartingPosition::TrimHorizon) => {
                        request.shard_iterator_type(KinesisIteratorType::TrimHorizon)
                    }
                    Position::Start(StartingPosition::Latest) => {
                        request.shard_iterator_type(KinesisIteratorType::Latest)
                    }
                    Position::After(seq) => request
                        .shard_iterator_type(KinesisIteratorType::AfterSequenceNumber)
                        .starting_sequence_number(seq),
                };
                // A position past retention is not told apart here: its error is counted and the
                // read tried again, like any other.
                match request.send().await {
                    Ok(out) => Ok(out.shard_iterator().map(str::to_owned)),
                    Err(e) => Err(IteratorError {
                        trimmed: false,
                        message: kinesis_error(e),
                    }),
                }
            }
        }
    }

    /// The records at `iterator` of shard `shard_id`, as the event carries them.
    pub(super) async fn records(
        &self,
        mapping: &super::StreamEventSourceMapping,
        shard_id: &str,
        iterator: String,
    ) -> Result<Page, String> {
        match self {
            Self::DynamoDb(client) => {
                let out = client
                    .get_records()
                    .shard_iterator(iterator)
                    .send()
                    .await
                    .map_err(ddb_error)?;
                let raw = out.records.unwrap_or_default();
                let records: Vec<ShardRecord> = raw
                    .iter()
                    .filter_map(|r| ShardRecord::new(r, &mapping.stream_arn))
                    .collect();
                Ok(Page {
                    skipped: raw.len() - records.len(),
                    records,
                    next: out.next_shard_iterator,
                })
            }
            Self::Kinesis(client) => {
                let out = client
                    .get_records()
                    .stream_arn(&mapping.stream_arn)
                    .shard_iterator(iterator)
                    .send()
                    .await
                    .map_err(kinesis_error)?;
                let role = execution_role(&mapping.function_arn, &mapping.function_name);
                let records: Vec<ShardRecord> = out
                    .records()
                    .iter()
                    .filter_map(|r| {
                        ShardRecord::from_kinesis(r, shard_id, &mapping.stream_arn, &role)
                    })
                    .collect();
                Ok(Page {
                    skipped: out.records().len() - records.len(),
                    records,
                    next: out.next_shard_iterator().map(str::to_owned),
                })
            }
        }
    }

    /// For a DynamoDB stream: whether `ListStreams` for its table lists it (`Ok(None)` when
    /// there is nothing to check: a Kinesis stream, or an ARN without a table).
    pub(super) async fn listed(&self, stream_arn: &str) -> Result<Option<bool>, String> {
        let Self::DynamoDb(client) = self else {
            return Ok(None);
        };
        let Some(table) = crate::arn::Arn::parse(stream_arn)
            .ok()
            .and_then(|a| a.table_name())
        else {
            return Ok(None);
        };
        let out = client
            .list_streams()
            .table_name(table)
            .send()
            .await
            .map_err(ddb_error)?;
        Ok(Some(
            out.streams
                .unwrap_or_default()
                .iter()
                .any(|s| s.stream_arn.as_deref() == Some(stream_arn)),
        ))
    }

    /// The service's name in messages.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Self::DynamoDb(_) => "DynamoDB Streams",
            Self::Kinesis(_) => "Kinesis",
        }
    }
}
