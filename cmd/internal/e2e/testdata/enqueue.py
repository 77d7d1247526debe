# Enqueue docket jobs from Python with a plain insert, following the README's
# job schema and nothing else. Usage: enqueue.py MONGO_URI DB
import datetime
import sys
import uuid

from pymongo import MongoClient

uri, dbname = sys.argv[1], sys.argv[2]
jobs = MongoClient(uri)[dbname]["jobs"]
now = datetime.datetime.now(datetime.timezone.utc)


def job(kind, args, **opts):
    doc = {
        "_id": str(uuid.uuid4()),   # any unique string; docket's own are UUIDv7
        "kind": kind,
        "args": args,
        "state": "available",
        "queue": "default",
        "priority": 0,
        "runAt": now,
        "attempt": 0,
        "maxAttempts": 25,
        "errors": [],
        "createdAt": now,
        "updatedAt": now,
    }
    doc.update(opts)
    return doc


result = jobs.insert_many([
    job("add-friend", {"userA": "u1", "userB": "u2"}),
    job("rename-user", {"userId": "u3", "newName": "Ada from Python"}, priority=5),
    job("add-friend", {"userA": "u1", "userB": "u1"}),  # invalid: goes dead with a reason
])
print("\n".join(result.inserted_ids))
