"""Helpers for running bench.py on its own against a local endpoint (run_local.sh uses them).

    python harness.py create-tables --idempotency-table T --effects-table E
    python harness.py verify --events FILE --result RESULT.json --idempotency-table T --effects-table E
    python harness.py summary RESULT.json [RESULT.json ...]

create-tables: the two tables as the Rust bench creates them (partition key `id`, S; on-demand).
verify: checks the run against the stored data: RESULT.json reports every record processed with
no failure, the effects table holds exactly one item per distinct message (right paymentId,
messageId, amountCents) and the idempotency table one COMPLETED record per distinct message.
summary: one line per result with the headline numbers.
Like bench.py, refuses to run without a local AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from urllib.parse import urlparse


def _client():
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "").strip()
    host = (urlparse(endpoint).hostname or "").lower()
    if not endpoint or not host or host.endswith("amazonaws.com"):
        sys.exit("harness.py: error: AWS_ENDPOINT_URL must point at a local endpoint (moto)")
    import boto3

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.client(
        "dynamodb",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
    )


def create_tables(a) -> int:
    ddb = _client()
    for name in (a.idempotency_table, a.effects_table):
        ddb.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
        print(f"created table {name}", file=sys.stderr)
    return 0


def _scan(ddb, table: str) -> list[dict]:
    items, kwargs = [], {"TableName": table, "ConsistentRead": True}
    while True:
        page = ddb.scan(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def verify(a) -> int:
    with open(a.events, encoding="utf-8") as f:
        events = json.load(f)["events"]
    with open(a.result, encoding="utf-8") as f:
        result = json.load(f)

    records = [r for e in events for r in e["Records"]]
    distinct: dict[str, dict] = {}
    for r in records:
        distinct.setdefault(r["messageId"], json.loads(r["body"]) | {"messageId": r["messageId"]})
    problems: list[str] = []

    def expect(cond: bool, what: str) -> None:
        if not cond:
            problems.append(what)

    expect(result.get("side") == "powertools", f"side is {result.get('side')!r}")
    expect(result.get("records") == len(records), f"records {result.get('records')} != {len(records)}")
    expect(result.get("batches") == len(events), f"batches {result.get('batches')} != {len(events)}")
    expect(len(result.get("batch_ms", [])) == len(events), "batch_ms has not one entry per batch")
    expect(result.get("failures") == 0, f"failures = {result.get('failures')}: {result.get('errors')}")
    expect(result.get("fresh_records") == len(distinct), f"fresh_records {result.get('fresh_records')} != {len(distinct)}")
    expect(
        result.get("duplicate_records") == len(records) - len(distinct),
        f"duplicate_records {result.get('duplicate_records')} != {len(records) - len(distinct)}",
    )
    expect(result.get("requests_outside_records") == 0, "requests made outside of record processing")

    ddb = _client()
    effects = _scan(ddb, a.effects_table)
    by_payment = {i["id"]["S"]: i for i in effects}
    expect(len(effects) == len(distinct), f"effects table has {len(effects)} items, expected {len(distinct)}")
    for mid, body in distinct.items():
        item = by_payment.get(body["paymentId"])
        if item is None:
            problems.append(f"no effect for payment {body['paymentId']}")
            continue
        expect(item["messageId"]["S"] == mid, f"effect {body['paymentId']}: messageId {item['messageId']['S']} != {mid}")
        expect(
            int(item["amountCents"]["N"]) == body["amountCents"],
            f"effect {body['paymentId']}: amountCents {item['amountCents']['N']} != {body['amountCents']}",
        )
    idem = _scan(ddb, a.idempotency_table)
    expect(len(idem) == len(distinct), f"idempotency table has {len(idem)} records, expected {len(distinct)}")
    statuses = {i.get("status", {}).get("S") for i in idem}
    expect(statuses <= {"COMPLETED"}, f"idempotency record statuses {sorted(map(str, statuses))}")

    if problems:
        print(f"verify: FAILED ({len(problems)} problem(s)):", file=sys.stderr)
        for p in problems[:20]:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(
        f"verify: ok: {len(records)} records in {len(events)} batches, {len(distinct)} effects written once each, "
        f"{len(idem)} COMPLETED idempotency records, no failures",
        file=sys.stderr,
    )
    return 0


def summary(a) -> int:
    for path in a.results:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
        b = r["cold_start_breakdown_ms"]
        print(
            f"{r['side']} {r['version']} {r['mode']:8s} records={r['records']} batches={r['batches']} "
            f"failures={r['failures']}\n"
            f"  cpu/record={r['cpu_us_per_record']:.0f} us (total {r['cpu_ms_total']:.0f} ms)  "
            f"batch median={r['batch_ms_median']:.2f} ms p99={r['batch_ms_p99']:.2f} ms  "
            f"peak RSS={r['peak_rss_mb']:.1f} MB\n"
            f"  cold start={r['cold_start_ms']:.0f} ms from {r['cold_start_from']} "
            f"(imports {b['imports']:.0f}, init {b['init']:.0f}, first batch {b['first_batch']:.0f})  "
            f"requests/fresh={r['requests_per_fresh_record']} requests/duplicate={r['requests_per_duplicate_record']} "
            f"({r['fresh_records']} fresh, {r['duplicate_records']} duplicates)"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create-tables")
    c.add_argument("--idempotency-table", required=True)
    c.add_argument("--effects-table", required=True)
    c.set_defaults(fn=create_tables)
    v = sub.add_parser("verify")
    v.add_argument("--events", required=True)
    v.add_argument("--result", required=True)
    v.add_argument("--idempotency-table", required=True)
    v.add_argument("--effects-table", required=True)
    v.set_defaults(fn=verify)
    s = sub.add_parser("summary")
    s.add_argument("results", nargs="+")
    s.set_defaults(fn=summary)
    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
