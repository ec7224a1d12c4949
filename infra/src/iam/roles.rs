//! The template's IAM roles, the role of each function, and the tables' partition keys.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml_ng::{Mapping, Value};

use crate::iam::call::RecorderConfig;
use crate::iam::cfn::{Environment, Resolver, get_att_target, intrinsic, key};
use crate::iam::error::PolicyError;
use crate::iam::policy::{
    Condition, ConditionOperator, Effect, LEADING_KEYS, Role, Statement, StatementRef,
};

/// A function and the role it runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionRole {
    /// The function's logical id.
    pub logical_id: String,
    /// Its `FunctionName` (the logical id when it has none).
    pub function_name: String,
    /// The logical id of its role (`Role: !GetAtt R.Arn`).
    pub role: String,
}

/// A table's name and partition key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableKey {
    /// The table's physical name.
    pub name: String,
    /// Its partition (HASH) key attribute.
    pub hash_key: String,
}

/// The template's `AWS::IAM::Role`s with their inline policies resolved, its
/// `AWS::IAM::ManagedPolicy`s attached to nothing (the operators' policies, which an operator
/// attaches to their own role), the role of each function, and each table's partition key (for
/// the recorder's `dynamodb:LeadingKeys`).
///
/// Rejected rather than ignored: roles with `ManagedPolicyArns` or a `PermissionsBoundary`,
/// managed policies attached to a role, user or group of the template (`Roles`, `Users`,
/// `Groups`), `AWS::IAM::Policy`/`RolePolicy` resources, SAM `Policies` on a function, functions
/// without `Role: !GetAtt R.Arn`, statements with `NotAction`, `NotResource` or `Principal`, and
/// conditions other than `ForAllValues:StringLike`/`ForAllValues:StringEquals` on
/// `dynamodb:LeadingKeys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateRoles {
    /// Roles by logical id.
    pub roles: BTreeMap<String, Role>,
    /// Managed policies attached to nothing, by logical id (each as a [`Role`] of its
    /// statements, so that [`conformance`](crate::iam::conformance) checks a tool against it).
    pub managed_policies: BTreeMap<String, Role>,
    /// Functions by `FunctionName`.
    pub functions: BTreeMap<String, FunctionRole>,
    /// Tables by logical id.
    pub tables: BTreeMap<String, TableKey>,
}

impl TemplateRoles {
    /// Reads the project's `template.yaml`.
    pub fn load_project(env: &Environment) -> Result<Self, PolicyError> {
        Self::from_file(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml"),
            env,
        )
    }

    /// Reads the template at `path`.
    pub fn from_file(path: impl AsRef<Path>, env: &Environment) -> Result<Self, PolicyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, env)
    }

    /// Parses a template.
    ///
    /// ```
    /// use local_aws::iam::{Environment, TemplateRoles};
    ///
    /// let yaml = r#"
    /// Resources:
    ///   Jobs: { Type: AWS::SQS::Queue, Properties: { QueueName: jobs } }
    ///   Worker:
    ///     Type: AWS::Serverless::Function
    ///     Properties: { FunctionName: worker, Role: !GetAtt WorkerRole.Arn }
    ///   WorkerRole:
    ///     Type: AWS::IAM::Role
    ///     Properties:
    ///       Policies:
    ///         - PolicyName: worker
    ///           PolicyDocument:
    ///             Statement:
    ///               - { Sid: Consume, Effect: Allow, Action: "sqs:*Message", Resource: !GetAtt Jobs.Arn }
    /// "#;
    /// let roles = TemplateRoles::parse(yaml, &Environment::new("us-east-1", "123456789012")).unwrap();
    /// let role = roles.for_function("worker").unwrap();
    /// assert!(role.evaluate("sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:jobs", None).is_allowed());
    /// ```
    pub fn parse(yaml: &str, env: &Environment) -> Result<Self, PolicyError> {
        let doc: Value = serde_yaml_ng::from_str(yaml)?;
        let root = doc
            .as_mapping()
            .ok_or_else(|| PolicyError::invalid("<root>", "not a mapping"))?;
        let resolver = Resolver::new(root, env)?;
        let mut roles = BTreeMap::new();
        let mut managed_policies = BTreeMap::new();
        let mut functions = BTreeMap::new();
        let mut tables = BTreeMap::new();
        for (id, resource) in resolver.resources() {
            let id = key(id, "Resources")?;
            let at = format!("Resources.{id}");
            let kind = resource.get("Type").and_then(Value::as_str).unwrap_or("");
            let properties = resource.get("Properties");
            match kind {
                "AWS::IAM::Role" => {
                    roles.insert(id.to_owned(), role(id, properties, &resolver, &at)?);
                }
                "AWS::IAM::ManagedPolicy" => {
                    let policy = managed_policy(id, properties, &resolver, &at)?;
                    managed_policies.insert(id.to_owned(), policy);
                }
                "AWS::IAM::Policy" | "AWS::IAM::RolePolicy" => {
                    return Err(PolicyError::unsupported(&at, kind));
                }
                "AWS::Serverless::Function" | "AWS::Lambda::Function" => {
                    let f = function(id, properties, &resolver, &at)?;
                    functions.insert(f.function_name.clone(), f);
                }
                "AWS::DynamoDB::Table" => {
                    tables.insert(id.to_owned(), table(id, properties, &resolver, &at)?);
                }
                _ => {}
            }
        }
        for f in functions.values() {
            if !roles.contains_key(&f.role) {
                return Err(PolicyError::invalid(
                    &format!("Resources.{}.Properties.Role", f.logical_id),
                    format!("{} is not an AWS::IAM::Role of the template", f.role),
                ));
            }
        }
        Ok(Self {
            roles,
            managed_policies,
            functions,
            tables,
        })
    }

    /// The role of the function named `function_name` (its `FunctionName`, or logical id).
    pub fn for_function(&self, function_name: &str) -> Result<&Role, PolicyError> {
        let f = self
            .functions
            .get(function_name)
            .or_else(|| {
                self.functions
                    .values()
                    .find(|f| f.logical_id == function_name)
            })
            .ok_or_else(|| PolicyError::NoSuchFunction(function_name.to_owned()))?;
        self.roles
            .get(&f.role)
            .ok_or_else(|| PolicyError::NoSuchFunction(function_name.to_owned()))
    }

    /// The managed policy `logical_id`.
    ///
    /// ```
    /// use local_aws::iam::{Environment, TemplateRoles};
    ///
    /// let yaml = r#"
    /// Resources:
    ///   Jobs: { Type: AWS::SQS::Queue, Properties: { QueueName: jobs } }
    ///   OperatorPolicy:
    ///     Type: AWS::IAM::ManagedPolicy
    ///     Properties:
    ///       PolicyDocument:
    ///         Statement:
    ///           - { Effect: Allow, Action: sqs:SendMessage, Resource: !GetAtt Jobs.Arn }
    /// "#;
    /// let roles = TemplateRoles::parse(yaml, &Environment::new("us-east-1", "123456789012")).unwrap();
    /// let policy = roles.managed_policy("OperatorPolicy").unwrap();
    /// assert!(policy.evaluate("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:jobs", None).is_allowed());
    /// assert!(roles.managed_policy("Jobs").is_err());
    /// ```
    pub fn managed_policy(&self, logical_id: &str) -> Result<&Role, PolicyError> {
        self.managed_policies
            .get(logical_id)
            .ok_or_else(|| PolicyError::NoSuchManagedPolicy(logical_id.to_owned()))
    }

    /// A recorder configuration for `env`'s region and account with every table's partition
    /// key.
    pub fn recorder_config(&self, env: &Environment) -> RecorderConfig {
        let mut config = RecorderConfig::new(&env.region, &env.account_id);
        config.partition = env.partition.clone();
        for t in self.tables.values() {
            config = config.hash_key(&t.name, &t.hash_key);
        }
        config
    }
}

fn mapping<'v>(v: Option<&'v Value>, at: &str) -> Result<&'v Mapping, PolicyError> {
    v.and_then(Value::as_mapping)
        .ok_or_else(|| PolicyError::invalid(at, "missing or not a mapping"))
}

/// A list, or a single item as a list of one.
fn items(v: &Value) -> Vec<&Value> {
    match v {
        Value::Sequence(s) => s.iter().collect(),
        other => vec![other],
    }
}

/// A [`PolicyError::Unsupported`] for the first of `keys` that `properties` has: `what` it
/// means, or the key's name.
fn refuse_keys(
    properties: &Mapping,
    keys: &[&str],
    at: &str,
    what: Option<&str>,
) -> Result<(), PolicyError> {
    match keys.iter().find(|k| properties.contains_key(**k)) {
        Some(k) => Err(PolicyError::unsupported(
            &format!("{at}.{k}"),
            what.unwrap_or(k),
        )),
        None => Ok(()),
    }
}

fn role(
    id: &str,
    properties: Option<&Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Role, PolicyError> {
    let at = format!("{at}.Properties");
    let properties = mapping(properties, &at)?;
    refuse_keys(
        properties,
        &["ManagedPolicyArns", "PermissionsBoundary"],
        &at,
        None,
    )?;
    let mut statements = Vec::new();
    for (i, policy) in properties
        .get("Policies")
        .map(items)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let at = format!("{at}.Policies[{i}]");
        let name = policy
            .get("PolicyName")
            .map(|n| resolver.string(n, &format!("{at}.PolicyName")))
            .transpose()?
            .unwrap_or_else(|| format!("{id}-{i}"));
        statements.extend(document_statements(policy, &name, resolver, &at)?);
    }
    Ok(Role {
        logical_id: id.to_owned(),
        statements,
    })
}

/// The statements of the `PolicyDocument` of `policy` (a role's inline policy, or a managed
/// policy's properties) named `name`.
fn document_statements(
    policy: &Value,
    name: &str,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Vec<Statement>, PolicyError> {
    let document = mapping(
        policy.get("PolicyDocument"),
        &format!("{at}.PolicyDocument"),
    )?;
    let list = document
        .get("Statement")
        .ok_or_else(|| PolicyError::invalid(&format!("{at}.PolicyDocument"), "no Statement"))?;
    items(list)
        .into_iter()
        .enumerate()
        .map(|(index, s)| {
            let at = format!("{at}.PolicyDocument.Statement[{index}]");
            statement(s, name, index, resolver, &at)
        })
        .collect()
}

/// A managed policy attached to nothing, as a [`Role`] of its statements (named by its
/// `ManagedPolicyName`, else its logical id).
fn managed_policy(
    id: &str,
    properties: Option<&Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Role, PolicyError> {
    let at = format!("{at}.Properties");
    let properties = mapping(properties, &at)?;
    let attached = "a managed policy attached in the template";
    refuse_keys(
        properties,
        &["Roles", "Users", "Groups"],
        &at,
        Some(attached),
    )?;
    let name = properties
        .get("ManagedPolicyName")
        .map(|n| resolver.string(n, &format!("{at}.ManagedPolicyName")))
        .transpose()?
        .unwrap_or_else(|| id.to_owned());
    let document_holder = Value::Mapping(properties.clone());
    let statements = document_statements(&document_holder, &name, resolver, &at)?;
    Ok(Role {
        logical_id: id.to_owned(),
        statements,
    })
}

fn statement(
    s: &Value,
    policy: &str,
    index: usize,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Statement, PolicyError> {
    let s = s
        .as_mapping()
        .ok_or_else(|| PolicyError::invalid(at, "a statement is not a mapping"))?;
    for (k, _) in s {
        let k = key(k, at)?;
        if !matches!(k, "Sid" | "Effect" | "Action" | "Resource" | "Condition") {
            return Err(PolicyError::unsupported(&format!("{at}.{k}"), k));
        }
    }
    let field = |name: &str| {
        s.get(name)
            .ok_or_else(|| PolicyError::invalid(at, format!("no {name}")))
    };
    let sid = s
        .get("Sid")
        .map(|v| resolver.string(v, &format!("{at}.Sid")))
        .transpose()?;
    let effect = match resolver
        .string(field("Effect")?, &format!("{at}.Effect"))?
        .as_str()
    {
        "Allow" => Effect::Allow,
        "Deny" => Effect::Deny,
        other => {
            return Err(PolicyError::invalid(
                &format!("{at}.Effect"),
                format!("{other:?} is neither Allow nor Deny"),
            ));
        }
    };
    let actions = resolver.strings(field("Action")?, &format!("{at}.Action"))?;
    let resources = resolver.strings(field("Resource")?, &format!("{at}.Resource"))?;
    let conditions = match s.get("Condition") {
        Some(c) => conditions(c, resolver, &format!("{at}.Condition"))?,
        None => Vec::new(),
    };
    Ok(Statement {
        id: StatementRef {
            policy: policy.to_owned(),
            sid,
            index,
        },
        effect,
        actions,
        resources,
        conditions,
    })
}

fn conditions(c: &Value, resolver: &Resolver<'_>, at: &str) -> Result<Vec<Condition>, PolicyError> {
    let mut out = Vec::new();
    for (operator, keys) in mapping(Some(c), at)? {
        let operator = key(operator, at)?;
        let at = format!("{at}.{operator}");
        let parsed = ConditionOperator::parse(operator).ok_or_else(|| {
            PolicyError::unsupported(&at, format!("the condition operator {operator}"))
        })?;
        for (condition_key, values) in mapping(Some(keys), &at)? {
            let condition_key = key(condition_key, &at)?;
            // Condition key names are case-insensitive.
            if !condition_key.eq_ignore_ascii_case(LEADING_KEYS) {
                return Err(PolicyError::unsupported(
                    &at,
                    format!("the condition key {condition_key}"),
                ));
            }
            out.push(Condition {
                operator: parsed,
                values: resolver.strings(values, &format!("{at}.{condition_key}"))?,
            });
        }
    }
    Ok(out)
}

fn function(
    id: &str,
    properties: Option<&Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<FunctionRole, PolicyError> {
    let at = format!("{at}.Properties");
    let properties = mapping(properties, &at)?;
    if properties.contains_key("Policies") {
        return Err(PolicyError::unsupported(
            &format!("{at}.Policies"),
            "SAM Policies on a function",
        ));
    }
    let role_at = format!("{at}.Role");
    let role = properties
        .get("Role")
        .and_then(|r| intrinsic(r))
        .filter(|(f, _)| f == "GetAtt")
        .and_then(|(_, arg)| get_att_target(arg))
        .filter(|(_, attribute)| attribute == "Arn")
        .map(|(role, _)| role)
        .ok_or_else(|| {
            PolicyError::unsupported(&role_at, "a function without Role: !GetAtt ROLE.Arn")
        })?;
    let function_name = properties
        .get("FunctionName")
        .map(|n| resolver.string(n, &format!("{at}.FunctionName")))
        .transpose()?
        .unwrap_or_else(|| id.to_owned());
    Ok(FunctionRole {
        logical_id: id.to_owned(),
        function_name,
        role,
    })
}

fn table(
    id: &str,
    properties: Option<&Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<TableKey, PolicyError> {
    let at = format!("{at}.Properties");
    let properties = mapping(properties, &at)?;
    let schema = properties
        .get("KeySchema")
        .and_then(Value::as_sequence)
        .ok_or_else(|| PolicyError::invalid(&at, "no KeySchema"))?;
    let hash_key = schema
        .iter()
        .find(|k| k.get("KeyType").and_then(Value::as_str) == Some("HASH"))
        .and_then(|k| k.get("AttributeName"))
        .map(|n| resolver.string(n, &format!("{at}.KeySchema")))
        .transpose()?
        .ok_or_else(|| PolicyError::invalid(&format!("{at}.KeySchema"), "no HASH key"))?;
    Ok(TableKey {
        name: resolver.reference(id, &at)?,
        hash_key,
    })
}
