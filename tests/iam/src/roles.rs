//! The template's IAM roles, the role of each function, and the tables' partition keys.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml_ng::{Mapping, Value};

use crate::call::RecorderConfig;
use local_aws::template::{Function, Template};

use crate::cfn::{
    Environment, Resolver, get_att_target, intrinsic, key, template_error, translated,
};
use crate::error::PolicyError;
use crate::policy::{
    Condition, ConditionOperator, Effect, LEADING_KEYS, Role, Statement, StatementRef,
};
use crate::requirement::{self, Requirement};
use crate::resource_access::{self, ResourceAccess};

/// A function and the role it runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionRole {
    /// The function's logical id.
    pub logical_id: String,
    /// Its `FunctionName` (the logical id when it has none).
    pub function_name: String,
    /// The logical id of its role (`Role: !GetAtt R.Arn`).
    pub role: String,
    /// What Lambda does with the role for it: its event source mappings' reads (and
    /// on-failure sends), the platform's log writes.
    pub requirements: Vec<Requirement>,
}

/// A table's name and partition key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableKey {
    /// The table's physical name.
    pub name: String,
    /// Its ARN.
    pub arn: String,
    /// Its partition (HASH) key attribute.
    pub hash_key: String,
}

/// The template's `AWS::IAM::Role`s with their inline policies resolved, the role of each
/// function, and each table's partition key (for the recorder's `dynamodb:LeadingKeys`).
///
/// A role's statements are those of its inline `Policies`, of the template's
/// `AWS::IAM::ManagedPolicy` resources attached to it (their `Roles`, or the role's
/// `ManagedPolicyArns: [!Ref POLICY]`), and of `AWS::IAM::Policy`/`RolePolicy` resources naming
/// it. The template is read as SAM's translator expands it
/// ([`translated`](local_aws::template::translated)): a function's
/// `AWS::Lambda::EventSourceMapping`s (SAM `Events` of type `DynamoDB`/`SQS`) and its log group
/// give its [`requirements`](FunctionRole::requirements).
///
/// Rejected rather than ignored: managed policies that are not the template's (AWS managed
/// policies, which SAM attaches to the role it makes for a function without `Role`, or with
/// `Policies`), a `PermissionsBoundary`, policies attached to users or groups, functions whose
/// `Role` is not `!GetAtt R.Arn`, statements with `NotAction`,
/// `NotResource` or `Principal`, conditions other than
/// `ForAllValues:StringLike`/`ForAllValues:StringEquals` on `dynamodb:LeadingKeys`, and
/// poll-based event sources other than DynamoDB streams and SQS queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateRoles {
    /// Roles by logical id.
    pub roles: BTreeMap<String, Role>,
    /// Functions by `FunctionName`.
    pub functions: BTreeMap<String, FunctionRole>,
    /// Tables by logical id.
    pub tables: BTreeMap<String, TableKey>,
    /// The template's `AWS::IAM::ManagedPolicy`s by logical id, each as a [`Role`] of its own
    /// statements (attached to a role or not: an operator attaches the operators' policies).
    pub managed_policies: BTreeMap<String, Role>,
    /// The roles each managed policy is attached to, by the policy's logical id.
    pub managed_policy_roles: BTreeMap<String, Vec<String>>,
    /// The template's parameter values (defaults, overridden by the environment's).
    pub parameters: BTreeMap<String, String>,
    /// The resource policies (queues', keys', roles' trust) and what they guard.
    pub resource_access: ResourceAccess,
}

impl TemplateRoles {
    /// Reads the project's `template.yaml`.
    pub fn load_project(env: &Environment) -> Result<Self, PolicyError> {
        Self::from_file(local_aws::template::Template::project_path(), env)
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
    /// use iam_conformance::{Environment, TemplateRoles};
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
        let doc = translated(yaml)?;
        let root = doc
            .as_mapping()
            .ok_or_else(|| PolicyError::invalid("<root>", "not a mapping"))?;
        // Functions, their event sources and tables: local-aws's model of the same template.
        let template =
            Template::from_cloudformation(&doc, &env.template_options()).map_err(template_error)?;
        let resolver = Resolver::new(root, env, &template)?;
        let mut roles = BTreeMap::new();
        let mut functions = BTreeMap::new();
        let mut tables = BTreeMap::new();
        // Policies outside a role: (their logical id, name, document, where, the roles they
        // name); and the template's managed policies each role lists in ManagedPolicyArns.
        let mut attached: Vec<Attached<'_>> = Vec::new();
        let mut managed_of_role: Vec<(String, String)> = Vec::new();
        for (id, resource) in resolver.resources() {
            let id = key(id, "Resources")?;
            let at = format!("Resources.{id}");
            let kind = resource.get("Type").and_then(Value::as_str).unwrap_or("");
            let properties = resource.get("Properties");
            match kind {
                "AWS::IAM::Role" => {
                    let (role, managed) = role(id, properties, &resolver, &at)?;
                    managed_of_role.extend(managed.into_iter().map(|m| (id.to_owned(), m)));
                    roles.insert(id.to_owned(), role);
                }
                "AWS::IAM::Policy" | "AWS::IAM::ManagedPolicy" | "AWS::IAM::RolePolicy" => {
                    attached.push(policy_resource(id, kind, properties, &resolver, &at)?);
                }
                "AWS::Lambda::Function" => {
                    let f = function(&template.functions[id], properties, &resolver, &at)?;
                    functions.insert(f.function_name.clone(), f);
                }
                _ => {}
            }
        }
        for (id, t) in &template.tables {
            let at = format!("Resources.{id}");
            let key = TableKey {
                name: resolver.reference(id, &at)?,
                arn: resolver.get_att(id, "Arn", &at)?,
                hash_key: t.partition_key().name.clone(),
            };
            tables.insert(id.clone(), key);
        }
        for (role_id, policy_id) in &managed_of_role {
            match attached
                .iter_mut()
                .find(|p| &p.logical_id == policy_id && p.managed)
            {
                Some(p) if !p.roles.contains(role_id) => p.roles.push(role_id.clone()),
                Some(_) => {}
                None => {
                    return Err(PolicyError::invalid(
                        &format!("Resources.{role_id}.Properties.ManagedPolicyArns"),
                        format!("{policy_id} is not an AWS::IAM::ManagedPolicy of the template"),
                    ));
                }
            }
        }
        let mut managed_policies = BTreeMap::new();
        let mut managed_policy_roles = BTreeMap::new();
        for p in attached.iter().filter(|p| p.managed) {
            managed_policy_roles.insert(p.logical_id.clone(), p.roles.clone());
            managed_policies.insert(
                p.logical_id.clone(),
                Role {
                    logical_id: p.logical_id.clone(),
                    statements: statements(p.document, &p.name, &resolver, &p.at)?,
                },
            );
        }
        for p in &attached {
            for role_id in &p.roles {
                let role = roles.get_mut(role_id).ok_or_else(|| {
                    PolicyError::invalid(
                        &p.at,
                        format!("{role_id} is not an AWS::IAM::Role of the template"),
                    )
                })?;
                role.statements
                    .extend(statements(p.document, &p.name, &resolver, &p.at)?);
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
        let parameters = template
            .parameters
            .keys()
            .filter_map(|name| Some((name.clone(), template.parameter(name)?.to_owned())))
            .collect();
        Ok(Self {
            roles,
            functions,
            tables,
            managed_policies,
            managed_policy_roles,
            parameters,
            resource_access: resource_access::read(&resolver)?,
        })
    }

    /// The template's managed policy `logical_id`, as a [`Role`] of its statements.
    pub fn managed_policy(&self, logical_id: &str) -> Result<&Role, PolicyError> {
        self.managed_policies
            .get(logical_id)
            .ok_or_else(|| PolicyError::NoSuchManagedPolicy(logical_id.to_owned()))
    }

    /// The template's managed policies attached to no role (an operator attaches them), by
    /// logical id.
    pub fn unattached_managed_policies(&self) -> impl Iterator<Item = (&String, &Role)> {
        self.managed_policies.iter().filter(|(id, _)| {
            self.managed_policy_roles
                .get(*id)
                .is_none_or(|roles| roles.is_empty())
        })
    }

    /// The function named `function_name` (its `FunctionName`, or logical id).
    pub fn function(&self, function_name: &str) -> Result<&FunctionRole, PolicyError> {
        self.functions
            .get(function_name)
            .or_else(|| {
                self.functions
                    .values()
                    .find(|f| f.logical_id == function_name)
            })
            .ok_or_else(|| PolicyError::NoSuchFunction(function_name.to_owned()))
    }

    /// The role of the function named `function_name` (its `FunctionName`, or logical id).
    pub fn for_function(&self, function_name: &str) -> Result<&Role, PolicyError> {
        let f = self.function(function_name)?;
        self.roles
            .get(&f.role)
            .ok_or_else(|| PolicyError::NoSuchFunction(function_name.to_owned()))
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

pub(crate) fn mapping<'v>(v: Option<&'v Value>, at: &str) -> Result<&'v Mapping, PolicyError> {
    v.and_then(Value::as_mapping)
        .ok_or_else(|| PolicyError::invalid(at, "missing or not a mapping"))
}

/// A list, or a single item as a list of one.
pub(crate) fn items(v: &Value) -> Vec<&Value> {
    match v {
        Value::Sequence(s) => s.iter().collect(),
        other => vec![other],
    }
}

/// A policy resource attached to roles: `AWS::IAM::ManagedPolicy` (its `Roles`, and the roles
/// listing it in `ManagedPolicyArns`), `AWS::IAM::Policy` (`Roles`), `AWS::IAM::RolePolicy`
/// (`RoleName`).
struct Attached<'v> {
    logical_id: String,
    managed: bool,
    name: String,
    document: &'v Value,
    at: String,
    roles: Vec<String>,
}

/// The logical id of a `!Ref ROLE` (or `!GetAtt ROLE.Arn`).
fn role_reference(v: &Value) -> Option<String> {
    match intrinsic(v)? {
        (f, Value::String(id)) if f == "Ref" => Some(id.clone()),
        (f, arg) if f == "GetAtt" => get_att_target(arg).map(|(id, _)| id),
        _ => None,
    }
}

fn policy_resource<'v>(
    id: &str,
    kind: &str,
    properties: Option<&'v Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Attached<'v>, PolicyError> {
    let at = format!("{at}.Properties");
    let properties = mapping(properties, &at)?;
    let managed = kind == "AWS::IAM::ManagedPolicy";
    let name_key = if managed {
        "ManagedPolicyName"
    } else {
        "PolicyName"
    };
    let name = properties
        .get(name_key)
        .map(|n| resolver.string(n, &format!("{at}.{name_key}")))
        .transpose()?
        .unwrap_or_else(|| id.to_owned());
    let references: Vec<&Value> = match kind {
        "AWS::IAM::RolePolicy" => properties.get("RoleName").into_iter().collect(),
        _ => properties.get("Roles").map(items).unwrap_or_default(),
    };
    let roles = references
        .into_iter()
        .map(|r| {
            role_reference(r).ok_or_else(|| {
                PolicyError::unsupported(&at, "a role named other than by !Ref of a template role")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for unsupported in ["Users", "Groups"] {
        if properties.contains_key(unsupported) {
            return Err(PolicyError::unsupported(
                &format!("{at}.{unsupported}"),
                unsupported,
            ));
        }
    }
    let document = properties
        .get("PolicyDocument")
        .ok_or_else(|| PolicyError::invalid(&at, "no PolicyDocument"))?;
    Ok(Attached {
        logical_id: id.to_owned(),
        managed,
        name,
        document,
        at: format!("{at}.PolicyDocument"),
        roles,
    })
}

/// The role with its inline policies, and the logical ids of the template's managed policies
/// it lists in `ManagedPolicyArns`.
fn role(
    id: &str,
    properties: Option<&Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<(Role, Vec<String>), PolicyError> {
    let at = format!("{at}.Properties");
    let properties = mapping(properties, &at)?;
    if properties.contains_key("PermissionsBoundary") {
        return Err(PolicyError::unsupported(
            &format!("{at}.PermissionsBoundary"),
            "PermissionsBoundary",
        ));
    }
    let managed = properties
        .get("ManagedPolicyArns")
        .map(items)
        .unwrap_or_default()
        .into_iter()
        .map(|v| {
            role_reference(v).ok_or_else(|| {
                PolicyError::unsupported(
                    &format!("{at}.ManagedPolicyArns"),
                    "a managed policy that is not the template's (!Ref of an AWS::IAM::ManagedPolicy)",
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut statements_of_role = Vec::new();
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
        let document = policy
            .get("PolicyDocument")
            .ok_or_else(|| PolicyError::invalid(&at, "no PolicyDocument"))?;
        statements_of_role.extend(statements(
            document,
            &name,
            resolver,
            &format!("{at}.PolicyDocument"),
        )?);
    }
    Ok((
        Role {
            logical_id: id.to_owned(),
            statements: statements_of_role,
        },
        managed,
    ))
}

/// The statements of one policy document.
fn statements(
    document: &Value,
    name: &str,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Vec<Statement>, PolicyError> {
    each_statement(document, at, |s, index, at| {
        statement(s, name, index, resolver, at)
    })
}

/// `parse` of each statement of the policy `document` (its mapping, its index, where it is).
pub(crate) fn each_statement<T>(
    document: &Value,
    at: &str,
    parse: impl Fn(&Mapping, usize, &str) -> Result<T, PolicyError>,
) -> Result<Vec<T>, PolicyError> {
    let document = mapping(Some(document), at)?;
    let list = document
        .get("Statement")
        .ok_or_else(|| PolicyError::invalid(at, "no Statement"))?;
    items(list)
        .into_iter()
        .enumerate()
        .map(|(index, s)| {
            let at = format!("{at}.Statement[{index}]");
            parse(mapping(Some(s), &at)?, index, &at)
        })
        .collect()
}

/// A statement's `Sid` and `Effect`, once its keys are checked against `supported`.
pub(crate) fn sid_and_effect(
    s: &Mapping,
    supported: &[&str],
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<(Option<String>, Effect), PolicyError> {
    for (k, _) in s {
        let k = key(k, at)?;
        if !supported.contains(&k) {
            return Err(PolicyError::unsupported(&format!("{at}.{k}"), k));
        }
    }
    let sid = s
        .get("Sid")
        .map(|v| resolver.string(v, &format!("{at}.Sid")))
        .transpose()?;
    let effect = s
        .get("Effect")
        .ok_or_else(|| PolicyError::invalid(at, "no Effect"))?;
    let effect = match resolver.string(effect, &format!("{at}.Effect"))?.as_str() {
        "Allow" => Effect::Allow,
        "Deny" => Effect::Deny,
        other => {
            return Err(PolicyError::invalid(
                &format!("{at}.Effect"),
                format!("{other:?} is neither Allow nor Deny"),
            ));
        }
    };
    Ok((sid, effect))
}

fn statement(
    s: &Mapping,
    policy: &str,
    index: usize,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Statement, PolicyError> {
    let supported = ["Sid", "Effect", "Action", "Resource", "Condition"];
    let (sid, effect) = sid_and_effect(s, &supported, resolver, at)?;
    let field = |name: &str| {
        s.get(name)
            .ok_or_else(|| PolicyError::invalid(at, format!("no {name}")))
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

/// The role and requirements of the function `f` (the model's), whose translated properties
/// are `properties`.
fn function(
    f: &Function,
    properties: Option<&Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<FunctionRole, PolicyError> {
    let at = format!("{at}.Properties");
    let properties = mapping(properties, &at)?;
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
    let mut requirements = requirement::platform(properties, &f.name, resolver, &at)?;
    requirements.extend(requirement::event_sources(f, resolver, &at)?);
    Ok(FunctionRole {
        logical_id: f.logical_id.clone(),
        function_name: f.name.clone(),
        role,
        requirements,
    })
}
