//! Payload identity: when two deliveries under one key carry the same work.
//!
//! A key names a unit of work; the payload hash tells whether a second delivery under that key
//! carries the same work (a duplicate, skipped) or other work (a conflict, refused). Producers
//! differ in how they write the same thing, so the hash is **semantic** for JSON:
//!
//! - A body that is JSON is hashed in canonical form: object keys sorted, no white space,
//!   strings and numbers as serde_json writes them. `{"a": 1, "b": 2}` and `{"b":2,"a":1}` are
//!   the same payload. (`1` and `1.0` are not: serde_json keeps integers and floats apart.)
//! - A body that is not JSON is hashed byte for byte.
//! - [`KeyConfig::with_payload_pointers`](crate::key::KeyConfig::with_payload_pointers) hashes only
//!   the fields that define the work, so that envelope fields (a trace id, a schema version, a
//!   sent-at time) do not count.
//!
//! A stored hash carries its scheme: `json:<hex>` for canonical JSON, 64 bare hex digits for raw
//! bytes. Records written before schemes existed hold bare hex for every payload; such a record
//! is compared under the rule that wrote it ([`PayloadHash::matches`]), so an upgrade never turns
//! a stored duplicate into a conflict or a conflict into a duplicate.
//!
//! ```
//! use lambda_idempotency::payload::PayloadHash;
//!
//! let compact = PayloadHash::of_bytes(br#"{"paymentId":"p-1","amountCents":10}"#);
//! let spaced = PayloadHash::of_bytes(br#"{ "amountCents": 10, "paymentId": "p-1" }"#);
//! assert_eq!(compact, spaced);
//! assert!(compact.as_str().starts_with("json:"));
//! assert_ne!(compact, PayloadHash::of_bytes(br#"{"paymentId":"p-1","amountCents":11}"#));
//! // Not JSON: the bytes themselves.
//! assert_eq!(PayloadHash::of_bytes(b"abc"), PayloadHash::raw(b"abc"));
//! ```

use serde_json::Value;

use sha2::{Digest, Sha256};

/// The scheme tag of a hash over canonical JSON.
pub(crate) const JSON_SCHEME: &str = "json:";

/// SHA-256 of `bytes`, as 64 lower-case hex digits ([`PayloadHash::raw`] is the public form).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A payload's hash, as written into a record and compared with a stored one. Two hashes are
/// equal when they write the same hash.
#[derive(Debug, Clone)]
pub struct PayloadHash {
    hash: String,
    /// What records written before hash schemes hold for the same payload, where that differs.
    legacy: Option<String>,
}

impl PayloadHash {
    /// The hash of a body: canonical JSON when it parses as JSON, else its bytes.
    pub fn of_bytes(body: &[u8]) -> Self {
        match serde_json::from_slice::<Value>(body) {
            Ok(value) => Self {
                hash: json_hash(&value),
                legacy: Some(sha256_hex(body)),
            },
            Err(_) => Self::raw(body),
        }
    }

    /// The hash of a JSON value, in canonical form.
    pub fn of_json(value: &Value) -> Self {
        Self {
            hash: json_hash(value),
            legacy: None,
        }
    }

    /// The hash of `bytes` byte for byte, JSON or not.
    pub fn raw(bytes: &[u8]) -> Self {
        Self {
            hash: sha256_hex(bytes),
            legacy: None,
        }
    }

    /// A hash as stored, taken as it is (for a hash computed elsewhere).
    pub fn stored(hash: impl Into<String>) -> Self {
        Self {
            hash: hash.into(),
            legacy: None,
        }
    }

    /// Also matches records written before hash schemes that hold `legacy` for this payload.
    pub(crate) fn with_legacy(mut self, legacy: String) -> Self {
        self.legacy = Some(legacy);
        self
    }

    /// The hash written into new records.
    pub fn as_str(&self) -> &str {
        &self.hash
    }

    /// True when a record holding `stored` carries this payload: the same hash, or, for a record
    /// written before hash schemes (bare hex), the hash that version computed.
    ///
    /// ```
    /// use lambda_idempotency::payload::PayloadHash;
    ///
    /// let body = br#"{"id": 1}"#;
    /// let hash = PayloadHash::of_bytes(body);
    /// assert!(hash.matches(hash.as_str()));
    /// // A record of the previous version: the raw body's hash.
    /// assert!(hash.matches(PayloadHash::raw(body).as_str()));
    /// // The same payload written otherwise, stored by the previous version, stays a conflict
    /// // there as it was: that version compared bytes.
    /// assert!(!hash.matches(PayloadHash::raw(br#"{"id":1}"#).as_str()));
    /// ```
    pub fn matches(&self, stored: &str) -> bool {
        stored == self.hash
            || (!stored.starts_with(JSON_SCHEME) && self.legacy.as_deref() == Some(stored))
    }
}

impl PartialEq for PayloadHash {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}

impl Eq for PayloadHash {}

impl std::fmt::Display for PayloadHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hash)
    }
}

/// `json:` and the SHA-256 (hex) of `value`'s canonical form.
fn json_hash(value: &Value) -> String {
    format!("{JSON_SCHEME}{}", canonical_sha256(value))
}

/// SHA-256 (hex) of `value`'s canonical form (object keys sorted, no white space), without the
/// scheme tag: what the previous version stored for a payload pointer's value.
pub(crate) fn canonical_sha256(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    sha256_hex(&out)
}

/// Writes `value` as canonical JSON. serde_json's map is ordered unless its `preserve_order`
/// feature is on somewhere in the build; the keys are sorted here either way.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_leaf(&Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        leaf => write_leaf(leaf, out),
    }
}

fn write_leaf(value: &Value, out: &mut Vec<u8>) {
    // Writing a `Value` into a Vec cannot fail.
    serde_json::to_writer(&mut *out, value).expect("JSON values serialize");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_ignores_key_order_and_white_space() {
        let a = PayloadHash::of_bytes(br#"{"b":[1,{"d":2,"c":"x"}],"a":null}"#);
        let b = PayloadHash::of_bytes(
            b"{\n  \"a\": null,\n  \"b\": [ 1, { \"c\": \"x\", \"d\": 2 } ]\n}",
        );
        assert_eq!(a.as_str(), b.as_str());
        // Array order is part of the payload.
        let c = PayloadHash::of_bytes(br#"{"b":[{"d":2,"c":"x"},1],"a":null}"#);
        assert_ne!(a.as_str(), c.as_str());
    }

    #[test]
    fn string_escapes_are_canonical() {
        // The same string written with and without escapes.
        let a = PayloadHash::of_bytes(br#"{"s":"\u00e9\/"}"#);
        let b = PayloadHash::of_bytes("{\"s\":\"é/\"}".as_bytes());
        assert_eq!(a.as_str(), b.as_str());
    }

    #[test]
    fn a_legacy_record_is_compared_under_its_own_rule() {
        let body = br#"{"a": 1}"#;
        let hash = PayloadHash::of_bytes(body);
        assert!(hash.matches(&sha256_hex(body)), "the old raw hash");
        assert!(!hash.matches(&sha256_hex(b"{\"a\":2}")));
        // A new-scheme record is never matched by a legacy hash.
        let other = PayloadHash::of_bytes(br#"{"a": 2}"#);
        assert!(!hash.matches(other.as_str()));
        // A raw (non-JSON) payload has one hash, which old and new agree on.
        assert_eq!(
            PayloadHash::of_bytes(b"plain").as_str(),
            sha256_hex(b"plain")
        );
    }

    #[test]
    fn canonical_sha256_is_what_the_previous_version_wrote_for_a_value() {
        let value: Value = serde_json::from_str(r#"{"b":2,"a":[1,"x"]}"#).unwrap();
        assert_eq!(
            canonical_sha256(&value),
            sha256_hex(br#"{"a":[1,"x"],"b":2}"#)
        );
    }
}
