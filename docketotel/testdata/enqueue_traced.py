# Enqueue one docket job from Python in the trace of the caller, by the
# README's job schema: the W3C traceparent goes in the job document.
# Usage: enqueue_traced.py MONGO_URI DB; prints the job's id and its
# traceparent. An app with OpenTelemetry would take the traceparent from
# its propagator (opentelemetry.propagate.inject(carrier)) instead.
import datetime
import os
import sys
import uuid

from pymongo import MongoClient

uri, dbname = sys.argv[1], sys.argv[2]
jobs = MongoClient(uri)[dbname]["jobs"]
now = datetime.datetime.now(datetime.timezone.utc)
traceparent = "00-%s-%s-01" % (os.urandom(16).hex(), os.urandom(8).hex())
result = jobs.insert_one({
    "_id": str(uuid.uuid4()), "kind": "traced", "args": {"mode": "ok"},
    "state": "available", "queue": "default", "priority": 0, "runAt": now,
    "attempt": 0, "maxAttempts": 25, "errors": [], "createdAt": now, "updatedAt": now,
    "traceparent": traceparent,
})
print(result.inserted_id, traceparent)
