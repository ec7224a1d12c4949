"""moto's server, with the atomicity real AWS gives and moto's threaded server does not.

- DynamoDB: real DynamoDB applies a conditional write atomically on its item. moto's threaded
  server does not: two concurrent UpdateItem calls on one key can both pass the condition, or one
  can read the item half written by the other. DynamoDB requests are applied one at a time.
- SQS: a FIFO queue never hands out a message group that is in flight to a second consumer.
  moto decides which groups are in flight at the start of a ReceiveMessage, so two concurrent
  receives can both take messages of one group, and a consumer then handles them out of order.
  Each receive (without its long-poll wait) and each call that changes messages runs under one
  lock; a long poll waits outside it and tries again every 20 ms.
- SQS: moto keeps its own set of in-flight messages, and it drifts from what SQS means by in
  flight (received, and not visible again yet): when several in-flight messages of a FIFO group
  become visible again together, moto checks the first one against the group's other messages,
  still marked in flight, skips it, and hands out a later one first; and a group whose earlier
  messages were still invisible after a failed batch had a later message handed out alone, so
  the group was charged out of order. Before each receive the set is rebuilt from the messages
  themselves: received and not visible. The rebuild and the receive read one clock, fixed at the
  start of the receive: otherwise messages that become visible between the two are still marked
  in flight when the receive reaches them, and moto hands out the group's last one first.
- SQS: moto reads a queue's ContentBasedDeduplication setting by computing all of the queue's
  attributes, message counts included, three times per message sent: a send cost time in
  proportion to the queue's depth. While a message is sent, the setting is read directly.
- SQS: moto drops a queue's RedriveAllowPolicy: CreateQueue and SetQueueAttributes accept it and
  forget it, and GetQueueAttributes rejects the name. It is kept (an empty value removes it),
  checked as SQS checks its form, and returned like the other attributes. Whether a source queue
  may use the queue as its dead-letter queue is not enforced.
- DynamoDB: an item may hold 400 KB (409,600 bytes), attribute names included. moto rejects an
  item over 405,000 bytes, and while it replaces an attribute it counts the old value and the new
  one together. The size is checked as DynamoDB does: the item as it would be, against 409,600.

- DynamoDB: TransactWriteItems checks every condition before it writes anything, and writes all
  or nothing. moto applied the actions one by one (a cancelled transaction wrote and took back)
  and copied every table it names in full before each transaction, so a transaction's cost grew
  with its tables' size (about a second on tables of a few thousand items). Conditions are checked
  first, and only the items written (and their stream records) are kept to undo a failed write.
  A Put whose item lacks a key attribute of its table is refused as DynamoDB refuses it (a
  ValidationException, "Missing the key ... in the item"), not with a server error.

- Kinesis: a shard that is split or merged is closed and keeps its records; new records go to
  the open shards that cover their hash key, and reading a closed shard to its end returns no
  NextShardIterator, so a reader knows it is done and moves to the children. moto moved a split
  shard's records into its children (delivering them again, under new sequence numbers), kept
  putting new records into the closed parent (it chose among all shards, closed ones first), and
  returned a NextShardIterator for a closed shard forever, so a reader never finished it.

And two changes of cost alone, for the suites that load one server with many stacks at once:

- SQS: a long poll that finds nothing waits until something could change its answer (a send, a
  visibility change, a delete, a receive that took or moved messages, or the moment a message of
  the queue becomes visible or its delay ends), at most 250 ms, instead of receiving again every
  20 ms. Idle pollers held most of a core.
- Each request's service was looked up by listing moto's package directory and matching hundreds
  of patterns; the answer for a host is kept. Requests are not logged one by one.

Same arguments as `moto_server` (-H HOST -p PORT ...).
"""

import copy
import functools
import json
import logging
import threading
import time

import moto.server as server
from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.exceptions import (
    ItemSizeTooLarge,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend, dynamo_type
from moto.dynamodb.models.utilities import bytesize
from moto.core.utils import unix_time_millis
from moto.kinesis.models import KinesisBackend, Stream as KinesisStream
from moto.kinesis.utils import decompose_shard_iterator
from moto.sqs.exceptions import InvalidAttributeValue
from moto.sqs.models import Message, Queue, SQSBackend

_dynamodb_lock = threading.Lock()
_sqs_lock = threading.RLock()
# Notified, under _sqs_lock, whenever a queue's messages change in a way that can make a waiting
# long poll's answer non-empty.
_sqs_changed = threading.Condition(_sqs_lock)
# The longest a long poll sleeps before it looks again, whatever it expects.
_LONG_POLL_NAP = 0.25


class _SerializedDynamoDB(server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with _dynamodb_lock:
                # Run the whole request, body included, under the lock.
                return list(super().__call__(environ, start_response))
        return super().__call__(environ, start_response)


def _locked(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with _sqs_lock:
            try:
                return method(*args, **kwargs)
            finally:
                _sqs_changed.notify_all()

    return wrapper


_receive_once = SQSBackend.receive_message
_clock = threading.local()


def _now_millis():
    now = getattr(_clock, "millis", None)
    return unix_time_millis() if now is None else now


def _visible(self):
    return _now_millis() > self.visible_at


def _delayed(self):
    return _now_millis() < self.delayed_until


Message.visible = property(_visible)
Message.delayed = property(_delayed)


@functools.wraps(_receive_once)
def _receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
    deadline = time.monotonic() + (wait_seconds_timeout or 0)
    with _sqs_lock:
        while True:
            now = _clock.millis = unix_time_millis()
            try:
                queue = self.get_queue(queue_name)
                # In flight, as SQS means it: received, and not visible again yet. And the first
                # moment a message of the queue becomes visible or ends its delay.
                wakes = []
                for message in queue._messages:
                    visible = message.visible
                    if message.approximate_receive_count > 0 and not visible:
                        queue.pending_messages.add(message)
                    else:
                        queue.pending_messages.discard(message)
                    if not visible:
                        wakes.append(message.visible_at)
                    if message.delayed:
                        wakes.append(message.delayed_until)
                wake = min(wakes, default=None)
                depth = len(queue._messages)
                result = _receive_once(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            finally:
                _clock.millis = None
            if result or len(queue._messages) != depth:
                # Messages taken, or moved to the dead-letter queue: other polls may now find some.
                _sqs_changed.notify_all()
            left = deadline - time.monotonic()
            if result or left <= 0:
                return result
            nap = min(left, _LONG_POLL_NAP)
            if wake is not None:
                nap = min(nap, max(0.0, (wake - now) / 1000) + 0.001)
            _sqs_changed.wait(nap)


SQSBackend.receive_message = _receive_message

_sending = threading.local()
_all_attributes = Queue.attributes.fget


def _attributes(self):
    if getattr(_sending, "active", False):
        return {"ContentBasedDeduplication": str(bool(self.content_based_deduplication)).lower()}
    return _all_attributes(self)


def _sending_call(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        outer = getattr(_sending, "active", False)
        _sending.active = True
        try:
            return method(*args, **kwargs)
        finally:
            _sending.active = outer

    return wrapper


def _attributes_with_redrive_allow_policy(self):
    result = _attributes(self)
    if getattr(_sending, "active", False):
        return result
    if self.redrive_allow_policy is None:
        result.pop("RedriveAllowPolicy", None)
    return result


def _check_redrive_allow_policy(value):
    """The form SQS accepts: JSON, a known redrivePermission, 1-10 sourceQueueArns for byQueue only."""
    try:
        policy = json.loads(value)
    except ValueError:
        raise InvalidAttributeValue("RedriveAllowPolicy")
    if not isinstance(policy, dict):
        raise InvalidAttributeValue("RedriveAllowPolicy")
    permission = policy.get("redrivePermission")
    sources = policy.get("sourceQueueArns")
    if permission == "byQueue":
        if not isinstance(sources, list) or not 1 <= len(sources) <= 10:
            raise InvalidAttributeValue("RedriveAllowPolicy")
    elif permission not in ("allowAll", "denyAll") or sources is not None:
        raise InvalidAttributeValue("RedriveAllowPolicy")


_set_attributes_once = Queue._set_attributes


def _set_attributes(self, attributes, now=None):
    if "RedriveAllowPolicy" in attributes:
        attributes = dict(attributes)
        value = attributes.pop("RedriveAllowPolicy")
        if value in (None, ""):
            self.redrive_allow_policy = None
        else:
            _check_redrive_allow_policy(value)
            self.redrive_allow_policy = value
    _set_attributes_once(self, attributes, now)


Queue.redrive_allow_policy = None
Queue.BASE_ATTRIBUTES = Queue.BASE_ATTRIBUTES + ["RedriveAllowPolicy"]
Queue._set_attributes = _set_attributes
Queue.attributes = property(_attributes_with_redrive_allow_policy)
SQSBackend.send_message = _sending_call(SQSBackend.send_message)
SQSBackend.send_message_batch = _sending_call(SQSBackend.send_message_batch)
for _name in (
    "send_message",
    "send_message_batch",
    "delete_message",
    "delete_message_batch",
    "change_message_visibility",
    "change_message_visibility_batch",
    "purge_queue",
    "set_queue_attributes",
):
    setattr(SQSBackend, _name, _locked(getattr(SQSBackend, _name)))

server.DomainDispatcherApplication = _SerializedDynamoDB

# The service of a host: moto lists its package directory (and stats each entry) and matches its
# URL patterns again for every request. The answer for a host never changes while it runs.
_backend_for_host_once = server.DomainDispatcherApplication.get_backend_for_host
_backends_by_host = {}


def _backend_for_host(self, host):
    try:
        return _backends_by_host[host]
    except KeyError:
        backend = _backends_by_host[host] = _backend_for_host_once(self, host)
        return backend


_SerializedDynamoDB.get_backend_for_host = _backend_for_host
# One line per request in the log costs a tenth of the server's time under load.
logging.getLogger("werkzeug").setLevel(logging.WARNING)

MAX_ITEM_BYTES = 400 * 1024


def _attribute_size(name, value):
    size = value.size() if type(value) is dynamo_type.DynamoType else bytesize(str(value))
    return bytesize(name) + size


def _set_item_attribute(self, key, value):
    after = sum(_attribute_size(k, v) for k, v in self.items() if k != key)
    if after + _attribute_size(key, value) > MAX_ITEM_BYTES:
        raise ItemSizeTooLarge
    dict.__setitem__(self, key, value)


dynamo_type.LimitedSizeDict.__setitem__ = _set_item_attribute


def _transact_write_items(self, transact_items):
    """TransactWriteItems as DynamoDB runs it: every condition checked first, then every write
    applied, or none.

    moto applies the actions one by one and, to undo them, copies every table the transaction
    names in full first: a transaction's cost grew with its tables (about a second on tables of
    a few thousand items), and a cancelled one applied writes and took them back. Here nothing is
    applied when a condition fails, and only the items a transaction writes (and its tables'
    stream records) are kept, to undo the writes should one of them fail."""
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    seen = set()
    actions = []
    reasons = []
    for item in transact_items:
        if len(item) > 1:
            raise TransactWriteSingleOpException
        op_type, op = next(iter(item.items()))
        if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
            raise MockValidationException(f"Unsupported transaction operation {op_type}")
        table = self.get_table(op["TableName"])
        if op_type == "Put":
            # DynamoDB refuses the whole request when a Put lacks a key attribute of its table
            # (moto's own code stopped at a KeyError here: a 500, which the SDK retries).
            for name in (table.hash_key_attr, table.range_key_attr):
                if name is not None and name not in op["Item"]:
                    raise MockValidationException(
                        f"One or more parameter values were invalid: Missing the key {name} in the item"
                    )
            key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
            if table.range_key_attr is not None:
                key[table.range_key_attr] = op["Item"][table.range_key_attr]
        else:
            key = op["Key"]
        target = (op["TableName"], str(dict(sorted(key.items()))))
        if target in seen:
            raise MultipleTransactionsException()
        seen.add(target)
        current = self.get_item(op["TableName"], key)
        condition = op.get("ConditionExpression")
        reason = (None, None, None)
        if condition is not None:
            check = get_filter_expression(
                condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
            )
            if not check.expr(current):
                old = None
                if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                    old = current.to_json()["Attributes"]
                reason = ("ConditionalCheckFailed", "The conditional request failed", old)
        reasons.append(reason)
        actions.append((op_type, op, table, key, copy.deepcopy(current)))
    if any(code is not None for code, _, _ in reasons):
        raise TransactionCanceledException(reasons)
    streams = {
        id(table): (table.stream_shard, len(table.stream_shard.items))
        for _, _, table, _, _ in actions
        if table.stream_shard is not None
    }
    done = []
    try:
        for op_type, op, table, key, before in actions:
            # The condition again (it holds: requests run one at a time), so that moto checks
            # the expressions' names and values as it does for a single write.
            common = {
                "condition_expression": op.get("ConditionExpression"),
                "expression_attribute_names": op.get("ExpressionAttributeNames"),
                "expression_attribute_values": op.get("ExpressionAttributeValues"),
            }
            if op_type == "Put":
                self.put_item(op["TableName"], op["Item"], **common)
            elif op_type == "Delete":
                self.delete_item(op["TableName"], key, **common)
            elif op_type == "Update":
                self.update_item(op["TableName"], key, update_expression=op["UpdateExpression"], **common)
            done.append((table, key, before))
    except Exception as e:
        failed_at = len(done)
        for table, key, before in reversed(done):
            hash_key, range_key = self.get_keys_value(table, key)
            if range_key is not None:
                if before is None:
                    table.items[hash_key].pop(range_key, None)
                else:
                    table.items[hash_key][range_key] = before
            elif before is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = before
        for shard, length in streams.values():
            del shard.items[length:]
        if isinstance(e, MockValidationException):
            raise
        reasons = [(None, None, None)] * len(actions)
        reasons[failed_at] = (type(e).__name__, str(e), None)
        raise TransactionCanceledException(reasons)


DynamoDBBackend.transact_write_items = _transact_write_items


_split_shard_once = KinesisStream.split_shard
_merge_shards_once = KinesisStream.merge_shards
_get_shard_for_key_all = KinesisStream.get_shard_for_key
_get_records_once = KinesisBackend.get_records


def _keeping_records(method):
    """Closes the shards as moto does, without moving their records: they stay where they were
    written, and only records written afterwards go to the new shards."""

    @functools.wraps(method)
    def wrapper(self, *shard_ids_and_args):
        shards = [self.shards[a] for a in shard_ids_and_args if isinstance(a, str) and a in self.shards]
        kept = [(shard, shard.records) for shard in shards]
        for shard in shards:
            shard.records = type(shard.records)()
        try:
            return method(self, *shard_ids_and_args)
        finally:
            for shard, records in kept:
                shard.records = records

    return wrapper


def _get_shard_for_key(self, partition_key, explicit_hash_key):
    open_shards = {k: v for k, v in self.shards.items() if v.is_open}
    every = self.shards
    self.shards = open_shards
    try:
        return _get_shard_for_key_all(self, partition_key, explicit_hash_key)
    finally:
        self.shards = every


def _get_records(self, stream_arn, shard_iterator, limit):
    next_iterator, records, millis_behind = _get_records_once(self, stream_arn, shard_iterator, limit)
    stream_name, shard_id, _ = decompose_shard_iterator(next_iterator)
    stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
    shard = stream.get_shard(shard_id)
    _, _, last = decompose_shard_iterator(next_iterator)
    if not shard.is_open and int(last) >= shard.get_max_sequence_number():
        next_iterator = None
    return next_iterator, records, millis_behind


KinesisStream.split_shard = _keeping_records(_split_shard_once)
KinesisStream.merge_shards = _keeping_records(_merge_shards_once)
KinesisStream.get_shard_for_key = _get_shard_for_key
KinesisBackend.get_records = _get_records

if __name__ == "__main__":
    server.main()
