//! Key schemas and global secondary indexes of a table (`KeySchema`,
//! `GlobalSecondaryIndexes`).

use std::collections::BTreeMap;

use serde_yaml_ng::Value;

use super::parse::Ctx;
use super::{AttributeType, KeyAttribute, KeyType, Projection, Result, SecondaryIndex, invalid};

impl Ctx<'_> {
    /// A `KeySchema`: one HASH key and at most one RANGE key, each defined in `types` (the
    /// table's `AttributeDefinitions`).
    pub(super) fn key_schema(
        &self,
        keys: &[Value],
        types: &BTreeMap<String, AttributeType>,
        at: &str,
    ) -> Result<Vec<KeyAttribute>> {
        let mut key_schema = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let at = format!("{at}[{i}]");
            let k = k
                .as_mapping()
                .ok_or_else(|| invalid(&at, "not a mapping"))?;
            let name = self
                .opt_scalar(k, "AttributeName", &at)?
                .ok_or_else(|| invalid(&at, "missing AttributeName"))?;
            let key_type = match self.opt_scalar(k, "KeyType", &at)?.as_deref() {
                Some("HASH") => KeyType::Hash,
                Some("RANGE") => KeyType::Range,
                other => {
                    return Err(invalid(
                        &at,
                        format!("KeyType {other:?} is not HASH or RANGE"),
                    ));
                }
            };
            let attribute_type = *types
                .get(&name)
                .ok_or_else(|| invalid(&at, format!("{name} is not in AttributeDefinitions")))?;
            key_schema.push(KeyAttribute {
                name,
                attribute_type,
                key_type,
            });
        }
        let hashes = key_schema
            .iter()
            .filter(|k| k.key_type == KeyType::Hash)
            .count();
        if hashes != 1 || key_schema.len() - hashes > 1 || key_schema[0].key_type != KeyType::Hash {
            return Err(invalid(
                at,
                "needs one HASH key, first, and at most one RANGE key",
            ));
        }
        Ok(key_schema)
    }

    /// One entry of `GlobalSecondaryIndexes`: its name, key schema and projection.
    pub(super) fn secondary_index(
        &self,
        index: &Value,
        types: &BTreeMap<String, AttributeType>,
        at: &str,
    ) -> Result<SecondaryIndex> {
        let index = index
            .as_mapping()
            .ok_or_else(|| invalid(at, "not a mapping"))?;
        let name = self
            .opt_scalar(index, "IndexName", at)?
            .ok_or_else(|| invalid(at, "missing IndexName"))?;
        let keys = match index.get("KeySchema") {
            Some(Value::Sequence(keys)) => keys,
            _ => return Err(invalid(&format!("{at}.KeySchema"), "missing or not a list")),
        };
        let key_schema = self.key_schema(keys, types, &format!("{at}.KeySchema"))?;
        let at = format!("{at}.Projection");
        let projection = index
            .get("Projection")
            .and_then(Value::as_mapping)
            .ok_or_else(|| invalid(&at, "missing or not a mapping"))?;
        let projection = match self
            .opt_scalar(projection, "ProjectionType", &at)?
            .as_deref()
        {
            Some("KEYS_ONLY") => Projection::KeysOnly,
            Some("ALL") => Projection::All,
            Some("INCLUDE") => match projection.get("NonKeyAttributes") {
                Some(Value::Sequence(names)) => Projection::Include(
                    names
                        .iter()
                        .map(|n| {
                            n.as_str().map(str::to_owned).ok_or_else(|| {
                                invalid(&format!("{at}.NonKeyAttributes"), "not a list of names")
                            })
                        })
                        .collect::<Result<_>>()?,
                ),
                _ => {
                    return Err(invalid(
                        &format!("{at}.NonKeyAttributes"),
                        "INCLUDE needs a list of attribute names",
                    ));
                }
            },
            other => {
                return Err(invalid(
                    &format!("{at}.ProjectionType"),
                    format!("{other:?} is not KEYS_ONLY, INCLUDE or ALL"),
                ));
            }
        };
        Ok(SecondaryIndex {
            name,
            key_schema,
            projection,
        })
    }
}
