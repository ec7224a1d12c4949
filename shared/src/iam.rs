//! The IAM a function needs, per mode and per option: every AWS action the library's requests
//! are authorized by, on which resource, and why.
//!
//! The table below is complete for the library's DynamoDB and SQS requests: it is every `send()`
//! of its DynamoDB and SQS clients, as IAM authorizes it (a stream or Kafka consumer's one
//! Lambda request is described in [its section](#stream-and-kafka-consumers)). The test
//! `tests/iam_per_mode/` reads this table, runs each mode and option through the
//! [`BatchProcessor`](crate::batch::BatchProcessor), and a [`Consumer`](crate::consumer::Consumer)
//! of each mode with its defaults, on a local endpoint with clients that refuse any request the
//! table does not grant for that run, and checks that the run passes and that the actions it used
//! are exactly the table's: none missing, none granted and unused.
//!
//! # How IAM sees the requests
//!
//! - A `TransactWriteItems` is authorized action by action: a `Put` as `dynamodb:PutItem`, an
//!   `Update` as `dynamodb:UpdateItem`, a `Delete` as `dynamodb:DeleteItem`, a `ConditionCheck`
//!   as `dynamodb:ConditionCheckItem`, each on its own table. There is no
//!   `dynamodb:TransactWriteItems` action.
//! - `SendMessageBatch` is authorized as `sqs:SendMessage`, `ChangeMessageVisibilityBatch` as
//!   `sqs:ChangeMessageVisibility`.
//! - The stored record a refused conditional write returns (`ReturnValuesOnConditionCheckFailure
//!   = ALL_OLD`, how every mode answers a duplicate) needs no `dynamodb:GetItem`.
//! - Every item the library writes or reads in the idempotency table has the stored key
//!   `prefix#key` (the prefix is the function's name by default,
//!   [`Idempotency::with_key_prefix`](crate::Idempotency::with_key_prefix)), so a
//!   `dynamodb:LeadingKeys` condition `["prefix#*"]` can scope the item actions on a shared table
//!   to the function's own records. `DescribeTable` and `DescribeTimeToLive` name no item: grant
//!   them in a statement without that condition.
//! - Lambda's event source mapping reads the source queue with the function's role
//!   (`sqs:ReceiveMessage`, `sqs:DeleteMessage`, `sqs:GetQueueAttributes`, as in
//!   `AWSLambdaSQSQueueExecutionRole`), and the function writes its logs
//!   (`logs:CreateLogStream`, `logs:PutLogEvents`). Those are Lambda's, not the library's, and
//!   are not in the table. For a stream or Kafka source the mapping's reads are Lambda's too:
//!   `dynamodb:DescribeStream`, `dynamodb:GetRecords`, `dynamodb:GetShardIterator`,
//!   `dynamodb:ListStreams` on a DynamoDB stream (`AWSLambdaDynamoDBExecutionRole`);
//!   `kinesis:DescribeStream`, `kinesis:DescribeStreamSummary`, `kinesis:GetRecords`,
//!   `kinesis:GetShardIterator`, `kinesis:ListShards`, `kinesis:ListStreams`,
//!   `kinesis:SubscribeToShard` on a Kinesis stream (`AWSLambdaKinesisExecutionRole`); the MSK
//!   cluster's and its network's on Kafka (`AWSLambdaMSKExecutionRole`); and `sqs:SendMessage`
//!   (or `sns:Publish`) on the mapping's own on-failure destination.
//!
//! # The modes and options
//!
//! The first column of the table names one of these; a function needs the rows of its mode and
//! of each option it uses. A [`Consumer`](crate::consumer::Consumer) is in the mode of its
//! builder's [`idempotent`](crate::consumer::ConsumerBuilder::idempotent) (**lease**),
//! [`transactional`](crate::consumer::ConsumerBuilder::transactional) (**transactional**, or
//! **transactional, carried record** when the handler's transaction carries the record) or
//! [`inline`](crate::consumer::ConsumerBuilder::inline) (**inline**), and has options by
//! default: see [a consumer's rows](#a-consumers-rows) below.
//!
//! - **lease**: [`idempotent`](crate::batch::RecordHandlerExt::idempotent) (and the engine's
//!   [`run`](crate::Idempotency::run), [`acquire`](crate::Idempotency::acquire),
//!   [`complete`](crate::Idempotency::complete), [`fail`](crate::Idempotency::fail),
//!   [`reset_attempts`](crate::Idempotency::reset_attempts)).
//! - **transactional**: [`transactional`](crate::batch::RecordHandlerExt::transactional) (and
//!   [`Idempotency::transact`](crate::Idempotency::transact)), the record an action of its own.
//! - **transactional, carried record**: the same with the record on one of the handler's writes
//!   ([`Transaction::carry_record`](crate::transaction::Transaction::carry_record)).
//! - **inline**: [`inline`](crate::batch::RecordHandlerExt::inline) (and
//!   [`Idempotency::put_inline`](crate::Idempotency::put_inline)).
//! - **inline, attempts read**: the inline mode with
//!   [`Inline::with_attempts_read`](crate::batch::Inline::with_attempts_read), in addition to
//!   the rows of **inline**.
//! - **item lookup**: [`Inline::with_item_lookup`](crate::batch::Inline::with_item_lookup),
//!   [`Transactional::with_item_lookup`](crate::batch::Transactional::with_item_lookup) (with the
//!   record carried) or
//!   [`ConsumerBuilder::with_item_lookup`](crate::consumer::ConsumerBuilder::with_item_lookup),
//!   in addition to the rows of the mode: a failed attempt reads the message's item before it is
//!   counted.
//! - **local cache**: [`Idempotency::with_local_cache`](crate::Idempotency::with_local_cache), on
//!   any mode (a consumer's `IDEMPOTENCY_LOCAL_CACHE`).
//! - **attempt budget**: [`BatchProcessor::max_attempts`](crate::batch::BatchProcessor::max_attempts).
//! - **backoff**: [`BatchProcessor::with_backoff`](crate::batch::BatchProcessor::with_backoff)
//!   ([`VisibilityBackoff`](crate::backoff::VisibilityBackoff)).
//! - **dead-letter queue**: [`BatchProcessor::with_dead_letter`](crate::batch::BatchProcessor::with_dead_letter)
//!   ([`DeadLetter`](crate::dead_letter::DeadLetter)).
//! - **table check**: the cold-start check of the idempotency table (feature `dynamodb`,
//!   `DynamoDbBackend::check_table`). Needed for the check, optional for processing: without
//!   the grant (or when the check is throttled or cannot reach DynamoDB) a consumer logs a
//!   warning naming the action and the fix, and processes its records.
//! - **redrive check**: [`redrive_policy::check`](crate::redrive_policy::check), the queue's
//!   `maxReceiveCount` against the attempt budget.
//! - **queue check**: [`redrive_policy::check_queue`](crate::redrive_policy::check_queue) and
//!   [`warn_if_unsafe`](crate::redrive_policy::warn_if_unsafe): the rows of **redrive check**,
//!   and these.
//! - **refusal diagnosis**: in every mode on DynamoDB, a request the idempotency table refuses
//!   (a key schema that does not fit, a missing table) is explained by describing the table.
//!   Without the grant the error still says the request was refused, and that the table could not
//!   be described.
//! - **get**, **forget**: [`Idempotency::get`](crate::Idempotency::get) and
//!   [`Idempotency::forget`](crate::Idempotency::forget), for an operator's tool or a test; the
//!   modes never call them.
//! - **publisher**: [`publish::Publisher`](crate::publish::Publisher) (and
//!   [`publish::Batcher`](crate::publish::Batcher)).

//!
//! The resources: the **idempotency table** (the backend's), the **effect tables** (the tables
//! of the handler's writes), the **source queue** (the queue of the event), the **dead-letter
//! queue** (the [`DeadLetter`](crate::dead_letter::DeadLetter)'s, which is also the one the
//! source queue's redrive policy names when the queue check runs) and the **publisher's queue**.
//!
//! ## A consumer's rows
//!
//! A consumer of `Consumer::from_env` with `DEAD_LETTER_QUEUE_URL` set, with or without
//! `SOURCE_QUEUE_URL` (or of `ConsumerBuilder::from_config` or `from_clients` with the same
//! settings; feature `dynamodb`), needs the rows of its mode and of **attempt budget**,
//! **backoff**, **dead-letter queue**, **table check**, **redrive check** and **queue check**.
//!
//! Each setting that turns a default off drops its option's rows: no `DEAD_LETTER_QUEUE_URL`
//! (the queue check still reads the dead-letter queue that the source queue's redrive policy
//! names), `BACKOFF_BASE_SECONDS=0` or
//! [`without_backoff`](crate::consumer::ConsumerBuilder::without_backoff), `MAX_ATTEMPTS=0` or
//! [`without_attempt_budget`](crate::consumer::ConsumerBuilder::without_attempt_budget) (rows of
//! no action). A consumer of [`Consumer::builder`](crate::consumer::Consumer::builder) has none
//! of these options until it is given an SQS client, and no table check.
//!
//! # The table
//!
//! | Mode or option | Action | Resource | Why |
//! | --- | --- | --- | --- |
//! | lease | `dynamodb:UpdateItem` | idempotency table | Acquire the key (one conditional write that creates or takes over the record; an expired record, or a failed one of another payload, is replaced by a second), mark it completed, record a failure, reset the attempts after dead-lettering. |
//! | lease | none | effect tables | The handler makes its own writes with its own client: grant what it does. |
//! | transactional | `dynamodb:PutItem` | idempotency table | The record, the first action of each `TransactWriteItems`; a duplicate is that action refused. |
//! | transactional | `dynamodb:UpdateItem` | idempotency table | A failed attempt's record, with the error and the attempts (one conditional update, a second to replace an expired record or one of another payload, a third should it vanish between the two); the reset of the attempts after dead-lettering. |
//! | transactional | `dynamodb:GetItem` | idempotency table | The read before a redelivery (receive count above 1, [`Idempotency::peek`](crate::Idempotency::peek)): a duplicate answered without a transaction, the handler told its attempt. |
//! | transactional | `dynamodb:PutItem` | effect tables | Each `Put` of the handler's transaction (only when it has one). |
//! | transactional | `dynamodb:UpdateItem` | effect tables | Each `Update` of the handler's transaction (only when it has one). |
//! | transactional | `dynamodb:DeleteItem` | effect tables | Each `Delete` of the handler's transaction (only when it has one). |
//! | transactional | `dynamodb:ConditionCheckItem` | effect tables | Each `ConditionCheck` of the handler's transaction (only when it has one). |
//! | transactional, carried record | `dynamodb:UpdateItem` | idempotency table | A failed attempt's record (a failure has no write to ride on), and the reset of the attempts after dead-lettering. |
//! | transactional, carried record | `dynamodb:GetItem` | idempotency table | The read before a redelivery, for the failed attempts so far (a completed record is on its item, and answered by the refused transaction). |
//! | transactional, carried record | `dynamodb:PutItem` | effect tables | Each `Put` of the handler's transaction, the carrier's too when it is a `Put` (the record's attributes are on its item); none on the idempotency table. |
//! | transactional, carried record | `dynamodb:UpdateItem` | effect tables | Each `Update` of the handler's transaction, the carrier's too when it is an `Update`. |
//! | transactional, carried record | `dynamodb:DeleteItem` | effect tables | Each `Delete` of the handler's transaction (only when it has one). |
//! | transactional, carried record | `dynamodb:ConditionCheckItem` | effect tables | Each `ConditionCheck` of the handler's transaction (only when it has one). |
//! | inline | `dynamodb:PutItem` | effect tables | The handler's one new item with the record on it, one conditional `PutItem`; a duplicate is that write refused. |
//! | inline | `dynamodb:UpdateItem` | idempotency table | A failed attempt's record (a failure has no item to ride on), and the reset of the attempts after dead-lettering. |
//! | inline, attempts read | `dynamodb:GetItem` | idempotency table | The read of the failed record before a redelivery, so that the handler is told the store's attempt. |
//! | item lookup | `dynamodb:GetItem` | effect tables | A failed attempt reads the message's item (one strongly consistent read) before it is counted: when the item carries the key's record (inline, or transactional with the record carried), another delivery did the work and the message is a duplicate. On the failure path only. |
//! | local cache | none | none | Answers keys completed in this execution environment from memory: fewer requests, never other actions. |
//! | attempt budget | none | none | Counted by the failure records of the mode (its `dynamodb:UpdateItem`); nothing of its own. |
//! | backoff | `sqs:GetQueueUrl` | source queue | The queue's URL from the record's event source ARN, once per execution environment. |
//! | backoff | `sqs:ChangeMessageVisibility` | source queue | Each failed record's visibility timeout, in `ChangeMessageVisibilityBatch` calls. |
//! | dead-letter queue | `sqs:SendMessage` | dead-letter queue | The copy of a record failed for good, in a `SendMessageBatch`. |
//! | dead-letter queue | `sqs:GetQueueAttributes` | dead-letter queue | Its `MaximumMessageSize`, read once for a copy over 1 KiB, unless given with [`DeadLetter::max_message_size`](crate::dead_letter::DeadLetter::max_message_size); without it the copy is checked against 1 MiB. |
//! | dead-letter queue | `dynamodb:UpdateItem` | idempotency table | The reset of the key's attempts once its copy is sent, so that a redriven message has a new budget (the same action as the mode's own failure records). |
//! | table check | `dynamodb:DescribeTable` | idempotency table | The table exists, and its key schema fits the backend. Without the grant, a warning that the check could not run, and the records are processed. |
//! | table check | `dynamodb:DescribeTimeToLive` | idempotency table | A warning when the TTL is not on the expiry attribute; without the grant, a warning that it could not be read. |
//! | redrive check | `sqs:GetQueueUrl` | source queue | The queue's URL, when it is given by ARN (the event source ARN). |
//! | redrive check | `sqs:GetQueueAttributes` | source queue | Its `RedrivePolicy` (and, for the queue check, `MessageRetentionPeriod` and `MaximumMessageSize`). |
//! | queue check | `sqs:GetQueueUrl` | dead-letter queue | Its URL, from the ARN in the source queue's redrive policy. |
//! | queue check | `sqs:GetQueueAttributes` | dead-letter queue | Its `MessageRetentionPeriod` and `MaximumMessageSize`, against the source queue's and the idempotency expiry. |
//! | refusal diagnosis | `dynamodb:DescribeTable` | idempotency table | What does not fit between the table and the backend, named in the error of a refused request. |
//! | get | `dynamodb:GetItem` | idempotency table | The record of a key. |
//! | forget | `dynamodb:DeleteItem` | idempotency table | The record of a key deleted, so that its next attempt runs. |
//! | publisher | `sqs:SendMessage` | publisher's queue | The messages, in `SendMessageBatch` calls. |
//!
//! So to process its records a lease consumer needs `dynamodb:UpdateItem` on the idempotency
//! table and no other item action there: neither `PutItem`, `GetItem` nor `DeleteItem`. A
//! transactional one needs `PutItem`, `UpdateItem` and `GetItem` there; an inline one
//! `UpdateItem` (and `GetItem` with the attempts read), plus `PutItem` on its item's table (and
//! `GetItem` there with the item lookup).
//! Each also needs `dynamodb:DescribeTable` (and `dynamodb:DescribeTimeToLive`) on the
//! idempotency table for its cold-start check, which finds a missing table or one keyed
//! otherwise before a record runs, and explains a refused request: optional for processing
//! (without it, a warning at cold start), but without it a table that does not fit is found
//! only by its first refused write, and explained less.
//!
//! # Stream and Kafka consumers
//!
//! Over DynamoDB stream, Kinesis or Kafka records ([`EventSource`](crate::batch::EventSource)),
//! a mode needs the rows above with these differences, all of actions the table already names:
//!
//! - A replay from a checkpoint looks like a first delivery, so the transactional mode reads
//!   the record before its commit (its own rows have the read). The inline mode goes straight
//!   to its write, and reads the record only before it would dead-letter a failure no request
//!   told the store of (an item over the size limit: the replay of a record dead-lettered
//!   before is answered there): it needs the rows of **inline, attempts read**
//!   (`dynamodb:GetItem` on the idempotency table).
//! - A dead-lettered record's key is settled in the idempotency table (taken and completed,
//!   `{"deadLettered": reason}` as its result) instead of having its attempts reset, so that a
//!   replay of its shard neither runs it nor sends it again: the same `dynamodb:UpdateItem` as
//!   the **dead-letter queue** row.
//! - There is no backoff and no source queue check (they are SQS's).
//! - A [`Consumer`](crate::consumer::Consumer) of such a source checks its event source mapping
//!   at cold start (feature `mapping-check`, on by default) with
//!   `lambda:ListEventSourceMappings`, granted on `Resource: "*"` (the action names no
//!   resource). Optional for processing: without the grant, a warning that the check could not
//!   run. It is the one request of the library outside the table.
//!
//! The workspace README's IAM table gives these per source, a column each; `tests/iam_per_mode/`
//! runs a lease consumer of each source (a record done, one failed and replayed, one
//! dead-lettered, the table check) under exactly its column's grants. The inline and
//! transactional modes on a stream are not run under its guard yet.
//!
//! # A policy for the common inline consumer
//!
//! An inline [`Consumer`](crate::consumer::Consumer) of `Consumer::from_env` with
//! `DEAD_LETTER_QUEUE_URL` set and an item lookup
//! ([`ConsumerBuilder::with_item_lookup`](crate::consumer::ConsumerBuilder::with_item_lookup)):
//! the rows of **inline**, of **item lookup** and of [a consumer's rows](#a-consumers-rows) (an
//! attempt budget, backoff, the dead-letter queue and both cold-start checks), for a SAM function's `Policies` or an `AWS::IAM::Role`'s
//! `PolicyDocument`. `my-consumer` is the key prefix (`IDEMPOTENCY_KEY_PREFIX`, the function's
//! name by default); `IdempotencyTable`, `ItemsTable` (the new items' table), `Queue`
//! and `DeadLetterQueue` are the template's resources.
//!
//! ```yaml
//! Version: "2012-10-17"
//! Statement:
//!   - Sid: Logs
//!     Effect: Allow
//!     Action: [logs:CreateLogStream, logs:PutLogEvents]
//!     Resource: "*" # or the function's log group
//!   - Sid: SourceQueue
//!     Effect: Allow
//!     Action:
//!       - sqs:ReceiveMessage # the event source mapping
//!       - sqs:DeleteMessage # the event source mapping
//!       - sqs:GetQueueAttributes # the event source mapping; the cold-start queue check
//!       - sqs:GetQueueUrl # backoff and queue check: the URL from the event source ARN
//!       - sqs:ChangeMessageVisibility # backoff
//!     Resource: !GetAtt Queue.Arn
//!   - Sid: IdempotencyRecords # failed attempts, and their reset after dead-lettering
//!     Effect: Allow
//!     Action: [dynamodb:UpdateItem]
//!     Resource: !GetAtt IdempotencyTable.Arn
//!     Condition:
//!       ForAllValues:StringLike:
//!         dynamodb:LeadingKeys: ["my-consumer#*"]
//!   - Sid: IdempotencyTableCheck # cold start, and the diagnosis of a refused request;
//!     # optional for processing (without it, a warning at cold start)
//!     Effect: Allow
//!     Action: [dynamodb:DescribeTable, dynamodb:DescribeTimeToLive]
//!     Resource: !GetAtt IdempotencyTable.Arn
//!   - Sid: NewItems # the one new item, with its record
//!     Effect: Allow
//!     Action:
//!       - dynamodb:PutItem # the item and its record, in one conditional write
//!       - dynamodb:GetItem # a failed attempt reads the item, with the item lookup
//!     Resource: !GetAtt ItemsTable.Arn
//!   - Sid: DeadLetters
//!     Effect: Allow
//!     Action:
//!       - sqs:SendMessage # the copy
//!       - sqs:GetQueueAttributes # its MaximumMessageSize; the cold-start queue check
//!       - sqs:GetQueueUrl # cold start: its URL from the redrive policy's ARN
//!     Resource: !GetAtt DeadLetterQueue.Arn
//! ```
//!
//! Each statement's comments say what needs it; drop what none of a function's options does.
//! With [`Inline::with_attempts_read`](crate::batch::Inline::with_attempts_read), add
//! `dynamodb:GetItem` to `IdempotencyRecords`. Without the item lookup, `dynamodb:GetItem`
//! goes from `NewItems`. Without a dead-letter queue (no
//! `DEAD_LETTER_QUEUE_URL`), `DeadLetters` keeps what the queue check reads
//! (`sqs:GetQueueAttributes`, `sqs:GetQueueUrl`), and without the queue check either, it goes.
//! Without backoff (`BACKOFF_BASE_SECONDS=0`), `sqs:ChangeMessageVisibility` goes, and
//! `sqs:GetQueueUrl` on the source queue unless the queue check is given the event source ARN.
//! Without the table check, `dynamodb:DescribeTable` still explains a refused request.
