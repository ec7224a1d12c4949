"""moto's server, with DynamoDB requests applied one at a time.

Real DynamoDB applies a conditional write atomically on its item. moto's threaded server
does not: two concurrent UpdateItem calls on one key can both pass the condition, or one can
read the item half written by the other. Serializing DynamoDB requests restores the atomicity
the idempotency store relies on; SQS requests (long polls among them) stay concurrent.

Same arguments as `moto_server` (-H HOST -p PORT ...).
"""

import threading

import moto.server as server

_dynamodb_lock = threading.Lock()


class _SerializedDynamoDB(server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with _dynamodb_lock:
                # Run the whole request, body included, under the lock.
                return list(super().__call__(environ, start_response))
        return super().__call__(environ, start_response)


server.DomainDispatcherApplication = _SerializedDynamoDB

if __name__ == "__main__":
    server.main()
