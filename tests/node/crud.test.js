// The official Node.js driver against a real Tailstream server: handshake in the
// three connection modes, CRUD, indexes and errors, tailable cursors, a bucket of a
// parallel change stream through watch().
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { MongoClient, MongoServerError } = require('mongodb');

const targetDir = process.env.CARGO_TARGET_DIR || path.join(os.homedir(), '.cache/tailstream/target');
const bin = process.env.TAILSTREAM_BIN || path.join(targetDir, 'release/tailstream');

let server;
let port;
let dbpath;

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
    s.on('error', reject);
  });
}

async function waitReady() {
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const ok = await new Promise((resolve) => {
      const sock = net.connect(port, '127.0.0.1', () => { sock.end(); resolve(true); });
      sock.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('tailstream did not start');
}

before(async () => {
  assert.ok(fs.existsSync(bin), `server binary missing: ${bin}`);
  port = await freePort();
  dbpath = fs.mkdtempSync(path.join(os.tmpdir(), 'tailstream-node-'));
  server = spawn(bin, ['--port', String(port), '--dbpath', dbpath, '--quiet'], { stdio: 'ignore' });
  await waitReady();
});

after(async () => {
  if (server) {
    server.kill('SIGTERM');
    await new Promise((r) => server.on('exit', r));
  }
  fs.rmSync(dbpath, { recursive: true, force: true });
});

for (const query of ['', '?replicaSet=rs0', '?directConnection=true']) {
  test(`connects and writes with "${query || 'a plain URI'}"`, async () => {
    const client = new MongoClient(`mongodb://127.0.0.1:${port}/${query}`, { serverSelectionTimeoutMS: 5000 });
    try {
      const coll = client.db('nodetest').collection(`conn${query.length}`);
      const { insertedId } = await coll.insertOne({ mode: query });
      const found = await coll.findOne({ _id: insertedId });
      assert.equal(found.mode, query);
    } finally {
      await client.close();
    }
  });
}

test('CRUD round trip with the Node driver', async () => {
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?directConnection=true`);
  try {
    const coll = client.db('nodetest').collection('crud');
    await coll.deleteMany({});
    const res = await coll.insertMany([{ a: 1, tags: ['x'] }, { a: 2, tags: ['y', 'z'] }, { a: 3 }]);
    assert.equal(res.insertedCount, 3);
    const upd = await coll.updateOne({ a: 2 }, { $inc: { a: 10 }, $push: { tags: 'w' } });
    assert.equal(upd.modifiedCount, 1);
    const docs = await coll.find({ a: { $gte: 2 } }).sort({ a: -1 }).project({ _id: 0, a: 1 }).toArray();
    assert.deepEqual(docs, [{ a: 12 }, { a: 3 }]);
    const before = await coll.findOneAndUpdate({ a: 1 }, { $set: { b: true } }, { returnDocument: 'after' });
    assert.equal(before.b, true);
    const del = await coll.deleteMany({ a: { $lt: 5 } });
    assert.equal(del.deletedCount, 2);
    assert.equal(await coll.countDocuments(), 1);
  } finally {
    await client.close();
  }
});

test('unique index violations surface as E11000 MongoServerError', async () => {
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?directConnection=true`);
  try {
    const coll = client.db('nodetest').collection('uniq');
    await coll.drop().catch(() => {});
    await coll.createIndex({ email: 1 }, { unique: true });
    await coll.insertOne({ email: 'a@example.com' });
    await assert.rejects(coll.insertOne({ email: 'a@example.com' }), (err) => {
      assert.ok(err instanceof MongoServerError);
      assert.equal(err.code, 11000);
      assert.match(err.message, /^E11000 duplicate key error collection: nodetest\.uniq index: email_1 dup key/);
      assert.deepEqual(err.keyValue, { email: 'a@example.com' });
      return true;
    });
  } finally {
    await client.close();
  }
});

test('tailable awaitData cursor on a capped collection (empty at first) receives new documents', async () => {
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?directConnection=true`);
  try {
    const db = client.db('nodetest');
    await db.collection('bus').drop().catch(() => {});
    const bus = await db.createCollection('bus', { capped: true, size: 1 << 20 });
    const cursor = bus.find({}, { tailable: true, awaitData: true, maxAwaitTimeMS: 200 });
    const received = [];
    const consumer = (async () => {
      for await (const doc of cursor) {
        received.push(doc.seq);
        if (received.length === 5) break;
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    for (let seq = 0; seq < 5; seq++) await bus.insertOne({ seq });
    await consumer;
    assert.deepEqual(received, [0, 1, 2, 3, 4]);
    const opts = await bus.options();
    assert.equal(opts.capped, true);
  } finally {
    await client.close();
  }
});

// With useBigInt64 the driver decodes every BSON int64 as a BigInt, so a write
// count sent as int64 (mongod sends int32) breaks insertMany's arithmetic.
test('write results and counts under useBigInt64 are numbers, as against mongod', async () => {
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?directConnection=true`, { useBigInt64: true });
  try {
    const db = client.db('nodetest');
    const coll = db.collection('bigint');
    await coll.drop().catch(() => {});
    const ins = await coll.insertMany([{ a: 1 }, { a: 2 }, { a: 3 }]);
    assert.equal(ins.insertedCount, 3);
    const upd = await coll.updateMany({ a: { $gte: 2 } }, { $set: { b: true } });
    assert.deepEqual([upd.matchedCount, upd.modifiedCount], [2, 2]);
    const ups = await coll.updateOne({ a: 9 }, { $set: { b: false } }, { upsert: true });
    assert.equal(ups.upsertedCount, 1);
    const bulk = await coll.bulkWrite([
      { insertOne: { document: { a: 4 } } },
      { updateOne: { filter: { a: 4 }, update: { $set: { b: true } } } },
      { deleteOne: { filter: { a: 1 } } },
    ]);
    assert.deepEqual([bulk.insertedCount, bulk.matchedCount, bulk.modifiedCount, bulk.deletedCount], [1, 1, 1, 1]);
    const del = await coll.deleteMany({ b: false });
    assert.equal(del.deletedCount, 1);
    assert.equal(await coll.countDocuments(), 3);
    assert.equal(await coll.estimatedDocumentCount(), 3);
    const count = await db.command({ count: 'bigint' });
    assert.equal(typeof count.n, 'number');
    const created = await db.command({ createIndexes: 'bigint', indexes: [{ key: { a: 1 }, name: 'a_1' }] });
    assert.deepEqual([typeof created.numIndexesBefore, typeof created.numIndexesAfter], ['number', 'number']);
    const stats = await db.command({ collStats: 'bigint' });
    assert.deepEqual([typeof stats.count, typeof stats.size, typeof stats.nindexes], ['number', 'number', 'number']);
  } finally {
    await client.close();
  }
});

test('the streaming monitor gets its hellos: no heartbeat fails, the pool is kept', async () => {
  // The driver streams awaitable hellos with exhaustAllowed; a server that answers one
  // without moreToCome fails each heartbeat and makes the driver clear its pool.
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?replicaSet=rs0`, {
    heartbeatFrequencyMS: 500,
  });
  const failed = [];
  let cleared = 0;
  let succeeded = 0;
  client.on('serverHeartbeatFailed', (e) => failed.push(String(e.failure)));
  client.on('serverHeartbeatSucceeded', () => { succeeded += 1; });
  client.on('connectionPoolCleared', () => { cleared += 1; });
  try {
    await client.db('admin').command({ ping: 1 });
    // Several heartbeats' worth: the server answers each await after maxAwaitTimeMS
    // (heartbeatFrequencyMS here), so about six streamed replies in 3 s.
    await new Promise((r) => setTimeout(r, 3000));
    assert.deepEqual(failed, []);
    assert.equal(cleared, 0);
    assert.ok(succeeded >= 2, `${succeeded} heartbeats`);
  } finally {
    await client.close();
  }
});

test('a bucket of a parallel change stream is an ordinary watch() stream', async () => {
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?directConnection=true`);
  try {
    const coll = client.db('nodetest').collection('buckets');
    const streams = [0, 1].map((bucket) => coll.watch(
      [{ $changeStreamBucket: { nBuckets: 2, bucket, by: 'documentKey' } }],
      { maxAwaitTimeMS: 100 },
    ));
    // The driver opens a stream on its first read.
    for (const s of streams) assert.equal(await s.tryNext(), null);
    await coll.insertMany(Array.from({ length: 20 }, (_, i) => ({ _id: i })));
    const seen = [[], []];
    const deadline = Date.now() + 10000;
    while (seen[0].length + seen[1].length < 20 && Date.now() < deadline) {
      for (const b of [0, 1]) {
        const ev = await streams[b].tryNext();
        if (ev) seen[b].push(ev.documentKey._id);
      }
    }
    // Each document in exactly one bucket, both buckets with some.
    assert.ok(seen[0].length > 0 && seen[1].length > 0, JSON.stringify(seen));
    const all = [...seen[0], ...seen[1]].sort((a, b) => a - b);
    assert.deepEqual(all, Array.from({ length: 20 }, (_, i) => i));
    for (const s of streams) await s.close();
  } finally {
    await client.close();
  }
});
