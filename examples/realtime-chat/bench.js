// Seed 001's question: what each extra watcher costs. The chat runs with 1, 8 and 32
// workers (each its own change stream on the adapter's collection) while one client
// sends messages at a fixed rate and four clients receive them; the Tailstream
// server's CPU is measured from /proc over the sending and the drain.
//
//   node bench.js --server <tailstream binary> [--workers 1,8,32] [--rate 200] [--seconds 10]
"use strict";
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { io } = require("socket.io-client");

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const server = option("server", process.env.TAILSTREAM_BIN);
const workerCounts = option("workers", "1,8,32").split(",").map(Number);
const rate = Number(option("rate", "200"));
const seconds = Number(option("seconds", "10"));
const RECEIVERS = 4;
const CLK_TCK = 100; // Linux's USER_HZ: /proc's CPU times are in 1/100 s.

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function cpuSeconds(pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

async function waitFor(check, what, ms = 60000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}`);
}

function connect(port) {
  return new Promise((resolve, reject) => {
    const s = io(`http://127.0.0.1:${port}`, { transports: ["websocket"] });
    s.once("connect", () => resolve(s));
    s.once("connect_error", reject);
  });
}

async function runOne(dbPort, pid, workers) {
  const port = await freePort();
  const app = spawn(process.execPath, [path.join(__dirname, "server.js"), "--port", String(port),
    "--workers", String(workers), "--mongo", `mongodb://127.0.0.1:${dbPort}/?replicaSet=rs0`],
  { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  app.stdout.on("data", (d) => { out += d; });
  try {
    await waitFor(() => out.includes(`${workers} workers on port ${port}`), "the chat's workers");
    const receivers = await Promise.all(Array.from({ length: RECEIVERS }, () => connect(port)));
    let delivered = 0;
    for (const r of receivers) r.on("chat", () => { delivered += 1; });
    const sender = await connect(port);
    await sleep(1000); // the workers' change streams open and settle
    const total = Math.round(rate * seconds);
    const cpu0 = cpuSeconds(pid);
    const t0 = Date.now();
    for (let i = 0; i < total; i++) {
      sender.emit("chat", `message ${i}`);
      const due = t0 + ((i + 1) * 1000) / rate;
      const wait = due - Date.now();
      if (wait > 0) await sleep(wait);
    }
    await waitFor(() => delivered >= total * RECEIVERS, "every message delivered", 30000).catch(() => {});
    await sleep(500);
    const cpu = cpuSeconds(pid) - cpu0;
    for (const s of [sender, ...receivers]) s.close();
    return { workers, total, delivered, cpu };
  } finally {
    app.kill("SIGTERM");
    await new Promise((r) => { app.on("exit", r); setTimeout(r, 5000); });
  }
}

async function main() {
  if (!server || !fs.existsSync(server)) throw new Error("--server <tailstream binary> is needed");
  const dbPort = await freePort();
  const dbpath = fs.mkdtempSync(path.join(os.tmpdir(), "tailstream-watchers-"));
  const db = spawn(server, ["--port", String(dbPort), "--dbpath", dbpath, "--quiet", "--nounixsocket"],
    { stdio: "ignore" });
  try {
    await waitFor(() => new Promise((resolve) => {
      const s = net.connect(dbPort, "127.0.0.1", () => { s.end(); resolve(true); });
      s.on("error", () => resolve(false));
    }), "tailstream");
    const rows = [];
    for (const w of workerCounts) rows.push(await runOne(dbPort, db.pid, w));
    console.log(`chat with N workers (one change stream each), ${rate} messages/s for ${seconds} s, ` +
      `${RECEIVERS} receiving clients; Tailstream's CPU over the sending and the drain`);
    console.log("| workers (change streams) | messages sent | events delivered to clients | server CPU s | server CPU ms per 1,000 messages | each watcher beyond the first, ms per 1,000 messages |");
    console.log("|---:|---:|---:|---:|---:|---:|");
    const perK = (r) => (1000 * r.cpu * 1000) / r.total;
    const first = rows.find((r) => r.workers === 1);
    for (const r of rows) {
      const extra = first && r.workers > 1 ? ((perK(r) - perK(first)) / (r.workers - 1)).toFixed(1) : "–";
      console.log(`| ${r.workers} | ${r.total} | ${r.delivered} | ${r.cpu.toFixed(2)} | ${perK(r).toFixed(0)} | ${extra} |`);
    }
  } finally {
    db.kill("SIGTERM");
    await new Promise((r) => { db.on("exit", r); setTimeout(r, 10000); });
    fs.rmSync(dbpath, { recursive: true, force: true });
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
