"""A consumer of a change stream group (issue 28), run as its own process by
tests/test_change_stream_groups.py (and usable by hand):

    python group_consumer.py URI GROUP CONSUMER DB MODE LEASE_MS START_T START_I

It joins GROUP as CONSUMER (4 buckets by documentKey over DB's namespaces, starting at
Timestamp(START_T, START_I)), reads its buckets with getMores and, for every event,
writes its effect to DB.out: `{src: <the event's document _id>, consumer, bucket}`; then
commits the bucket's position. MODE "plain": the effect, then the commit (at least
once: a consumer killed between the two leaves effects whose events are delivered
again). MODE "txn": the effect and the commit in one transaction (exactly once).
It joins again when a getMore says `rejoin`, or its bucket was taken (fenced).
Runs until killed."""

import sys
import time

from bson import Timestamp
from bson.regex import Regex
from pymongo import MongoClient
from pymongo.errors import OperationFailure

FENCED = 28400
CURSOR_NOT_FOUND = 43
WRITE_CONFLICT = 112
NO_SUCH_TRANSACTION = 251


def main():
    uri, group, consumer, dbname, mode, lease_ms, t, i = sys.argv[1:9]
    client = MongoClient(uri, directConnection=True)
    admin, db = client.admin, client[dbname]
    reads = client.start_session()  # the cursors belong to it
    writes = client.start_session()  # the transactions

    def join():
        r = admin.command(
            "parallelChangeStream", 1, group=group, consumer=consumer, nBuckets=4,
            by="documentKey", nsRegex=Regex("^" + dbname + r"\.src"),
            startAtOperationTime=Timestamp(int(t), int(i)), leaseMS=int(lease_ms),
            session=reads)
        return list(zip(r["buckets"], r["cursors"]))

    def handle(bucket, events, token):
        docs = [{"src": e["documentKey"]["_id"], "consumer": consumer, "bucket": bucket}
                for e in events]
        if mode == "plain":
            if docs:
                db.out.insert_many(docs)
            admin.command("commitChangeStreamGroup", group, consumer=consumer,
                          bucket=bucket, resumeToken=token)
            return
        with writes.start_transaction():
            if docs:
                db.out.insert_many(docs, session=writes)
            db.command("commitChangeStreamGroup", group, consumer=consumer, bucket=bucket,
                       resumeToken=token, session=writes)

    held = join()
    print(f"{consumer} joined: buckets {[b for b, _ in held]}", flush=True)
    while True:
        again = False
        for bucket, cursor in held:
            try:
                r = admin.command("getMore", cursor, collection="$cmd.aggregate",
                                  maxTimeMS=100, session=reads)["cursor"]
                if r["nextBatch"]:
                    handle(bucket, r["nextBatch"], r["postBatchResumeToken"])
                again = again or r.get("rejoin", False)
            except OperationFailure as e:
                if e.code not in (FENCED, CURSOR_NOT_FOUND, WRITE_CONFLICT,
                                  NO_SUCH_TRANSACTION):
                    raise
                again = True
        if again:
            held = join()
            print(f"{consumer} joined again: buckets {[b for b, _ in held]}", flush=True)
        if not held:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
