"""Expands a SAM template into CloudFormation with AWS's own translator (aws-sam-translator).

    sam-translate.py PARAMETERS_JSON < template.yaml > template.json

PARAMETERS_JSON: the parameter values overriding the template's defaults, and the pseudo
parameters (`AWS::Region`, ...), as a JSON object. The output is the translated template as JSON,
intrinsics in their long form; a template without SAM resources comes back as it is. Nothing
calls AWS: the managed policies SAM may attach are in MANAGED_POLICIES, and a function's local
`CodeUri` (what `sam build` packages) becomes a placeholder S3 location, as `sam validate` does.
An error of the template goes to stderr, and the exit code is 1.

local-aws (infra/src/template) runs it with the pinned translator of .venv-tools and caches the
output by the template's digest.
"""

import json
import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samtranslator.model.exceptions import InvalidDocumentException  # noqa: E402
from samtranslator.translator.transform import transform  # noqa: E402
from samtranslator.yaml_helper import yaml_parse  # noqa: E402

# The AWS managed policies SAM attaches to the roles it generates (a function without `Role`,
# an event source's execution policy), by name: ARNs of the aws partition.
MANAGED_POLICIES = {
    name: f"arn:aws:iam::aws:policy/service-role/{name}"
    for name in [
        "AWSLambdaBasicExecutionRole",
        "AWSLambdaDynamoDBExecutionRole",
        "AWSLambdaSQSQueueExecutionRole",
        "AWSLambdaKinesisExecutionRole",
        "AWSLambdaVPCAccessExecutionRole",
        "AWSLambdaRole",
    ]
} | {"AWSXRayDaemonWriteAccess": "arn:aws:iam::aws:policy/AWSXRayDaemonWriteAccess"}

PLACEHOLDER_CODE = "s3://local-aws/code.zip"


class StaticPolicies:
    """The translator's ManagedPolicyLoader, without IAM."""

    def load(self):
        return MANAGED_POLICIES


def placeholder_code(template):
    """A local or missing `CodeUri` of a zip function becomes a placeholder S3 location; a zip
    function without `Runtime` or `Handler` gets the ones of a Rust function (the only kind the
    harness runs)."""

    def local(uri):
        return uri is None or (isinstance(uri, str) and not uri.startswith("s3://"))

    globals_ = (template.get("Globals") or {}).get("Function") or {}
    if "CodeUri" in globals_ and local(globals_["CodeUri"]):
        globals_["CodeUri"] = PLACEHOLDER_CODE
    for resource in (template.get("Resources") or {}).values():
        if not isinstance(resource, dict) or resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.setdefault("Properties", {}) or {}
        resource["Properties"] = props
        if props.get("PackageType") == "Image":
            continue
        for key, value in [("Runtime", "provided.al2023"), ("Handler", "bootstrap")]:
            if key not in props and key not in globals_:
                props[key] = value
        if "InlineCode" in props:
            continue
        if "CodeUri" in props:
            if local(props["CodeUri"]):
                props["CodeUri"] = PLACEHOLDER_CODE
        elif "CodeUri" not in globals_:
            props["CodeUri"] = PLACEHOLDER_CODE


def main():
    parameters = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    template = yaml_parse(sys.stdin.read())
    if not isinstance(template, dict):
        sys.exit("the template is not a mapping")
    resources = template.get("Resources") or {}
    serverless = any(
        isinstance(r, dict) and str(r.get("Type", "")).startswith("AWS::Serverless::")
        for r in resources.values()
    )
    if serverless:
        template.setdefault("Transform", "AWS::Serverless-2016-10-31")
        placeholder_code(template)
        try:
            template = transform(template, parameters, StaticPolicies(), passthrough_metadata=True)
        except InvalidDocumentException as e:
            sys.exit("\n".join(cause.message for cause in e.causes) or e.message)
    json.dump(template, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main()
