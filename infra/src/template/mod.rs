//! The SAM template as a model: parameters, SQS queues (with their redrive and redrive-allow
//! policies), DynamoDB tables (with their streams), Kinesis data streams and functions with
//! their event sources (SQS queues, DynamoDB and Kinesis streams with their filters and
//! on-failure queues) and HTTP routes.
//!
//! SAM is AWS's to expand: a template with `AWS::Serverless::*` resources goes through SAM's own
//! translator first ([`translated`]: the pinned `aws-sam-translator`, cached per template text),
//! and the model reads the CloudFormation it writes: `AWS::Lambda::Function` (with `Globals`
//! merged in), `AWS::Lambda::EventSourceMapping`, the `AWS::ApiGatewayV2::Api` whose OpenAPI
//! `Body` holds the routes and their JWT authorizer, `AWS::Lambda::Url`. What is left of
//! CloudFormation (parameters, mappings, conditions, intrinsics) is evaluated here.
//!
//! Only what the local harness needs is modelled; everything that has no local effect (IAM roles,
//! log groups, alarms, topics, encryption settings) is skipped. Properties that *would* change
//! behaviour but are not emulated (local secondary indexes) are rejected with an error rather
//! than silently ignored, so the harness never runs something different from what is deployed.
//!
//! Values are resolved while parsing where they can be: parameters (defaults, or the overrides
//! in [`TemplateOptions`]), `AWS::*` pseudo parameters inside names, `!FindInMap` lookups in
//! the template's [`Mappings`], and [`Conditions`]: a resource whose `Condition` is false is left
//! out, `!If` takes the branch its condition picks, `!Ref AWS::NoValue` removes its key.
//! References to resources (`!Ref PaymentsQueue`, `!GetAtt PaymentsQueue.Arn`) in environment
//! variables stay symbolic ([`Expr`]) until the resources exist; see
//! [`Provisioned::function_env`](crate::provision::Provisioned::function_env).
//!
//! ```
//! use local_aws::template::{Naming, Template, TemplateOptions};
//!
//! let options = TemplateOptions::default()
//!     .naming(Naming::prefix("t1-"))
//!     .parameter("MaxAttempts", "3");
//! let template = Template::load_project(&options).unwrap();
//!
//! let queue = &template.queues["PaymentsQueue"];
//! assert_eq!(queue.name, "t1-payments.fifo");
//! // Derived from MaxAttempts through Mappings.RedriveBackstop: the attempt bound
//! // (10 - 1) * (3 - 1) + 3, plus 24 receives for an outage as long as the queue's retention.
//! assert_eq!(queue.redrive.as_ref().unwrap().max_receive_count, 45);
//! assert_eq!(template.functions["PaymentProcessorFunction"].timeout_seconds, 30);
//! ```

// YAML crate choice: `serde_yaml_ng`, the maintained continuation of dtolnay's (archived)
// `serde_yaml`, with the same API. Its `Value::Tagged` keeps CloudFormation's short-form tags
// (`!Ref X`, `!GetAtt A.B`, `!Sub "..."`), which plain YAML loaders drop or reject. The other
// candidates: `serde_norway` (another fork, same API, fewer users); `serde_yml` (deprecated);
// `yaml-rust2`/`saphyr` (no serde, hand-walked events for the same result).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

mod check;
mod conditions;
mod events;
mod expr;
mod filter;
mod functions;
mod indexes;
mod kinesis;
mod mappings;
mod naming;
mod parameters;
mod parse;
mod resources;
mod sources;
mod stages;
mod translate;

pub use conditions::Conditions;
pub use events::{
    DynamoDbEventSource, HttpRoute, JwtConfiguration, KinesisEventSource, SqsEventSource,
    StartingPosition, Throttling,
};
pub use expr::intrinsic;
pub(crate) use expr::pseudo;
pub use expr::{Expr, Part};
pub use filter::{FilterError, FilterPattern};
pub use functions::Function;
pub use kinesis::KinesisStream;
pub use mappings::{MapValue, Mappings};
pub use naming::{Naming, TemplateOptions};
pub use parameters::Parameter;
pub use resources::{
    AttributeType, KeyAttribute, KeyType, Projection, Queue, Redrive, RedriveAllowPolicy,
    SecondaryIndex, StreamViewType, Table,
};
pub use translate::translated;

use expr::{PSEUDO, child_at, key_str, parse_expr, plain_scalar};
use parameters::parse_parameters;
use parse::Ctx;

const QUEUE: &str = "AWS::SQS::Queue";
const TABLE: &str = "AWS::DynamoDB::Table";
const KINESIS_STREAM: &str = "AWS::Kinesis::Stream";
const FUNCTION: &str = "AWS::Lambda::Function";
const EVENT_SOURCE_MAPPING: &str = "AWS::Lambda::EventSourceMapping";
const HTTP_API: &str = "AWS::ApiGatewayV2::Api";
const HTTP_API_STAGE: &str = "AWS::ApiGatewayV2::Stage";
const FUNCTION_URL: &str = "AWS::Lambda::Url";

/// Why a template could not be turned into a [`Template`].
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The text is not YAML.
    #[error("the template is not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// SAM's translator could not be run (not installed: `make tools-install`).
    #[error("SAM's translator: {message}")]
    Translator {
        /// What went wrong.
        message: String,
    },
    /// The YAML is not a template this harness can run (`at` is the path in the document,
    /// `Transform` when SAM's translator refused it).
    #[error("{at}: {message}")]
    Invalid {
        /// Where, e.g. `Resources.PaymentsQueue.Properties.VisibilityTimeout`.
        at: String,
        /// What is wrong.
        message: String,
    },
}

pub(super) fn invalid(at: &str, message: impl Into<String>) -> TemplateError {
    TemplateError::Invalid {
        at: at.to_owned(),
        message: message.into(),
    }
}

pub(super) type Result<T, E = TemplateError> = std::result::Result<T, E>;

/// A remark of [`Template::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The logical id concerned.
    pub resource: String,
    /// What is off.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.resource, self.message)
    }
}

/// The template, resolved (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Template {
    /// Parameters by name.
    pub parameters: BTreeMap<String, Parameter>,
    /// SQS queues by logical id.
    pub queues: BTreeMap<String, Queue>,
    /// DynamoDB tables by logical id.
    pub tables: BTreeMap<String, Table>,
    /// Kinesis data streams by logical id.
    pub kinesis_streams: BTreeMap<String, KinesisStream>,
    /// Functions by logical id.
    pub functions: BTreeMap<String, Function>,
    /// The HTTP APIs' JWT authorizers by name (what [`HttpRoute::authorizer`] names).
    pub jwt_authorizers: BTreeMap<String, JwtConfiguration>,
    /// The `Mappings` section (every `!FindInMap` is already resolved with it).
    pub mappings: Mappings,
    /// The `Conditions` section, evaluated (every `!If` and resource `Condition` is already
    /// applied with it).
    pub conditions: Conditions,
    /// The naming the names were built with.
    pub naming: Naming,
}

impl Template {
    /// The project's `template.yaml` (next to the workspace `Cargo.toml`).
    pub fn project_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml")
    }

    /// Parses the project's `template.yaml`.
    pub fn load_project(options: &TemplateOptions) -> Result<Self> {
        Self::from_file(Self::project_path(), options)
    }

    /// Parses the template at `path`.
    pub fn from_file(path: impl AsRef<Path>, options: &TemplateOptions) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, options)
    }

    /// Parses a template.
    ///
    /// ```
    /// use local_aws::template::{Template, TemplateOptions};
    ///
    /// let yaml = r#"
    /// Parameters:
    ///   Name: { Type: String, Default: jobs }
    /// Resources:
    ///   Jobs:
    ///     Type: AWS::SQS::Queue
    ///     Properties: { QueueName: !Sub "${Name}-${AWS::StackName}", VisibilityTimeout: 60 }
    /// "#;
    /// let template = Template::parse(yaml, &TemplateOptions::default()).unwrap();
    /// assert_eq!(template.queues["Jobs"].name, "jobs-local");
    /// assert_eq!(template.queues["Jobs"].visibility_timeout, 60);
    /// ```
    pub fn parse(yaml: &str, options: &TemplateOptions) -> Result<Self> {
        Self::from_cloudformation(&translated(yaml)?, options)
    }

    /// Reads a template that is CloudFormation already (what [`translated`] gives).
    pub fn from_cloudformation(doc: &Value, options: &TemplateOptions) -> Result<Self> {
        let root = doc
            .as_mapping()
            .ok_or_else(|| invalid("<root>", "not a mapping"))?;
        let parameters = parse_parameters(root, options)?;
        let mappings = Mappings::parse(root)?;
        let env = mappings::Env {
            parameters: &parameters,
            options,
        };
        let no_resources = BTreeMap::new();
        let conditions = Conditions::evaluate(
            root.get("Conditions")
                .map(|c| mappings.resolve(c, &env, "Conditions"))
                .transpose()?
                .as_ref(),
            &Ctx {
                parameters: &parameters,
                options,
                types: &no_resources,
            },
        )?;
        let resolved_resources = match root.get("Resources") {
            Some(Value::Mapping(r)) => {
                mappings.resolve(&Value::Mapping(conditions.resources(r)?), &env, "Resources")?
            }
            _ => return Err(invalid("Resources", "missing or not a mapping")),
        };
        let resources = resolved_resources
            .as_mapping()
            .expect("resolving keeps a mapping a mapping");
        let mut types = BTreeMap::new();
        for (id, resource) in resources {
            let id = key_str(id, "Resources")?;
            let at = format!("Resources.{id}");
            let kind = match resource.get("Type") {
                Some(Value::String(t)) => t.clone(),
                _ => return Err(invalid(&at, "missing Type")),
            };
            types.insert(id.to_owned(), kind);
        }
        let ctx = Ctx {
            parameters: &parameters,
            options,
            types: &types,
        };

        let mut template = Template {
            parameters: parameters.clone(),
            queues: BTreeMap::new(),
            tables: BTreeMap::new(),
            kinesis_streams: BTreeMap::new(),
            functions: BTreeMap::new(),
            jwt_authorizers: BTreeMap::new(),
            mappings: mappings.clone(),
            conditions: conditions.clone(),
            naming: options.naming.clone(),
        };
        let mut attached = Vec::new();
        let mut stages = Vec::new();
        let empty = Mapping::new();
        for (id, resource) in resources {
            let id = key_str(id, "Resources")?;
            let at = format!("Resources.{id}");
            let props = match resource.get("Properties") {
                None => &empty,
                Some(Value::Mapping(m)) => m,
                Some(_) => return Err(invalid(&format!("{at}.Properties"), "not a mapping")),
            };
            match types[id].as_str() {
                QUEUE => {
                    let queue = ctx.queue(id, props, &at)?;
                    template.queues.insert(id.to_owned(), queue);
                }
                TABLE => {
                    let table = ctx.table(id, props, &at)?;
                    template.tables.insert(id.to_owned(), table);
                }
                KINESIS_STREAM => {
                    let stream = ctx.kinesis_stream(id, props, &at)?;
                    template.kinesis_streams.insert(id.to_owned(), stream);
                }
                FUNCTION => {
                    let function = ctx.function(id, resource, props, &at)?;
                    template.functions.insert(id.to_owned(), function);
                }
                kind @ (EVENT_SOURCE_MAPPING | HTTP_API | FUNCTION_URL) => {
                    attached.push((kind, id, props))
                }
                HTTP_API_STAGE => stages.push((id, props)),
                _ => {}
            }
        }
        // Once every queue, table and function is known: what SAM made of the `Events`.
        for (kind, id, props) in attached {
            match kind {
                EVENT_SOURCE_MAPPING => ctx.event_source_mapping(&mut template, id, props)?,
                HTTP_API => ctx.http_api(&mut template, id, props)?,
                _ => ctx.function_url(&mut template, id, props)?,
            }
        }
        // Once every route is known: the stages' throttling of their API's routes.
        for (id, props) in stages {
            ctx.http_api_stage(&mut template, id, props)?;
        }
        for queue in template.queues.values() {
            if let Some(redrive) = &queue.redrive
                && !template.queues.contains_key(&redrive.dead_letter_queue)
            {
                return Err(invalid(
                    &format!("Resources.{}.Properties.RedrivePolicy", queue.logical_id),
                    format!("{} is not a queue", redrive.dead_letter_queue),
                ));
            }
        }
        template.resolve_redrive_allow_sources()?;
        Ok(template)
    }

    /// The resolved value of parameter `name`.
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name)?.value.as_deref()
    }

    /// The function whose `FunctionName` is `name`.
    pub fn function_by_name(&self, name: &str) -> Option<&Function> {
        self.functions.values().find(|f| f.name == name)
    }

    /// The queues in creation order: every dead-letter queue before the queues that use it.
    pub fn queues_in_creation_order(&self) -> Vec<&Queue> {
        let mut done = BTreeSet::new();
        let mut order = Vec::new();
        fn visit<'a>(
            t: &'a Template,
            q: &'a Queue,
            done: &mut BTreeSet<&'a str>,
            order: &mut Vec<&'a Queue>,
            depth: usize,
        ) {
            if done.contains(q.logical_id.as_str()) || depth > t.queues.len() {
                return;
            }
            if let Some(r) = &q.redrive
                && let Some(dlq) = t.queues.get(&r.dead_letter_queue)
            {
                visit(t, dlq, done, order, depth + 1);
            }
            if done.insert(&q.logical_id) {
                order.push(q);
            }
        }
        for q in self.queues.values() {
            visit(self, q, &mut done, &mut order, 0);
        }
        order
    }

    /// Every (function, DynamoDB stream event source) pair, enabled or not.
    pub fn dynamodb_event_sources(
        &self,
    ) -> impl Iterator<Item = (&Function, &DynamoDbEventSource)> {
        self.functions
            .values()
            .flat_map(|f| f.dynamodb_events.iter().map(move |e| (f, e)))
    }

    /// Every (function, Kinesis stream event source) pair, enabled or not.
    pub fn kinesis_event_sources(&self) -> impl Iterator<Item = (&Function, &KinesisEventSource)> {
        self.functions
            .values()
            .flat_map(|f| f.kinesis_events.iter().map(move |e| (f, e)))
    }

    /// Maps the `byQueue` sources of every `RedriveAllowPolicy` written as ARNs to the queues of
    /// the template they name (by the name before [`Naming`]).
    fn resolve_redrive_allow_sources(&mut self) -> Result<()> {
        let by_name: BTreeMap<String, String> = self
            .queues
            .values()
            .map(|q| (q.name.clone(), q.logical_id.clone()))
            .collect();
        let known: BTreeSet<String> = self.queues.keys().cloned().collect();
        for queue in self.queues.values_mut() {
            let Some(RedriveAllowPolicy::ByQueue(sources)) = &mut queue.redrive_allow_policy else {
                continue;
            };
            for source in sources.iter_mut() {
                if known.contains(source.as_str()) {
                    continue;
                }
                let name = source
                    .strip_prefix("arn:")
                    .and_then(|arn| arn.rsplit_once(':'))
                    .map(|(_, name)| self.naming.apply(name));
                match name.and_then(|n| by_name.get(&n)) {
                    Some(id) => *source = id.clone(),
                    None => {
                        return Err(invalid(
                            &format!(
                                "Resources.{}.Properties.RedriveAllowPolicy.sourceQueueArns",
                                queue.logical_id
                            ),
                            format!(
                                "{source:?} names no queue of this template (the harness maps source queues to their local names)"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Every (function, SQS event source) pair, enabled or not.
    pub fn sqs_event_sources(&self) -> impl Iterator<Item = (&Function, &SqsEventSource)> {
        self.functions
            .values()
            .flat_map(|f| f.sqs_events.iter().map(move |e| (f, e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Template> {
        Template::parse(yaml, &TemplateOptions::default())
    }

    #[test]
    fn short_and_long_form_intrinsics() {
        let t = parse(
            r#"
Parameters:
  P: { Type: String, Default: v }
Resources:
  Q: { Type: AWS::SQS::Queue }
  Things:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{ AttributeName: k, AttributeType: S }]
      KeySchema: [{ AttributeName: k, KeyType: HASH }]
  F:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          A: !Ref Q
          B: { Ref: Things }
          C: { "Fn::GetAtt": [Q, Arn] }
          D: !Sub "x-${P}-${Q.QueueName}-${!Lit}-${AWS::Region}"
          E: !Join [",", [a, !Ref P]]
          F: !Sub ["${X}/y", { X: !Ref P }]
"#,
        )
        .unwrap();
        let env = &t.functions["F"].environment;
        assert_eq!(env["A"].parts(), &[Part::Ref("Q".into())]);
        assert_eq!(env["B"].parts(), &[Part::Ref("Things".into())]);
        assert_eq!(env["C"].parts(), &[Part::GetAtt("Q".into(), "Arn".into())]);
        assert_eq!(
            env["D"].parts(),
            &[
                Part::Text("x-v-".into()),
                Part::GetAtt("Q".into(), "QueueName".into()),
                Part::Text("-${Lit}-".into()),
                Part::Ref("AWS::Region".into()),
            ]
        );
        assert_eq!(env["E"].as_literal(), Some("a,v"));
        assert_eq!(env["F"].as_literal(), Some("v/y"));
        assert_eq!(t.functions["F"].timeout_seconds, 3);
        assert_eq!(t.queues["Q"].name, "Q");
        assert_eq!(t.tables["Things"].name, "Things");
    }

    #[test]
    fn rejects_what_it_cannot_run() {
        let err = |yaml: &str| parse(yaml).unwrap_err().to_string();
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { FifoQueue: true, QueueName: q } }").contains("must end with .fifo"));
        assert!(
            err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { QueueName: !Ref Nope } }")
                .contains("no such parameter")
        );
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { QueueName: !Select [0, [a]] } }").contains("Select"));
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: arn:x, maxReceiveCount: 1 } } }").contains("deadLetterTargetArn"));
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt D.Arn, maxReceiveCount: 1 } } }").contains("D is not a queue"));
        let o = TemplateOptions::default().parameter("Nope", "1");
        assert!(Template::parse("Resources: {}", &o).is_err());
        let o = TemplateOptions::default().parameter("N", "0");
        assert!(
            Template::parse(
                "Parameters: { N: { Type: Number, MinValue: 1 } }\nResources: {}",
                &o
            )
            .is_err()
        );
    }

    #[test]
    fn naming_keeps_fifo_suffix_and_limits_length() {
        assert_eq!(Naming::prefix("a-").apply("b.fifo"), "a-b.fifo");
        let long = TemplateOptions::default().naming(Naming::prefix("x".repeat(80)));
        assert!(Template::parse("Resources:\n  Q: { Type: AWS::SQS::Queue }", &long).is_err());
    }

    #[test]
    fn creation_order_puts_dead_letter_queues_first() {
        let t = parse(
            r#"
Resources:
  A: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt B.Arn, maxReceiveCount: 2 } } }
  B: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt C.Arn, maxReceiveCount: 2 } } }
  C: { Type: AWS::SQS::Queue }
"#,
        )
        .unwrap();
        let order: Vec<_> = t
            .queues_in_creation_order()
            .iter()
            .map(|q| q.logical_id.as_str())
            .collect();
        assert_eq!(order, ["C", "B", "A"]);
    }
}
