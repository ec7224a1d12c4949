"""Generate a benchmark workload: Lambda SQS events, exactly as Lambda sends them.

    python gen_events.py --records 2000 --duplicates 0.2 [--fifo --groups 10] [--batch-size 10]
                         [--seed 1] --out events.json

Writes {"events": [{"Records": [...]}, ...]}: `--records` records in batches of `--batch-size`.
A fraction `--duplicates` of the records are redeliveries of an earlier record (same messageId
and body, a new receiptHandle, ApproximateReceiveCount + 1); the first record is always fresh.
Each body is {"paymentId": ..., "accountId": ..., "amountCents": N}.

--fifo: the records come from a FIFO queue (`payments.fifo`) with `--groups` message groups
(MessageGroupId = accountId, MessageDeduplicationId = paymentId, increasing SequenceNumber);
otherwise from a standard queue (`payments`). The Rust bench generates its own workload in the
same shape; this helper is for testing bench.py on its own. Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import sys
import uuid

REGION = "us-east-1"
ACCOUNT = "123456789012"
BASE_SENT_MS = 1_700_000_000_000


def _receipt_handle(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(120)).decode()


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def generate(records: int, duplicates: float, fifo: bool, groups: int, batch_size: int, seed: int) -> dict:
    if records < 1:
        raise ValueError("--records must be >= 1")
    if not 0 <= duplicates < 1:
        raise ValueError("--duplicates must be in [0, 1)")
    if batch_size < 1 or batch_size > 10:
        raise ValueError("--batch-size must be in 1..10 (the SQS maximum for FIFO is 10)")
    if groups < 1:
        raise ValueError("--groups must be >= 1")

    rng = random.Random(seed)
    n_dup = round(records * duplicates)
    n_fresh = records - n_dup
    # Which positions are duplicates: never the first one (a duplicate needs an earlier record).
    dup_positions = set(rng.sample(range(1, records), n_dup)) if n_dup else set()

    queue = "payments.fifo" if fifo else "payments"
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}"
    sender = "AIDAIO23YVJENQZJOL4VO"
    sequence = 18849496460467696128

    delivered: list[dict] = []  # every record emitted so far
    receive_counts: dict[str, int] = {}
    flat: list[dict] = []
    fresh_made = 0
    for pos in range(records):
        sent_ms = BASE_SENT_MS + pos * 7
        if pos in dup_positions:
            original = rng.choice(delivered)
            message_id = original["messageId"]
            body = original["body"]
            attributes = dict(original["attributes"])
            receive_counts[message_id] += 1
        else:
            fresh_made += 1
            message_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            account = f"acct-{rng.randrange(groups):02d}" if fifo else f"acct-{rng.randrange(1000):03d}"
            payment_id = f"pay-{uuid.UUID(int=rng.getrandbits(128), version=4)}"
            body = json.dumps(
                {"paymentId": payment_id, "accountId": account, "amountCents": rng.randrange(100, 100_000)},
                separators=(",", ":"),
            )
            receive_counts[message_id] = 1
            attributes = {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": str(sent_ms),
                "SenderId": sender,
                "ApproximateFirstReceiveTimestamp": str(sent_ms + 3),
            }
            if fifo:
                sequence += 1
                attributes["SequenceNumber"] = str(sequence)
                attributes["MessageGroupId"] = account
                attributes["MessageDeduplicationId"] = payment_id
        attributes["ApproximateReceiveCount"] = str(receive_counts[message_id])
        record = {
            "messageId": message_id,
            "receiptHandle": _receipt_handle(rng),
            "body": body,
            "attributes": attributes,
            "messageAttributes": {},
            "md5OfBody": _md5(body),
            "eventSource": "aws:sqs",
            "eventSourceARN": arn,
            "awsRegion": REGION,
        }
        delivered.append(record)
        flat.append(record)
    assert fresh_made == n_fresh

    events = [{"Records": flat[i : i + batch_size]} for i in range(0, records, batch_size)]
    return {"events": events}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--duplicates", type=float, default=0.2, help="fraction of records that are redeliveries")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--fifo", action="store_true", help="FIFO queue records (message groups)")
    mode.add_argument("--standard", action="store_true", help="standard queue records (the default)")
    p.add_argument("--groups", type=int, default=10, help="message groups for --fifo")
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="where to write the events JSON ('-' for stdout)")
    a = p.parse_args(argv)
    try:
        doc = generate(a.records, a.duplicates, a.fifo, a.groups, a.batch_size, a.seed)
    except ValueError as e:
        p.error(str(e))
    text = json.dumps(doc, separators=(",", ":"))
    if a.out == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
