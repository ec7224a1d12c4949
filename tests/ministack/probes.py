"""Fidelity probes: what MiniStack does where this project depends on AWS's exact behaviour.

Each probe makes its own uniquely named resources on the endpoint in AWS_ENDPOINT_URL, does one
thing whose AWS outcome is documented, and prints one row: the probe, what AWS does, what the
endpoint did, and `same` or `DIFFERS`. Run it against `make up-ministack` (another terminal,
after `source .local/up.env`):

    .venv-ministack/bin/python tests/ministack/probes.py [--only NAME ...]

The probes on the deployed payments stack (stage throttling, reserved concurrency, log format,
routes) read the stack `payments` when it is there. Takes about 90 s. Exits 0 whatever it
finds: it measures, the table in docs/local-development.md says what follows. The stream probe
leaves a function that MiniStack retries forever (that is one finding): restart
`make up-ministack` after probing.
"""

import argparse
import io
import json
import os
import threading
import time
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

RUN = uuid.uuid4().hex[:8]
CONFIG = Config(retries={"max_attempts": 0}, read_timeout=60)
ddb = boto3.client("dynamodb", config=CONFIG)
streams = boto3.client("dynamodbstreams", config=CONFIG)
sqs = boto3.client("sqs", config=CONFIG)
lam = boto3.client("lambda", config=CONFIG)
iam = boto3.client("iam", config=CONFIG)
cfn = boto3.client("cloudformation", config=CONFIG)
v2 = boto3.client("apigatewayv2", config=CONFIG)

ROWS = []


def row(name: str, aws: str, seen: str, same: bool) -> None:
    ROWS.append((name, aws, seen, same))
    print(f"{'same   ' if same else 'DIFFERS'}  {name}: AWS {aws}; here {seen}", flush=True)


def table(name: str, stream: bool = False) -> str:
    full = f"probe-{RUN}-{name}"
    spec = {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"} if stream else {"StreamEnabled": False}
    ddb.create_table(TableName=full, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}], StreamSpecification=spec)
    return full


def queue(name: str, **attributes) -> tuple[str, str]:
    full = f"probe-{RUN}-{name}" + (".fifo" if attributes.get("FifoQueue") == "true" else "")
    url = sqs.create_queue(QueueName=full, Attributes={k: str(v) for k, v in attributes.items()})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def drain(url: str, seconds: float) -> list[str]:
    """Every body received from `url` within `seconds` (deleted as read)."""
    bodies, end = [], time.time() + seconds
    while time.time() < end:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for m in got.get("Messages", []):
            bodies.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return bodies


# --- DynamoDB -----------------------------------------------------------------------------------

def probe_conditional_writes() -> None:
    t = table("cond")
    wins = []

    def put(i):
        try:
            ddb.put_item(TableName=t, Item={"k": {"S": "one"}, "by": {"N": str(i)}},
                         ConditionExpression="attribute_not_exists(k)")
            wins.append(i)
        except ClientError as e:
            assert e.response["Error"]["Code"] == "ConditionalCheckFailedException", e

    with ThreadPoolExecutor(20) as pool:
        list(pool.map(put, range(20)))
    row("conditional writes under concurrency (20 puts, attribute_not_exists, one key)",
        "exactly 1 succeeds", f"{len(wins)} succeeded", len(wins) == 1)


def probe_all_old() -> None:
    t = table("allold")
    ddb.put_item(TableName=t, Item={"k": {"S": "a"}, "v": {"S": "old"}})
    old = ddb.put_item(TableName=t, Item={"k": {"S": "a"}, "v": {"S": "new"}}, ReturnValues="ALL_OLD")
    try:
        ddb.put_item(TableName=t, Item={"k": {"S": "a"}, "v": {"S": "x"}},
                     ConditionExpression="attribute_not_exists(k)",
                     ReturnValuesOnConditionCheckFailure="ALL_OLD")
        item = None
    except ClientError as e:
        item = e.response.get("Item")
    ok = old.get("Attributes", {}).get("v") == {"S": "old"} and (item or {}).get("v") == {"S": "new"}
    row("ALL_OLD (ReturnValues, and ReturnValuesOnConditionCheckFailure)",
        "the old item, and the current item on a failed condition",
        f"ReturnValues {old.get('Attributes')}, on failure {item}", ok)


def probe_transaction_reasons() -> None:
    t = table("tx")
    ddb.put_item(TableName=t, Item={"k": {"S": "taken"}, "v": {"S": "there"}})
    try:
        ddb.transact_write_items(TransactItems=[
            {"Put": {"TableName": t, "Item": {"k": {"S": "free"}}}},
            {"Put": {"TableName": t, "Item": {"k": {"S": "taken"}},
                     "ConditionExpression": "attribute_not_exists(k)",
                     "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
        ])
        reasons = None
    except ClientError as e:
        reasons = e.response.get("CancellationReasons")
    codes = [r.get("Code") for r in reasons or []]
    item = (reasons or [{}, {}])[1].get("Item") if reasons and len(reasons) > 1 else None
    written = "Item" in ddb.get_item(TableName=t, Key={"k": {"S": "free"}})
    ok = codes == ["None", "ConditionalCheckFailed"] and item == {"k": {"S": "taken"}, "v": {"S": "there"}} and not written
    row("transaction cancellation reasons",
        "[None, ConditionalCheckFailed] with the item, nothing written",
        f"{codes}, item {item}, other put written: {written}", ok)


def probe_stream_order() -> None:
    t = table("order", stream=True)
    for i in range(50):
        ddb.put_item(TableName=t, Item={"k": {"S": "one"}, "n": {"N": str(i)}})
    arn = ddb.describe_table(TableName=t)["Table"]["LatestStreamArn"]
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    seen = []
    for shard in shards:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            got = streams.get_records(ShardIterator=it, Limit=100)
            seen += [int(r["dynamodb"]["NewImage"]["n"]["N"]) for r in got["Records"]]
            if not got["Records"]:
                break
            it = got.get("NextShardIterator")
    row("stream order (50 writes to one key)", "50 records in write order",
        f"{len(seen)} records, in order: {seen == sorted(seen)}", seen == list(range(50)))


# --- SQS ----------------------------------------------------------------------------------------

def probe_fifo_group_lock() -> None:
    url, _ = queue("group", FifoQueue="true", VisibilityTimeout=30)
    for body, group in (("a1", "A"), ("a2", "A"), ("b1", "B")):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group,
                         MessageDeduplicationId=body)
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]["Body"]
    rest = [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]
    ok = first == "a1" and rest == ["b1"]
    row("FIFO group locking (a1 in flight)", "a1, then only b1 (a2 waits behind a1)",
        f"{first}, then {rest}", ok)


def probe_fifo_dedup() -> None:
    url, _ = queue("dedup", FifoQueue="true")
    for _ in range(3):
        sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g", MessageDeduplicationId="d1")
    curl, _ = queue("cdedup", FifoQueue="true", ContentBasedDeduplication="true")
    for _ in range(3):
        sqs.send_message(QueueUrl=curl, MessageBody="same", MessageGroupId="g")
    got = len(drain(url, 2)), len(drain(curl, 2))
    row("FIFO deduplication (3 sends, one id; 3 sends, content-based)", "1 and 1 message",
        f"{got[0]} and {got[1]}", got == (1, 1))


def probe_redrive() -> None:
    _, dlq_arn = queue("redrive-dlq")
    dlq_url = sqs.get_queue_url(QueueName=f"probe-{RUN}-redrive-dlq")["QueueUrl"]
    url, _ = queue("redrive", VisibilityTimeout=1,
                   RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}))
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    receives = 0
    for _ in range(8):
        if sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2).get("Messages"):
            receives += 1
        time.sleep(1.1)
    moved = drain(dlq_url, 2)
    row("redrive (maxReceiveCount 2)", "received 2 times, then in the dead-letter queue",
        f"received {receives} times, {len(moved)} in the dead-letter queue", receives == 2 and len(moved) == 1)


# --- Lambda event sources -----------------------------------------------------------------------

ROLE = None


def role() -> str:
    global ROLE
    if ROLE is None:
        ROLE = iam.create_role(RoleName=f"probe-{RUN}", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"Service": "lambda.amazonaws.com"}}]}))["Role"]["Arn"]
    return ROLE


def zipped(code: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("probe.py", code)
    return buf.getvalue()


# Records what each invocation saw (to LOG_QUEUE), and fails what its name says.
HANDLER = """
import json, os, time, boto3
sqs = boto3.client("sqs")
def key(r):
    if "dynamodb" in r:
        return r["dynamodb"]["Keys"]["k"]["S"], r["dynamodb"]["SequenceNumber"]
    return r["body"], r["messageId"]
def handler(event, context):
    if "Records" not in event:
        time.sleep(event.get("sleep", 0))
        return {"log_format": os.environ.get("AWS_LAMBDA_LOG_FORMAT"), "n": os.environ.get("N")}
    keys = [key(r) for r in event["Records"]]
    sqs.send_message(QueueUrl=os.environ["LOG_QUEUE"], MessageBody=json.dumps([k for k, _ in keys]))
    if any(k.startswith("raise") for k, _ in keys):
        raise RuntimeError("probe: raise")
    return {"batchItemFailures": [{"itemIdentifier": i} for k, i in keys if k.startswith("fail")]}
"""


def function(name: str, **extra) -> tuple[str, str]:
    log_url, _ = queue(f"{name}-log")
    env = {"LOG_QUEUE": log_url, **extra.pop("env", {})}
    arn = lam.create_function(FunctionName=f"probe-{RUN}-{name}", Runtime="python3.12", Role=role(),
                              Handler="probe.handler", Code={"ZipFile": zipped(HANDLER)}, Timeout=10,
                              Environment={"Variables": env}, **extra)["FunctionArn"]
    return arn, log_url


def probe_stream_event_source() -> None:
    """ReportBatchItemFailures, bisecting, retry limit and on-failure destination of a stream."""
    t = table("esm", stream=True)
    arn, log_url = function("stream")
    dest_url, dest_arn = queue("stream-onfailure")
    lam.create_event_source_mapping(
        FunctionName=arn, EventSourceArn=ddb.describe_table(TableName=t)["Table"]["LatestStreamArn"],
        StartingPosition="TRIM_HORIZON", BatchSize=10, MaximumBatchingWindowInSeconds=1,
        FunctionResponseTypes=["ReportBatchItemFailures"], BisectBatchOnFunctionError=True,
        MaximumRetryAttempts=2, DestinationConfig={"OnFailure": {"Destination": dest_arn}})
    time.sleep(2)
    for k in ("ok1", "fail1", "ok2"):
        ddb.put_item(TableName=t, Item={"k": {"S": k}})
    time.sleep(6)
    for k in ("raise1",):
        ddb.put_item(TableName=t, Item={"k": {"S": k}})
    batches = [json.loads(b) for b in drain(log_url, 12)]
    seen = [k for b in batches for k in b]
    dest = drain(dest_url, 2)
    fail_n, raise_n = seen.count("fail1"), seen.count("raise1")
    row("stream event source: a record reported failed (ReportBatchItemFailures, MaximumRetryAttempts 2)",
        "retried from that record, 3 attempts, then the batch to the OnFailure destination",
        f"fail1 attempted {fail_n} times, {len(dest)} OnFailure message(s)", fail_n == 3)
    row("stream event source: a function error (BisectBatchOnFunctionError, MaximumRetryAttempts 2)",
        "3 attempts of the record, then OnFailure, and the shard moves on",
        f"raise1 attempted {raise_n} times in 12 s (no limit), {len(dest)} OnFailure message(s) in all",
        raise_n == 3 and len(dest) == 2)


def probe_sqs_event_source() -> None:
    _, dlq_arn = queue("esm-dlq")
    dlq_url = sqs.get_queue_url(QueueName=f"probe-{RUN}-esm-dlq")["QueueUrl"]
    url, qarn = queue("esm", VisibilityTimeout=2,
                      RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3}))
    arn, log_url = function("sqs")
    lam.create_event_source_mapping(FunctionName=arn, EventSourceArn=qarn, BatchSize=10,
                                    MaximumBatchingWindowInSeconds=1,
                                    FunctionResponseTypes=["ReportBatchItemFailures"])
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": k, "MessageBody": k} for k in ("ok1", "fail1", "ok2")])
    seen = [k for b in drain(log_url, 14) for k in json.loads(b)]
    dead = drain(dlq_url, 2)
    ok = seen.count("ok1") == 1 and seen.count("ok2") == 1 and seen.count("fail1") == 3 and dead == ["fail1"]
    row("SQS event source: partial batch response and redrive (maxReceiveCount 3)",
        "ok1 and ok2 once, fail1 3 times, then in the dead-letter queue",
        f"ok1 {seen.count('ok1')}, ok2 {seen.count('ok2')}, fail1 {seen.count('fail1')} times; dead-lettered {dead}", ok)


def probe_fifo_event_source() -> None:
    url, qarn = queue("esm-fifo", FifoQueue="true", VisibilityTimeout=5)
    arn, log_url = function("fifo")
    lam.create_event_source_mapping(FunctionName=arn, EventSourceArn=qarn, BatchSize=2,
                                    FunctionResponseTypes=["ReportBatchItemFailures"])
    for i in range(6):
        sqs.send_message(QueueUrl=url, MessageBody=f"a{i}", MessageGroupId="A", MessageDeduplicationId=f"a{i}")
    seen = [k for b in drain(log_url, 8) for k in json.loads(b)]
    row("FIFO SQS event source (6 messages of one group, batches of 2)", "a0..a5 once each, in order",
        f"{seen}", seen == [f"a{i}" for i in range(6)])


def probe_reserved_concurrency() -> None:
    arn, _ = function("conc")
    lam.put_function_concurrency(FunctionName=arn, ReservedConcurrentExecutions=1)
    results = []

    def call(_):
        try:
            lam.invoke(FunctionName=arn, Payload=json.dumps({"sleep": 2}))
            results.append("ok")
        except ClientError as e:
            results.append(e.response["Error"]["Code"])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    throttled = sum(r == "TooManyRequestsException" for r in results)
    row("reserved concurrency 1, 3 concurrent invokes", "1 runs, 2 throttled (TooManyRequestsException)",
        f"{results.count('ok')} ran, {throttled} throttled", throttled == 2)


def probe_log_format() -> None:
    arn, _ = function("logs", LoggingConfig={"LogFormat": "JSON"})
    out = json.loads(lam.invoke(FunctionName=arn, Payload=b"{}")["Payload"].read())
    row("LoggingConfig LogFormat JSON", "AWS_LAMBDA_LOG_FORMAT=JSON in the function's environment",
        f"AWS_LAMBDA_LOG_FORMAT={out.get('log_format')}", out.get("log_format") == "JSON")


def probe_numeric_environment() -> None:
    """A number as an environment value in CloudFormation (AWS: the string "10")."""
    name = f"probe-{RUN}-numenv"
    body = {"Resources": {"Fn": {"Type": "AWS::Lambda::Function", "Properties": {
        "FunctionName": name, "Runtime": "python3.12", "Handler": "index.handler", "Role": role(),
        "Code": {"ZipFile": "import os\ndef handler(e, c):\n    return {'n': os.environ.get('N')}\n"},
        "Environment": {"Variables": {"N": 10}}}}}}
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(body))
    cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    value = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]["N"]
    row("a number as an environment value (CloudFormation)", 'the string "10"',
        f"{value!r} ({type(value).__name__}) in GetFunctionConfiguration", value == "10")
    # The same in a provided.al2023 function (as the project's), whose bootstrap is a process.
    s3 = boto3.client("s3", config=CONFIG)
    bucket = f"probe-{RUN}"
    s3.create_bucket(Bucket=bucket)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        info = zipfile.ZipInfo("bootstrap")
        info.external_attr = 0o755 << 16
        z.writestr(info, BOOTSTRAP)
    s3.put_object(Bucket=bucket, Key="code.zip", Body=buf.getvalue())
    # The same bootstrap with N as a string, created directly: its environment is its own
    # variables and Lambda's only (GATEWAY_PORT is MiniStack's own setting, from `up`).
    direct = lam.create_function(FunctionName=f"{name}-direct", Runtime="provided.al2023",
                                 Handler="bootstrap", Role=role(),
                                 Code={"S3Bucket": bucket, "S3Key": "code.zip"},
                                 Environment={"Variables": {"N": "10"}})["FunctionArn"]
    seen = json.loads(lam.invoke(FunctionName=direct, Payload=b"{}")["Payload"].read())
    row("a provided.al2023 function's environment", "its own variables and Lambda's only",
        f"N={seen.get('n')!r}, and MiniStack's own GATEWAY_PORT={seen.get('leak')!r}",
        seen.get("n") == "10" and not seen.get("leak"))
    props = body["Resources"]["Fn"]["Properties"]
    props.update(FunctionName=f"{name}-provided", Runtime="provided.al2023", Handler="bootstrap",
                 Code={"S3Bucket": bucket, "S3Key": "code.zip"})
    cfn.create_stack(StackName=f"{name}-provided", TemplateBody=json.dumps(body))
    cfn.get_waiter("stack_create_complete").wait(StackName=f"{name}-provided",
                                                 WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    answer = lam.invoke(FunctionName=f"{name}-provided", Payload=b"{}")
    out = answer["Payload"].read().decode()
    row("a number as an environment value, provided.al2023 (CloudFormation)",
        'the bootstrap runs with N=10', f"{answer.get('FunctionError') or 'ran'}: {out[:160]}",
        not answer.get("FunctionError") and '"10"' in out)


# A custom runtime's bootstrap, as a shell script: answers every event with its N.
BOOTSTRAP = r"""#!/bin/sh
api="http://$AWS_LAMBDA_RUNTIME_API/2018-06-01/runtime/invocation"
while true; do
  id=$(curl -sS -D - -o /dev/null "$api/next" | tr -d '\r' | sed -n 's/^[Ll]ambda-[Rr]untime-[Aa]ws-[Rr]equest-[Ii]d: //p')
  curl -sS -X POST "$api/$id/response" -d "{\"n\": \"$N\", \"leak\": \"$GATEWAY_PORT\"}" >/dev/null
done
"""


def probe_stage_throttling() -> None:
    arn, _ = function("api")
    api = v2.create_api(Name=f"probe-{RUN}", ProtocolType="HTTP")
    integration = v2.create_integration(ApiId=api["ApiId"], IntegrationType="AWS_PROXY",
                                        IntegrationUri=arn, PayloadFormatVersion="2.0")
    v2.create_route(ApiId=api["ApiId"], RouteKey="GET /",
                    Target=f"integrations/{integration['IntegrationId']}")
    v2.create_stage(ApiId=api["ApiId"], StageName="$default", AutoDeploy=True,
                    DefaultRouteSettings={"ThrottlingBurstLimit": 1, "ThrottlingRateLimit": 1})
    url = f"{os.environ['AWS_ENDPOINT_URL']}/_aws/execute-api/{api['ApiId']}/"
    import urllib.error
    import urllib.request

    def get(_):
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(get, range(10)))
    stored = v2.get_stage(ApiId=api["ApiId"], StageName="$default").get("DefaultRouteSettings")
    row("HTTP API stage throttling (burst 1, rate 1/s; 10 concurrent requests)", "most answer 429",
        f"statuses {sorted(codes)}; stage settings {stored}", codes.count(429) >= 5)


def probe_payments_stack() -> None:
    try:
        cfn.describe_stacks(StackName="payments")
    except ClientError:
        print("(no stack `payments`: its probes skipped)")
        return
    physical = {r["LogicalResourceId"]: r["PhysicalResourceId"]
                for r in cfn.describe_stack_resources(StackName="payments")["StackResources"]}
    api = physical["PaymentsHttpApi"]
    stage = v2.get_stage(ApiId=api, StageName="$default")
    row("payments stack: the HTTP API stage's throttling (ThrottlingRateLimit 50, burst 100)",
        "set on the $default stage", f"DefaultRouteSettings {stage.get('DefaultRouteSettings')}",
        bool(stage.get("DefaultRouteSettings", {}).get("ThrottlingRateLimit")))
    conc = lam.get_function_concurrency(FunctionName="payments-api").get("ReservedConcurrentExecutions")
    row("payments stack: payments-api's ReservedConcurrentExecutions 20", "20", f"{conc}", conc == 20)
    logs = boto3.client("logs", config=CONFIG)
    access = stage.get("AccessLogSettings", {}).get("DestinationArn", "")
    group = access.split(":log-group:")[-1].removesuffix(":*") if access else "/aws/http-api/payments"
    try:
        events = len(logs.filter_log_events(logGroupName=group).get("events", []))
    except ClientError as e:
        events = f"none ({e.response['Error']['Code']})"
    row("payments stack: the HTTP API's access log (after the requests made so far)",
        f"one JSON line per request in {group}", f"{events} events", isinstance(events, int) and events > 0)
    ttl = ddb.describe_time_to_live(TableName=physical["IdempotencyTable"])["TimeToLiveDescription"]
    row("payments stack: the idempotency table's TimeToLiveSpecification (expiration)",
        "ENABLED on expiration", f"{ttl}", ttl.get("TimeToLiveStatus") == "ENABLED")


def probe_sam_http_api() -> None:
    """What `sam deploy` of an HttpApi with one route and a JWT authorizer creates."""
    name = f"probe-{RUN}-httpapi"
    body = {"Transform": "AWS::Serverless-2016-10-31", "Resources": {
        "Api": {"Type": "AWS::Serverless::HttpApi", "Properties": {"Auth": {
            "DefaultAuthorizer": "Jwt", "Authorizers": {"Jwt": {
                "IdentitySource": "$request.header.Authorization",
                "JwtConfiguration": {"issuer": "https://issuer.example.com/", "audience": ["a"]}}}}}},
        "Fn": {"Type": "AWS::Serverless::Function", "Properties": {
            "Runtime": "python3.12", "Handler": "index.handler",
            "InlineCode": "def handler(e, c):\n    return {'statusCode': 200}\n",
            "Events": {"Get": {"Type": "HttpApi", "Properties": {
                "ApiId": {"Ref": "Api"}, "Path": "/x", "Method": "GET"}}}}}}}
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(body),
                     Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"])
    cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    api = next(r["PhysicalResourceId"] for r in cfn.describe_stack_resources(StackName=name)["StackResources"]
               if r["LogicalResourceId"] == "Api")
    routes = [r["RouteKey"] for r in v2.get_routes(ApiId=api)["Items"]]
    authorizers = [a["Name"] for a in v2.get_authorizers(ApiId=api)["Items"]]
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"{os.environ['AWS_ENDPOINT_URL']}/_aws/execute-api/{api}/x",
                                    timeout=30) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    row("SAM HttpApi (one route, a JWT authorizer): what sam deploy creates",
        "route GET /x, its integration, authorizer Jwt (GET /x without a token: 401)",
        f"routes {routes}, authorizers {authorizers} (GET /x: {status})",
        routes == ["GET /x"] and authorizers == ["Jwt"])


def probe_jwt_signature() -> None:
    """The wired authorizer of the payments API: a token whose signature is not the issuer's."""
    if "API_URL" not in os.environ or "API_TOKEN" not in os.environ:
        print("(no API_URL/API_TOKEN: the JWT probe skipped)")
        return
    import urllib.error
    import urllib.request

    def status(token: str) -> int:
        request = urllib.request.Request(f"{os.environ['API_URL']}/payments/pay_x",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    token = os.environ["API_TOKEN"]
    head, claims, signature = token.split(".")
    forged = f"{head}.{claims}.{signature[:-8]}AAAAAAAA"
    got = status(token), status(forged)
    row("JWT authorizer: the issuer's token, then the same with a forged signature",
        "404 (the function: no such payment), then 401", f"{got[0]}, then {got[1]}", got == (404, 401))


PROBES = {
    "conditional": probe_conditional_writes, "all_old": probe_all_old,
    "transactions": probe_transaction_reasons, "stream_order": probe_stream_order,
    "fifo_group": probe_fifo_group_lock, "dedup": probe_fifo_dedup, "redrive": probe_redrive,
    "stream_esm": probe_stream_event_source, "sqs_esm": probe_sqs_event_source, "fifo_esm": probe_fifo_event_source,
    "concurrency": probe_reserved_concurrency, "log_format": probe_log_format,
    "numeric_env": probe_numeric_environment, "throttling": probe_stage_throttling,
    "sam_http_api": probe_sam_http_api, "jwt": probe_jwt_signature, "payments": probe_payments_stack,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(PROBES), default=sorted(PROBES))
    args = parser.parse_args()
    if "AWS_ENDPOINT_URL" not in os.environ:
        raise SystemExit("probes: AWS_ENDPOINT_URL is not set (source .local/up.env)")
    for name in [n for n in PROBES if n in args.only]:
        try:
            PROBES[name]()
        except Exception as e:  # one broken probe must not hide the others
            row(name, "-", f"probe failed: {type(e).__name__}: {e}", False)
    print(f"\n{sum(s for *_, s in ROWS)} same, {sum(not s for *_, s in ROWS)} differ")


if __name__ == "__main__":
    main()
