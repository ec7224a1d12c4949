import time; T0 = time.perf_counter(); T0_WALL_NS = time.time_ns()  # noqa: E702, I001 -- first: process start

# bench.py: the Python side of the benchmark (`make bench`), AWS Lambda Powertools for Python on the
# same work as the Rust library. See README.md beside this file.
#
#   python bench.py --events FILE --idempotency-table T --effects-table E
#                   (--standard|--fifo|--dynamodb-streams|--kinesis|--kafka)
#                   --out RESULT.json [--started-at-ns NS] [--lambda-timeout-ms MS]
#
# Runs a Lambda-style `handler(event, context)` on each event of FILE ({"events": [{"Records":
# [...]}, ...]}), in order, in this one process, the way one warm Lambda execution environment
# would. The handler is the documented Powertools pattern: `process_partial_response` with a
# `BatchProcessor(event_type=EventType.SQS)` (`SqsFifoPartialProcessor` with --fifo) over a record
# handler decorated with `idempotent_function(data_keyword_argument="record")`, keyed on the
# message id (`IdempotencyConfig(event_key_jmespath="messageId")`), persisted by
# `DynamoDBPersistenceLayer`; the record handler does one `PutItem` into the effects table.
# With --dynamodb-streams or --kinesis the events are a DynamoDB stream's or a Kinesis stream's,
# the processor `BatchProcessor(event_type=EventType.DynamoDBStreams / KinesisDataStreams)`, the
# key the record's `eventID` (the Kinesis one is the shard id and the sequence number), and the
# payment the new image or the data. With --kafka the events are an Amazon MSK event source
# mapping's ({"records": {"topic-partition": [...]}}, key and value base64), the processor
# `BatchProcessor(event_type=EventType.Kafka)` (which reports every failed record by its
# partition and offset), the key the record's topic, partition and offset, and the payment the
# value (`json_value`).
#
# Talks only to AWS_ENDPOINT_URL (required: without it, or pointing at amazonaws.com, it refuses
# to run). Exit status: 0 when every record succeeded, 2 when RESULT.json was written but some
# records failed (`failures` > 0), 1 on a usage or set-up error (no RESULT.json).

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from urllib.parse import urlparse  # noqa: E402

SIDE = "powertools"
SCHEMA_VERSION = 1


def _die(msg: str) -> None:
    print(f"bench.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="bench.py", description="Powertools side of the idempotent batch benchmark")
    p.add_argument("--events", required=True, help='JSON file {"events": [{"Records": [...]}, ...]}')
    p.add_argument("--idempotency-table", required=True, help="DynamoDB table for Powertools' idempotency records")
    p.add_argument("--effects-table", required=True, help="DynamoDB table the record handler writes to")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--fifo", action="store_true", help="FIFO queue events: SqsFifoPartialProcessor")
    mode.add_argument("--standard", action="store_true", help="standard queue events: BatchProcessor")
    mode.add_argument(
        "--dynamodb-streams",
        action="store_true",
        help="DynamoDB stream events: BatchProcessor(event_type=EventType.DynamoDBStreams)",
    )
    mode.add_argument(
        "--kinesis", action="store_true", help="Kinesis events: BatchProcessor(event_type=EventType.KinesisDataStreams)"
    )
    mode.add_argument("--kafka", action="store_true", help="Kafka events: BatchProcessor(event_type=EventType.Kafka)")
    p.add_argument("--out", required=True, help="where to write RESULT.json")
    p.add_argument(
        "--started-at-ns",
        type=int,
        default=None,
        help="the parent's wall clock (ns since the Unix epoch) just before it spawned this process; "
        "cold start is then measured from there instead of from this script's first line",
    )
    p.add_argument(
        "--init-only",
        action="store_true",
        help="stop after the init phase: print `ready` on stdout and exit 0, reading no events "
        "(the init time of `bench-package`)",
    )
    p.add_argument(
        "--lambda-timeout-ms",
        type=int,
        default=30_000,
        help="the fake Lambda context's deadline, per invocation (default 30000, payment-processor's timeout)",
    )
    return p.parse_args(argv)


def _check_endpoint() -> str:
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "").strip()
    if not endpoint:
        _die("AWS_ENDPOINT_URL is not set; this benchmark only runs against a local endpoint (moto)")
    host = (urlparse(endpoint).hostname or "").lower()
    if not host or host == "amazonaws.com" or host.endswith(".amazonaws.com"):
        _die(f"AWS_ENDPOINT_URL={endpoint} is not a local endpoint; refusing to call real AWS")
    # Dummy credentials (the local endpoint accepts any); never look for real ones.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        os.environ.pop(var, None)
    return endpoint


def _source(args) -> str:
    """The events' source: `standard`, `fifo`, `dynamodb-streams`, `kinesis` or `kafka`."""
    if args.dynamodb_streams:
        return "dynamodb-streams"
    if args.kinesis:
        return "kinesis"
    if args.kafka:
        return "kafka"
    return "fifo" if args.fifo else "standard"


def _record_key(source: str) -> str:
    """The JMESPath of what identifies a record of `source` across deliveries (the idempotency
    key): the message id, a stream record's `eventID`, a Kafka record's topic, partition and offset."""
    if source == "kafka":
        return "[topic, partition, offset]"
    return "messageId" if source in ("standard", "fifo") else "eventID"


def _record_id(source: str):
    """A record's id (a dict as Lambda delivers it): the same as `_record_key`'s, as a string
    (`topic-partition@offset` for Kafka, as the Rust side names it); None when it has none."""
    if source == "kafka":

        def kafka_id(record: dict):
            topic, partition, offset = (record.get(k) for k in ("topic", "partition", "offset"))
            if not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(offset, int):
                return None
            return f"{topic}-{partition}@{offset}"

        return kafka_id
    field = _record_key(source)

    def field_id(record: dict):
        value = record.get(field)
        return value if isinstance(value, str) else None

    return field_id


def _event_records(event, source: str):
    """The records of `event` (a list; a Kafka event's `records` map flattened), or None."""
    if not isinstance(event, dict):
        return None
    if source == "kafka":
        partitions = event.get("records")
        if not isinstance(partitions, dict) or not all(isinstance(p, list) for p in partitions.values()):
            return None
        return [r for records in partitions.values() for r in records]
    records = event.get("Records")
    return records if isinstance(records, list) else None


def _load_events(path: str, source: str = "standard") -> tuple[list[tuple[int, int]], list[int], object]:
    """Splits the workload into its events, each as compact JSON in an anonymous temporary file,
    read back and decoded just before its invocation (as the Lambda runtime decodes the event it
    receives): the process never holds the whole workload, which would show in the peak RSS.
    Returns each event's (offset, length) in the file, its record count, and the file."""
    import tempfile  # here, so that its import is timed with the loading, not the cold start
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        _die(f"cannot read events from {path}: {e}")
    events = doc.get("events") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        _die(f'{path}: expected {{"events": [{{"Records": [...]}}, ...]}} with at least one event')
    spill = tempfile.TemporaryFile()
    spans, counts, offset = [], [], 0
    record_id = _record_id(source)
    for i, event in enumerate(events):
        records = _event_records(event, source)
        if not records:
            _die(f"{path}: event {i} has no records (a {source} event)")
        for r in records:
            if not isinstance(r, dict) or record_id(r) is None:
                _die(f"{path}: event {i} has a record without its id ({_record_key(source)})")
        raw = json.dumps(event, separators=(",", ":")).encode()
        spill.write(raw)
        spans.append((offset, len(raw)))
        counts.append(len(records))
        offset += len(raw)
    spill.flush()
    del doc, events
    return spans, counts, spill


class FakeLambdaContext:
    """What the Lambda runtime passes as `context` (the attributes Powertools may read)."""

    function_name = "powertools-bench"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:powertools-bench"
    memory_limit_in_mb = 128
    log_group_name = "/aws/lambda/powertools-bench"
    log_stream_name = "bench"
    identity = None
    client_context = None

    def __init__(self, request_id: str, timeout_ms: int):
        self.aws_request_id = request_id
        self._deadline_ms = time.time() * 1000 + timeout_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int(self._deadline_ms - time.time() * 1000))


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending list."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n * q / 100), at least 1
    return sorted_values[int(rank) - 1]


def main(argv=None) -> int:
    args = _parse_args(argv)
    source = _source(args)
    key_path = _record_key(source)
    record_id = _record_id(source)
    endpoint = _check_endpoint()
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"

    # Reading the workload file is the harness's work, not the function's: it is timed and taken
    # out of the cold start.
    t_load = time.perf_counter()
    if args.init_only:
        event_spans, record_counts, spill, spill_fd = [], [], None, -1
    else:
        event_spans, record_counts, spill = _load_events(args.events, source)
        spill_fd = spill.fileno()
    events_load_s = time.perf_counter() - t_load

    # ---- init phase (what a Lambda cold start runs before the first invocation) ----
    t_import = time.perf_counter()
    import boto3
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        SqsFifoPartialProcessor,
        process_partial_response,
    )
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    t_init = time.perf_counter()
    # One DynamoDB client, shared by the persistence layer and the record handler (as one would
    # write it in a function: one client, created once per execution environment).
    dynamodb = boto3.session.Session().client("dynamodb", region_name=region, endpoint_url=endpoint)

    # Every HTTP request botocore sends (retries included) goes through before-send.
    requests = [0]

    def count_request(**_kwargs):
        requests[0] += 1
        # Must return None: a non-None value would be taken as the response.

    dynamodb.meta.events.register("before-send.dynamodb.*", count_request)
    # The record handler's own requests (its PutItem), so that the store's can be told apart.
    handler_requests = [0]

    persistence = DynamoDBPersistenceLayer(table_name=args.idempotency_table, boto3_client=dynamodb)
    config = IdempotencyConfig(event_key_jmespath=key_path)
    effects_table = args.effects_table

    # The payment and the record's id, from each source's record as Powertools gives it.
    if source == "dynamodb-streams":

        def payment_of(record):
            return record.dynamodb.new_image, record.event_id

    elif source == "kinesis":

        def payment_of(record):
            return record.kinesis.data_as_json(), record.event_id

    elif source == "kafka":

        def payment_of(record):
            return record.json_value, f"{record.topic}-{record.partition}@{record.offset}"

    else:

        def payment_of(record):
            return json.loads(record.body), record.message_id

    @idempotent_function(data_keyword_argument="record", config=config, persistence_store=persistence)
    def record_handler(record):
        payment, record_id = payment_of(record)
        before = requests[0]
        dynamodb.put_item(
            TableName=effects_table,
            Item={
                "id": {"S": payment["paymentId"]},
                "messageId": {"S": record_id},
                # An int: the DynamoDB image's numbers come as Decimal.
                "amountCents": {"N": str(int(payment["amountCents"]))},
            },
        )
        handler_requests[0] += requests[0] - before

    # Per-record attribution of requests: Powertools' own requests (the conditional PutItem before
    # the handler, the UpdateItem after it) happen inside BatchProcessor._process_record, around
    # the record handler, so the count is taken there. Fresh = first time this messageId is seen
    # in the run; duplicate = seen before.
    seen: set[str] = set()
    per_record = {
        "fresh_records": 0,
        "fresh_requests": 0,
        "fresh_handler_requests": 0,
        "duplicate_records": 0,
        "duplicate_requests": 0,
        "duplicate_handler_requests": 0,
    }

    class CountingMixin:
        def _process_record(self, record: dict):
            message_id = record_id(record)
            before, handler_before = requests[0], handler_requests[0]
            try:
                return super()._process_record(record)
            finally:
                spent = requests[0] - before
                handler_spent = handler_requests[0] - handler_before
                kind = "duplicate" if message_id in seen else "fresh"
                seen.add(message_id)
                per_record[f"{kind}_records"] += 1
                per_record[f"{kind}_requests"] += spent
                per_record[f"{kind}_handler_requests"] += handler_spent

    class CountingBatchProcessor(CountingMixin, BatchProcessor):
        pass

    class CountingSqsFifoPartialProcessor(CountingMixin, SqsFifoPartialProcessor):
        pass

    if source == "fifo":
        processor = CountingSqsFifoPartialProcessor()
    elif source == "dynamodb-streams":
        processor = CountingBatchProcessor(event_type=EventType.DynamoDBStreams)
    elif source == "kinesis":
        processor = CountingBatchProcessor(event_type=EventType.KinesisDataStreams)
    elif source == "kafka":
        processor = CountingBatchProcessor(event_type=EventType.Kafka)
    else:
        processor = CountingBatchProcessor(event_type=EventType.SQS)

    def handler(event, context):
        config.register_lambda_context(context)
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    t_init_end = time.perf_counter()
    if args.init_only:
        print("ready", flush=True)
        return 0

    # ---- invocations ----
    batch_ms: list[float] = []
    batch_cpu_s = 0.0
    decode_cpu_s = 0.0
    failures = 0
    failed_batches = 0
    errors: list[str] = []
    first_batch_end = None
    ru_before = resource.getrusage(resource.RUSAGE_SELF)
    for i, ((offset, length), n_records) in enumerate(zip(event_spans, record_counts)):
        c0 = time.process_time()
        # The runtime receives and decodes the event: not the function's work, kept out of the CPU time.
        event = json.loads(os.pread(spill_fd, length, offset))
        context = FakeLambdaContext(f"bench-{i:06d}", args.lambda_timeout_ms)
        c1 = time.process_time()
        w0 = time.perf_counter()
        try:
            response = handler(event, context)
        except Exception as e:  # a batch whose every record failed raises: all of it failed
            response = None
            failures += n_records
            failed_batches += 1
            if len(errors) < 10:
                errors.append(f"batch {i}: {type(e).__name__}: {e}")
        w1 = time.perf_counter()
        c2 = time.process_time()
        if first_batch_end is None:
            first_batch_end = w1
        batch_ms.append((w1 - w0) * 1000)
        decode_cpu_s += c1 - c0
        batch_cpu_s += c2 - c1
        if response is not None:
            items = response.get("batchItemFailures") if isinstance(response, dict) else None
            if not isinstance(items, list):
                failures += n_records
                failed_batches += 1
                if len(errors) < 10:
                    errors.append(f"batch {i}: unexpected response {response!r}")
            elif items:
                failures += len(items)
                failed_batches += 1
                if len(errors) < 10:
                    errors.append(f"batch {i}: batchItemFailures {items!r}")
    ru_after = resource.getrusage(resource.RUSAGE_SELF)
    spill.close()

    # ---- results ----
    import importlib.metadata

    n_records = sum(record_counts)
    loop_cpu_s = (ru_after.ru_utime - ru_before.ru_utime) + (ru_after.ru_stime - ru_before.ru_stime)
    if args.started_at_ns is not None:
        spawn_to_main_ms = (T0_WALL_NS - args.started_at_ns) / 1e6
        cold_origin = "started_at_ns"
    else:
        spawn_to_main_ms = 0.0
        cold_origin = "script_first_line"
    cold_start_ms = spawn_to_main_ms + (first_batch_end - T0 - events_load_s) * 1000
    sorted_ms = sorted(batch_ms)
    fresh_n, dup_n = per_record["fresh_records"], per_record["duplicate_records"]
    attributed = per_record["fresh_requests"] + per_record["duplicate_requests"]

    result = {
        "side": SIDE,
        "schema": SCHEMA_VERSION,
        "version": importlib.metadata.version("aws-lambda-powertools"),
        "boto3_version": boto3.__version__,
        "python": sys.version.split()[0],
        "mode": source,
        "records": n_records,
        "batches": len(batch_ms),
        "batch_ms": [round(x, 4) for x in batch_ms],
        "batch_ms_median": round(_percentile(sorted_ms, 50), 4),
        "batch_ms_p99": round(_percentile(sorted_ms, 99), 4),
        "cpu_ms_total": round(batch_cpu_s * 1000, 3),
        "cpu_us_per_record": round(batch_cpu_s * 1e6 / n_records, 2),
        "cpu_ms_loop_rusage": round(loop_cpu_s * 1000, 3),
        "cpu_ms_loop_user": round((ru_after.ru_utime - ru_before.ru_utime) * 1000, 3),
        "cpu_ms_loop_sys": round((ru_after.ru_stime - ru_before.ru_stime) * 1000, 3),
        "cpu_ms_event_decode": round(decode_cpu_s * 1000, 3),
        "peak_rss_mb": round(ru_after.ru_maxrss / 1024, 2),
        "cold_start_ms": round(cold_start_ms, 3),
        "cold_start_from": cold_origin,
        # From process start to the handler ready (the Lambda init phase).
        "init_ms": round(cold_start_ms - batch_ms[0] - (first_batch_end - batch_ms[0] / 1000 - t_init_end) * 1000, 3),
        "cold_start_breakdown_ms": {
            "spawn_to_first_line": round(spawn_to_main_ms, 3) if args.started_at_ns is not None else None,
            "first_line_to_imports": round((t_import - T0 - events_load_s) * 1000, 3),
            "imports": round((t_init - t_import) * 1000, 3),
            "init": round((t_init_end - t_init) * 1000, 3),
            "until_first_invoke": round((first_batch_end - batch_ms[0] / 1000 - t_init_end) * 1000, 3),
            "first_batch": round(batch_ms[0], 3),
        },
        "events_load_ms": round(events_load_s * 1000, 3),
        "fresh_records": fresh_n,
        "duplicate_records": dup_n,
        # 0 (not null) when there are no such records: readers may want a plain number.
        "requests_per_fresh_record": round(per_record["fresh_requests"] / fresh_n, 4) if fresh_n else 0.0,
        "requests_per_duplicate_record": round(per_record["duplicate_requests"] / dup_n, 4) if dup_n else 0.0,
        "store_requests_per_fresh_record": round(
            (per_record["fresh_requests"] - per_record["fresh_handler_requests"]) / fresh_n, 4
        )
        if fresh_n
        else 0.0,
        "store_requests_per_duplicate_record": round(
            (per_record["duplicate_requests"] - per_record["duplicate_handler_requests"]) / dup_n, 4
        )
        if dup_n
        else 0.0,
        "requests_total": requests[0],
        "requests_outside_records": requests[0] - attributed,
        "failures": failures,
        "failed_batches": failed_batches,
        "errors": errors,
    }
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = f"{args.out}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)

    if failures:
        print(f"bench.py: {failures} record(s) failed in {failed_batches} batch(es); see {args.out}", file=sys.stderr)
        for line in errors:
            print(f"  {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
