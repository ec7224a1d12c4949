"""The exports of `make up-ministack`: the same names `make up` prints (tests/src/up/mod.rs).

AWS_ENDPOINT_URL, dummy credentials and the region; API_URL and API_TOKEN (signed by the local
issuer, for the caller `alice`, with the stack's WriteScope and ReadScope, valid 12 hours); each
queue's URL (`<LOGICAL_ID>_URL`: PaymentsQueue -> PAYMENTS_QUEUE_URL) and each table's name
(LedgerTable -> LEDGER_TABLE), read from the deployed stack.

Usage: python exports.py STACK_NAME API_URL ISSUER_URL [ENV_FILE]
"""

import os
import re
import shlex
import sys
import urllib.parse
import urllib.request

import boto3

CALLER = "alice"
TOKEN_TTL_SECONDS = 12 * 3600


def env_name(logical_id: str) -> str:
    """PaymentsOutboxDeadLetterQueue -> PAYMENTS_OUTBOX_DEAD_LETTER_QUEUE."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", logical_id).upper()


def quote(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./:=@,-]*", value) else shlex.quote(value)


def main() -> None:
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    stack, api_url, issuer = sys.argv[1:4]
    cfn = boto3.client("cloudformation")
    parameters = {p["ParameterKey"]: p["ParameterValue"]
                  for p in cfn.describe_stacks(StackName=stack)["Stacks"][0].get("Parameters", [])}
    query = urllib.parse.urlencode({
        "sub": CALLER,
        "aud": parameters["JwtAudience"].split(",")[0].strip(),
        "scope": f"{parameters['WriteScope']} {parameters['ReadScope']}",
        "ttl": TOKEN_TTL_SECONDS,
    })
    with urllib.request.urlopen(f"{issuer.rstrip('/')}/token?{query}", timeout=5) as answer:
        token = answer.read().decode()

    region = cfn.meta.region_name
    out = {
        "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "API_URL": api_url,
        "API_TOKEN": token,
    }
    for r in cfn.describe_stack_resources(StackName=stack)["StackResources"]:
        if r["ResourceType"] == "AWS::SQS::Queue":
            out[f"{env_name(r['LogicalResourceId'])}_URL"] = r["PhysicalResourceId"]
        elif r["ResourceType"] == "AWS::DynamoDB::Table":
            out[env_name(r["LogicalResourceId"])] = r["PhysicalResourceId"]
    lines = "".join(f"export {k}={quote(v)}\n" for k, v in sorted(out.items()))
    sys.stdout.write(lines)
    if len(sys.argv) == 5:
        with open(sys.argv[4], "w") as f:
            f.write(lines)


if __name__ == "__main__":
    main()
