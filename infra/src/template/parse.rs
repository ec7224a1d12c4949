//! Reading resources' properties: the parse context ([`Ctx`]) and queues and tables.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml_ng::{Mapping, Value};

use super::{
    AttributeType, Expr, PSEUDO, Parameter, Part, Queue, Redrive, RedriveAllowPolicy, Result,
    StreamViewType, Table, TemplateOptions, invalid, parse_expr, pseudo,
};

pub(super) struct Ctx<'a> {
    pub(super) parameters: &'a BTreeMap<String, Parameter>,
    pub(super) options: &'a TemplateOptions,
    pub(super) types: &'a BTreeMap<String, String>,
}

impl Ctx<'_> {
    /// Substitutes parameters; checks resource references against what the harness resolves.
    pub(super) fn expr(&self, v: &Value, at: &str) -> Result<Expr> {
        let mut out = Vec::new();
        for part in parse_expr(v, at)? {
            match part {
                Part::Ref(name) if self.parameters.contains_key(&name) => {
                    let value = self.parameters[&name].value.clone().ok_or_else(|| {
                        invalid(at, format!("parameter {name} has no Default and no value"))
                    })?;
                    out.push(Part::Text(value));
                }
                Part::Ref(name) if PSEUDO.contains(&name.as_str()) => out.push(Part::Ref(name)),
                Part::Ref(name) => match self.types.get(&name).map(String::as_str) {
                    Some(
                        "AWS::SQS::Queue"
                        | "AWS::DynamoDB::Table"
                        | "AWS::Kinesis::Stream"
                        | "AWS::Lambda::Function",
                    ) => out.push(Part::Ref(name)),
                    Some(t) => {
                        return Err(invalid(
                            at,
                            format!("!Ref {name}: {t} is not emulated by the local harness"),
                        ));
                    }
                    None => {
                        return Err(invalid(
                            at,
                            format!("!Ref {name}: no such parameter or resource"),
                        ));
                    }
                },
                Part::GetAtt(resource, attribute) => {
                    let ok = match self.types.get(&resource).map(String::as_str) {
                        Some("AWS::SQS::Queue") => {
                            matches!(attribute.as_str(), "Arn" | "QueueName" | "QueueUrl")
                        }
                        Some("AWS::DynamoDB::Table") => {
                            matches!(attribute.as_str(), "Arn" | "StreamArn")
                        }
                        Some("AWS::Kinesis::Stream" | "AWS::Lambda::Function") => {
                            attribute == "Arn"
                        }
                        Some(_) => false,
                        None => {
                            return Err(invalid(
                                at,
                                format!("!GetAtt {resource}.{attribute}: no such resource"),
                            ));
                        }
                    };
                    if !ok {
                        return Err(invalid(
                            at,
                            format!(
                                "!GetAtt {resource}.{attribute} is not emulated by the local harness"
                            ),
                        ));
                    }
                    out.push(Part::GetAtt(resource, attribute));
                }
                text => out.push(text),
            }
        }
        Ok(Expr::from_parts(out))
    }

    /// A value known at parse time: literals, parameters and pseudo parameters only.
    pub(super) fn scalar(&self, v: &Value, at: &str) -> Result<String> {
        let expr = self.expr(v, at)?;
        let mut out = String::new();
        for part in expr.parts() {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Ref(p) if PSEUDO.contains(&p.as_str()) => out.push_str(&pseudo(
                    p,
                    &self.options.region,
                    &self.options.account_id,
                    &self.options.stack_name,
                )),
                other => {
                    return Err(invalid(
                        at,
                        format!(
                            "{other:?}: only parameters and AWS:: pseudo parameters can be used here"
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }

    pub(super) fn opt_scalar(&self, m: &Mapping, key: &str, at: &str) -> Result<Option<String>> {
        m.get(key)
            .map(|v| self.scalar(v, &format!("{at}.{key}")))
            .transpose()
    }

    pub(super) fn opt_u32(&self, m: &Mapping, key: &str, at: &str) -> Result<Option<u32>> {
        self.opt_scalar(m, key, at)?
            .map(|s| {
                s.trim().parse::<u32>().map_err(|_| {
                    invalid(
                        &format!("{at}.{key}"),
                        format!("{s:?} is not a whole number"),
                    )
                })
            })
            .transpose()
    }

    pub(super) fn u32_in(
        &self,
        m: &Mapping,
        key: &str,
        at: &str,
        default: u32,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<u32> {
        let v = self.opt_u32(m, key, at)?.unwrap_or(default);
        if !range.contains(&v) {
            return Err(invalid(
                &format!("{at}.{key}"),
                format!("{v} is not in {}..={}", range.start(), range.end()),
            ));
        }
        Ok(v)
    }

    pub(super) fn opt_bool(&self, m: &Mapping, key: &str, at: &str) -> Result<Option<bool>> {
        self.opt_scalar(m, key, at)?
            .map(|s| match s.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(invalid(
                    &format!("{at}.{key}"),
                    format!("{s:?} is not a boolean"),
                )),
            })
            .transpose()
    }

    pub(super) fn queue(&self, id: &str, props: &Mapping, at: &str) -> Result<Queue> {
        let at = format!("{at}.Properties");
        let fifo = self.opt_bool(props, "FifoQueue", &at)?.unwrap_or(false);
        let base_name = match self.opt_scalar(props, "QueueName", &at)? {
            Some(name) => name,
            None if fifo => format!("{id}.fifo"),
            None => id.to_owned(),
        };
        if fifo != base_name.ends_with(".fifo") {
            return Err(invalid(
                &format!("{at}.QueueName"),
                format!(
                    "{base_name:?}: a FIFO queue's name must end with .fifo, and only a FIFO queue's"
                ),
            ));
        }
        let name = self.options.naming.apply(&base_name);
        let stem = name.strip_suffix(".fifo").unwrap_or(&name);
        if name.len() > 80
            || stem.is_empty()
            || !stem
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                &format!("{at}.QueueName"),
                format!("{name:?}: a queue name is 1-80 characters of [A-Za-z0-9_-] (plus .fifo)"),
            ));
        }
        let content_based_deduplication = self
            .opt_bool(props, "ContentBasedDeduplication", &at)?
            .unwrap_or(false);
        if content_based_deduplication && !fifo {
            return Err(invalid(
                &format!("{at}.ContentBasedDeduplication"),
                "only FIFO queues have content-based deduplication",
            ));
        }
        let redrive = match props.get("RedrivePolicy") {
            None => None,
            Some(Value::Mapping(r)) => {
                let at = format!("{at}.RedrivePolicy");
                let target = r
                    .get("deadLetterTargetArn")
                    .ok_or_else(|| invalid(&at, "missing deadLetterTargetArn"))?;
                let dead_letter_queue = match parse_expr(target, &at)?.as_slice() {
                    [Part::GetAtt(q, a)] if a == "Arn" => q.clone(),
                    _ => {
                        return Err(invalid(
                            &format!("{at}.deadLetterTargetArn"),
                            "must be !GetAtt <queue in this template>.Arn",
                        ));
                    }
                };
                let max_receive_count = self
                    .opt_u32(r, "maxReceiveCount", &at)?
                    .ok_or_else(|| invalid(&at, "missing maxReceiveCount"))?;
                if !(1..=1000).contains(&max_receive_count) {
                    return Err(invalid(
                        &format!("{at}.maxReceiveCount"),
                        format!("{max_receive_count} is not in 1..=1000"),
                    ));
                }
                Some(Redrive {
                    dead_letter_queue,
                    max_receive_count,
                })
            }
            Some(_) => return Err(invalid(&format!("{at}.RedrivePolicy"), "not a mapping")),
        };
        Ok(Queue {
            logical_id: id.to_owned(),
            name,
            fifo,
            content_based_deduplication,
            visibility_timeout: self.u32_in(props, "VisibilityTimeout", &at, 30, 0..=43_200)?,
            message_retention_period: self.u32_in(
                props,
                "MessageRetentionPeriod",
                &at,
                345_600,
                60..=1_209_600,
            )?,
            delay_seconds: self.u32_in(props, "DelaySeconds", &at, 0, 0..=900)?,
            receive_message_wait_time_seconds: self.opt_u32(
                props,
                "ReceiveMessageWaitTimeSeconds",
                &at,
            )?,
            maximum_message_size: self.opt_u32(props, "MaximumMessageSize", &at)?,
            redrive,
            redrive_allow_policy: props
                .get("RedriveAllowPolicy")
                .map(|p| self.redrive_allow_policy(p, &format!("{at}.RedriveAllowPolicy")))
                .transpose()?,
        })
    }

    pub(super) fn table(&self, id: &str, props: &Mapping, at: &str) -> Result<Table> {
        let at = format!("{at}.Properties");
        if props.get("LocalSecondaryIndexes").is_some() {
            return Err(invalid(
                &format!("{at}.LocalSecondaryIndexes"),
                "local secondary indexes are not provisioned by the local harness",
            ));
        }
        let base_name = self
            .opt_scalar(props, "TableName", &at)?
            .unwrap_or_else(|| id.to_owned());
        let name = self.options.naming.apply(&base_name);
        if !(3..=255).contains(&name.len())
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(invalid(
                &format!("{at}.TableName"),
                format!("{name:?}: a table name is 3-255 characters of [A-Za-z0-9_.-]"),
            ));
        }
        let seq = |key: &str| -> Result<&[Value]> {
            match props.get(key) {
                Some(Value::Sequence(s)) => Ok(s),
                _ => Err(invalid(&format!("{at}.{key}"), "missing or not a list")),
            }
        };
        let mut types = BTreeMap::new();
        for (i, d) in seq("AttributeDefinitions")?.iter().enumerate() {
            let at = format!("{at}.AttributeDefinitions[{i}]");
            let d = d
                .as_mapping()
                .ok_or_else(|| invalid(&at, "not a mapping"))?;
            let name = self
                .opt_scalar(d, "AttributeName", &at)?
                .ok_or_else(|| invalid(&at, "missing AttributeName"))?;
            let kind = match self.opt_scalar(d, "AttributeType", &at)?.as_deref() {
                Some("S") => AttributeType::String,
                Some("N") => AttributeType::Number,
                Some("B") => AttributeType::Binary,
                other => {
                    return Err(invalid(
                        &at,
                        format!("AttributeType {other:?} is not S, N or B"),
                    ));
                }
            };
            types.insert(name, kind);
        }
        let key_schema = self.key_schema(seq("KeySchema")?, &types, &format!("{at}.KeySchema"))?;
        let global_secondary_indexes = match props.get("GlobalSecondaryIndexes") {
            None => Vec::new(),
            Some(Value::Sequence(indexes)) => indexes
                .iter()
                .enumerate()
                .map(|(i, index)| {
                    self.secondary_index(
                        index,
                        &types,
                        &format!("{at}.GlobalSecondaryIndexes[{i}]"),
                    )
                })
                .collect::<Result<_>>()?,
            Some(_) => {
                return Err(invalid(
                    &format!("{at}.GlobalSecondaryIndexes"),
                    "not a list",
                ));
            }
        };
        let keys: BTreeSet<&str> = key_schema
            .iter()
            .chain(global_secondary_indexes.iter().flat_map(|i| &i.key_schema))
            .map(|k| k.name.as_str())
            .collect();
        if let Some(unused) = types.keys().find(|name| !keys.contains(name.as_str())) {
            return Err(invalid(
                &format!("{at}.AttributeDefinitions"),
                format!(
                    "defines {unused}, which is no key of the table or an index (DynamoDB rejects that)"
                ),
            ));
        }
        let ttl_attribute = match props.get("TimeToLiveSpecification") {
            None => None,
            Some(Value::Mapping(t)) => {
                let at = format!("{at}.TimeToLiveSpecification");
                if self.opt_bool(t, "Enabled", &at)?.unwrap_or(false) {
                    Some(
                        self.opt_scalar(t, "AttributeName", &at)?
                            .ok_or_else(|| invalid(&at, "missing AttributeName"))?,
                    )
                } else {
                    None
                }
            }
            Some(_) => {
                return Err(invalid(
                    &format!("{at}.TimeToLiveSpecification"),
                    "not a mapping",
                ));
            }
        };
        let stream_view_type = match props.get("StreamSpecification") {
            None => None,
            Some(Value::Mapping(spec)) => {
                let at = format!("{at}.StreamSpecification");
                let view = self
                    .opt_scalar(spec, "StreamViewType", &at)?
                    .ok_or_else(|| invalid(&at, "missing StreamViewType"))?;
                Some(StreamViewType::parse(&view).ok_or_else(|| {
                    invalid(
                        &format!("{at}.StreamViewType"),
                        format!(
                            "{view:?} is not KEYS_ONLY, NEW_IMAGE, OLD_IMAGE or NEW_AND_OLD_IMAGES"
                        ),
                    )
                })?)
            }
            Some(_) => {
                return Err(invalid(
                    &format!("{at}.StreamSpecification"),
                    "not a mapping",
                ));
            }
        };
        Ok(Table {
            logical_id: id.to_owned(),
            name,
            key_schema,
            ttl_attribute,
            stream_view_type,
            global_secondary_indexes,
        })
    }

    /// A queue's `RedriveAllowPolicy`. `byQueue` sources come back as written: a logical id
    /// (`!GetAtt Q.Arn`) or an ARN; [`Template::parse`](super::Template::parse) maps the ARNs to
    /// queues once every queue is known.
    fn redrive_allow_policy(&self, policy: &Value, at: &str) -> Result<RedriveAllowPolicy> {
        let policy = policy
            .as_mapping()
            .ok_or_else(|| invalid(at, "not a mapping"))?;
        let permission = self
            .opt_scalar(policy, "redrivePermission", at)?
            .ok_or_else(|| invalid(at, "missing redrivePermission"))?;
        let sources = policy.get("sourceQueueArns");
        match (permission.as_str(), sources) {
            ("allowAll", None) => Ok(RedriveAllowPolicy::AllowAll),
            ("denyAll", None) => Ok(RedriveAllowPolicy::DenyAll),
            ("allowAll" | "denyAll", Some(_)) => Err(invalid(
                at,
                format!("sourceQueueArns is only for redrivePermission byQueue, not {permission}"),
            )),
            ("byQueue", Some(Value::Sequence(arns))) if (1..=10).contains(&arns.len()) => arns
                .iter()
                .enumerate()
                .map(|(i, arn)| {
                    let at = format!("{at}.sourceQueueArns[{i}]");
                    match parse_expr(arn, &at)?.as_slice() {
                        [Part::GetAtt(q, a)] if a == "Arn" => Ok(q.clone()),
                        _ => self.scalar(arn, &at),
                    }
                })
                .collect::<Result<_>>()
                .map(RedriveAllowPolicy::ByQueue),
            ("byQueue", _) => Err(invalid(
                at,
                "byQueue needs sourceQueueArns: a list of 1 to 10 queue ARNs",
            )),
            (other, _) => Err(invalid(
                &format!("{at}.redrivePermission"),
                format!("{other:?} is not allowAll, denyAll or byQueue"),
            )),
        }
    }
}
