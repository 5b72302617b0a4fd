// Seed 001's application: a chat served by a Node.js cluster (several worker processes
// per host) with socket.io, the workers and the hosts joined through Tailstream by
// @socket.io/mongo-adapter: every broadcast is an insert into a capped collection, and
// every worker reads them back with its own change stream.
//
//   node server.js --port 3001 --workers 2 --mongo mongodb://127.0.0.1:27017/?replicaSet=rs0
//
// Run it twice on two ports for two "hosts". Options: --port (3000), --workers (2),
// --mongo (the URI above), --host-name (shown on the page; default "host-<port>").
"use strict";

const cluster = require("node:cluster");
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");
const { Server } = require("socket.io");
const { createAdapter } = require("@socket.io/mongo-adapter");
const { MongoClient } = require("mongodb");

const DB = "chat";
const COLLECTION = "socket.io-adapter-events";
// The adapter's collection: capped, so it never grows (as the adapter's README does).
const COLLECTION_BYTES = 1e6;

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const port = Number(option("port", "3000"));
const workers = Number(option("workers", "2"));
const mongoUri = option("mongo", "mongodb://127.0.0.1:27017/?replicaSet=rs0");
const hostName = option("host-name", `host-${port}`);

async function createCollection(client) {
  try {
    await client.db(DB).createCollection(COLLECTION, { capped: true, size: COLLECTION_BYTES });
  } catch (e) {
    if (e.codeName !== "NamespaceExists") throw e;
  }
}

async function runWorker() {
  const client = new MongoClient(mongoUri);
  await client.connect();
  await createCollection(client);
  const page = fs.readFileSync(path.join(__dirname, "public", "index.html"), "utf8")
    .replace("{{HOST}}", hostName);
  const httpServer = http.createServer((req, res) => {
    if (req.url === "/" || req.url.startsWith("/?")) {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end(page);
    } else if (req.url === "/health") {
      res.writeHead(200).end("ok");
    } else {
      res.writeHead(404).end();
    }
  });
  const io = new Server(httpServer);
  io.adapter(createAdapter(client.db(DB).collection(COLLECTION)));
  io.on("connection", (socket) => {
    socket.on("chat", (text) => {
      if (typeof text !== "string" || text.length === 0 || text.length > 1000) return;
      // To every client of every worker of every host, through Tailstream.
      io.emit("chat", { text, from: hostName, worker: process.pid, at: Date.now() });
    });
  });
  httpServer.listen(port);
  const stop = async () => {
    io.close();
    await client.close().catch(() => {});
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

if (cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork();
  let ready = 0;
  cluster.on("listening", () => {
    ready += 1;
    if (ready === workers) console.log(`${hostName}: ${workers} workers on port ${port}`);
  });
  cluster.on("exit", (worker, code, signal) => {
    if (!stopping) console.error(`${hostName}: worker ${worker.process.pid} exited (${signal || code})`);
  });
  let stopping = false;
  const stopAll = () => {
    stopping = true;
    for (const w of Object.values(cluster.workers)) w.process.kill("SIGTERM");
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on("SIGTERM", stopAll);
  process.on("SIGINT", stopAll);
} else {
  runWorker().catch((e) => {
    console.error(`${hostName}: worker ${process.pid} failed: ${e.stack || e}`);
    process.exit(1);
  });
}
