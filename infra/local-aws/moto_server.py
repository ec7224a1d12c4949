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

Same arguments as `moto_server` (-H HOST -p PORT ...).
"""

import functools
import json
import threading
import time

import moto.server as server
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models import dynamo_type
from moto.dynamodb.models.utilities import bytesize
from moto.core.utils import unix_time_millis
from moto.sqs.exceptions import InvalidAttributeValue
from moto.sqs.models import Message, Queue, SQSBackend

_dynamodb_lock = threading.Lock()
_sqs_lock = threading.RLock()


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
            return method(*args, **kwargs)

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
    while True:
        with _sqs_lock:
            _clock.millis = unix_time_millis()
            try:
                queue = self.get_queue(queue_name)
                # In flight, as SQS means it: received, and not visible again yet.
                for message in queue._messages:
                    if message.approximate_receive_count > 0 and not message.visible:
                        queue.pending_messages.add(message)
                    else:
                        queue.pending_messages.discard(message)
                result = _receive_once(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            finally:
                _clock.millis = None
        if result or time.monotonic() >= deadline:
            return result
        time.sleep(0.02)


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

if __name__ == "__main__":
    server.main()
