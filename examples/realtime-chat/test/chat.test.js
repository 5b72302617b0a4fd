// Seed 001's application for real: a Tailstream server, two "hosts" of the chat (two
// process groups of two workers each), and two browser pages (headless Chromium) on
// different hosts. Messages typed on either page arrive on both, once each.
//
// The browser is driven with puppeteer-core pointed at the system's Chromium (no
// browser download: the machine's `chromium`, which scripts/test.sh installs), since
// puppeteer speaks the DevTools protocol to it directly, without a separate driver
// binary to keep in step with the browser's version (as selenium's chromedriver needs).
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const puppeteer = require("puppeteer-core");

const targetDir = process.env.CARGO_TARGET_DIR || path.join(os.homedir(), ".cache/tailstream/target");
const bin = process.env.TAILSTREAM_BIN || path.join(targetDir, "release/tailstream");
const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => fs.existsSync(p));
const WORKERS_PER_HOST = 2;
// Page checks poll on a timer: the default (animation frames) stops in a tab that is
// not in front, and two pages share one browser here.
const POLL_MS = 50;
// How long a page may take to show what it waits for (a generous bound for a loaded
// machine, not a measurement).
const WAIT_MS = 30000;

const children = [];
let dbpath;
let browser;
let hosts = [];

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
    s.on("error", reject);
  });
}

async function waitFor(check, what, ms = 20000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function listening(port) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1", () => { sock.end(); resolve(true); });
    sock.on("error", () => resolve(false));
  });
}

function start(cmd, args) {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
  child.output = "";
  child.stdout.on("data", (d) => { child.output += d; });
  child.stderr.on("data", (d) => { child.output += d; });
  children.push(child);
  return child;
}

before(async () => {
  if (!chromium) return; // the test says it is skipped
  assert.ok(fs.existsSync(bin), `server binary missing: ${bin}`);
  const dbPort = await freePort();
  dbpath = fs.mkdtempSync(path.join(os.tmpdir(), "tailstream-chat-"));
  start(bin, ["--port", String(dbPort), "--dbpath", dbpath, "--quiet", "--nounixsocket"]);
  await waitFor(() => listening(dbPort), "tailstream");
  const mongo = `mongodb://127.0.0.1:${dbPort}/?replicaSet=rs0`;
  for (const name of ["host-a", "host-b"]) {
    const port = await freePort();
    const app = start(process.execPath, [path.join(__dirname, "..", "server.js"), "--port", String(port),
      "--workers", String(WORKERS_PER_HOST), "--mongo", mongo, "--host-name", name]);
    await waitFor(() => app.output.includes(`${WORKERS_PER_HOST} workers on port ${port}`), `${name} (${app.output})`);
    hosts.push({ name, port });
  }
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
});

after(async () => {
  if (browser) await browser.close().catch(() => {});
  for (const c of children.reverse()) {
    if (c.exitCode === null) {
      c.kill("SIGTERM");
      await new Promise((r) => { c.on("exit", r); setTimeout(r, 5000); });
    }
  }
  if (dbpath) fs.rmSync(dbpath, { recursive: true, force: true });
});

async function openPage(host) {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${host.port}/`);
  await page.waitForFunction(() => document.getElementById("status").textContent === "connected",
    { polling: POLL_MS, timeout: WAIT_MS });
  assert.equal(await page.$eval("#host", (e) => e.textContent), host.name);
  return page;
}

async function send(page, text) {
  await page.bringToFront();
  await page.type("#text", text);
  await page.click("button");
}

const messages = (page) => page.$$eval("li.message", (lis) => lis.map((li) => li.firstChild.textContent));

test("messages cross hosts and workers through Tailstream, once each", { skip: !chromium && "chromium is not installed" }, async () => {
  const [a, b] = [await openPage(hosts[0]), await openPage(hosts[1])];
  await send(a, "hello from a");
  await send(b, "hello from b");
  for (const page of [a, b]) {
    await page.waitForFunction(() => document.querySelectorAll("li.message").length >= 2,
      { polling: POLL_MS, timeout: WAIT_MS });
  }
  // Once the two arrived, a third marks the end: nothing arrives twice before it.
  await send(a, "last");
  for (const page of [a, b]) {
    await page.waitForFunction(() => [...document.querySelectorAll("li.message")]
      .some((li) => li.firstChild.textContent === "last"), { polling: POLL_MS, timeout: WAIT_MS });
    const got = await messages(page);
    assert.deepEqual([...got].sort(), ["hello from a", "hello from b", "last"]);
  }
  const from = await b.$$eval("li.message .from", (s) => s.map((e) => e.textContent));
  assert.ok(from.some((f) => f.startsWith("host-a")) && from.some((f) => f.startsWith("host-b")), from.join());
});
