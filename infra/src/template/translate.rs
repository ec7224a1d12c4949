//! SAM's own translator: a template with `AWS::Serverless::*` resources is expanded into plain
//! CloudFormation by the pinned `aws-sam-translator` (`infra/tools/sam-translate.py`, run with
//! the Python of `.venv-tools`, which `make tools-install` creates), once per template text: the
//! output is cached under `.local/sam-translate/`, keyed by the SHA-256 of the script, the
//! pinned requirements and the template.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_yaml_ng::Value;
use sha2::{Digest, Sha256};

use super::{Result, TemplateError, invalid};

const SCRIPT: &str = include_str!("../../tools/sam-translate.py");
/// The pins, the translator's among them: a new translator translates again.
const PINS: &str = include_str!("../../tools/requirements.txt");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The template as CloudFormation: translated by SAM's translator when it has SAM resources,
/// else as it is; intrinsics may be in their short (`!Ref`) or long (`Ref:`) form.
///
/// ```
/// let yaml = std::fs::read_to_string(local_aws::template::Template::project_path()).unwrap();
/// let cfn = local_aws::template::translated(&yaml).unwrap();
/// let mapping = &cfn["Resources"]["PaymentProcessorFunctionPayments"];
/// assert_eq!(mapping["Type"].as_str(), Some("AWS::Lambda::EventSourceMapping"));
/// ```
pub fn translated(yaml: &str) -> Result<Value> {
    if !yaml.contains("AWS::Serverless::") {
        return Ok(serde_yaml_ng::from_str(yaml)?);
    }
    let mut digest = Sha256::new();
    for part in [SCRIPT, PINS] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    digest.update(yaml.as_bytes());
    let key: String = digest
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let root = repo_root();
    let cache = root.join(".local/sam-translate");
    let cached = cache.join(format!("{key}.json"));
    let json = match std::fs::read_to_string(&cached) {
        Ok(json) => json,
        Err(_) => {
            let json = run_translator(&root, yaml)?;
            // Written whole, then renamed: a concurrent reader sees all of it or nothing.
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let tmp = cache.join(format!("{key}.{}-{n}.tmp", std::process::id()));
            let _ = std::fs::create_dir_all(&cache)
                .and_then(|()| std::fs::write(&tmp, &json))
                .and_then(|()| std::fs::rename(&tmp, &cached));
            json
        }
    };
    Ok(serde_yaml_ng::from_str(&json)?)
}

fn run_translator(root: &Path, yaml: &str) -> Result<String> {
    let python = root.join(".venv-tools/bin/python");
    let failed = |message: String| TemplateError::Translator { message };
    if !python.exists() {
        return Err(failed(format!(
            "{} is missing: SAM's translator (aws-sam-translator, infra/tools/requirements.txt) \
             is not installed; run `make tools-install`",
            python.display()
        )));
    }
    let mut child = Command::new(&python)
        .arg(root.join("infra/tools/sam-translate.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", python.display())))?;
    let written = child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(yaml.as_bytes());
    let output = child
        .wait_with_output()
        .map_err(|e| failed(format!("sam-translate.py: {e}")))?;
    written.map_err(|e| failed(format!("sam-translate.py: {e}")))?;
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    match output.status.code() {
        Some(0) => String::from_utf8(output.stdout)
            .map_err(|e| failed(format!("sam-translate.py wrote no UTF-8: {e}"))),
        // The translator refused the template: the error is the template's.
        Some(1) if !stderr.contains("Traceback") => Err(invalid("Transform", stderr)),
        _ => Err(failed(format!(
            "sam-translate.py failed ({}): {stderr}",
            output.status
        ))),
    }
}
