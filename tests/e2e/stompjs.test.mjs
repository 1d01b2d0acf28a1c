// @stomp/stompjs against the bridge, over WebSocket (the `ws` package) and over TCP
// (@stomp/tcp-wrapper): receipts, ack modes, heart-beats. Run with `node --test` by
// tests/e2e/test_js_clients.py, which starts the bridge and sets WS_URL, TCP_HOST, TCP_PORT.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client } from "@stomp/stompjs";
import { TCPWrapper } from "@stomp/tcp-wrapper";
import WebSocket from "ws";

const TIMEOUT = 10000;
// CONNECTED waits for an AMQP login to the shared broker, slow while other runs load it.
const LOGIN_TIMEOUT = 20000;
const PREFIX = process.env.QUEUE_PREFIX || "js-"; // the runner deletes these queues afterwards
const transports = {
  websocket: () => new WebSocket(process.env.WS_URL, ["v12.stomp", "v11.stomp", "v10.stomp"]),
  tcp: () => new TCPWrapper(process.env.TCP_HOST || "127.0.0.1", Number(process.env.TCP_PORT)),
};

function within(promise, what, ms = TIMEOUT) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Resolves once `count()` reaches `n`; `poke()` re-checks (called on every event). */
function counter() {
  const waiters = [];
  return {
    until(n, count, what) {
      return within(new Promise((resolve) => {
        waiters.push({ n, count, resolve });
        this.poke();
      }), what);
    },
    poke() {
      for (const w of [...waiters]) {
        if (w.count() >= w.n) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
    },
  };
}

/** A connected client; `log` collects stompjs' debug lines, `errors` its ERROR frames. */
async function open(transport, options = {}) {
  const log = [];
  const logged = counter();
  const errors = [];
  let connected;
  const ready = new Promise((resolve, reject) => {
    connected = resolve;
    options.onFail = reject;
  });
  const client = new Client({
    webSocketFactory: transports[transport],
    connectHeaders: { login: "guest", passcode: "guest", host: "/" },
    heartbeatIncoming: 0,
    heartbeatOutgoing: 0,
    reconnectDelay: 0,
    debug: (line) => {
      log.push(line);
      logged.poke();
    },
    onConnect: (frame) => connected(frame),
    onStompError: (frame) => errors.push(frame),
    onWebSocketClose: (event) => options.onFail(new Error(`closed before CONNECTED (${event.code ?? event})`)),
    ...options.config,
  });
  client.activate();
  const frame = await within(ready, "CONNECTED", LOGIN_TIMEOUT);
  const lines = (line, n) => logged.until(n, () => log.filter((l) => l === line).length, `${n} × ${line}`);
  return { client, frame, log, lines, errors };
}

/** Resolves with the next `count` messages of a subscription. */
function collect(client, destination, headers, count) {
  const messages = [];
  const arrived = counter();
  const sub = client.subscribe(destination, (message) => {
    messages.push(message);
    arrived.poke();
  }, headers);
  const first = (n) => arrived.until(n, () => messages.length, `${n} messages on ${destination}`).then(() => messages);
  return { sub, messages, first, all: first(count) };
}

function publishWithReceipt(client, destination, body, headers = {}) {
  const receipt = `r-${randomUUID()}`;
  const got = new Promise((resolve) => client.watchForReceipt(receipt, resolve));
  client.publish({ destination, body, headers: { ...headers, receipt } });
  return within(got, `RECEIPT ${receipt}`);
}

async function close(client) {
  await within(client.deactivate(), "disconnect");
}

for (const transport of Object.keys(transports)) {
  test(`${transport}: CONNECTED names the bridge and a RECEIPT follows every confirmed SEND`, async () => {
    const { client, frame } = await open(transport);
    try {
      assert.equal(frame.headers.version, "1.2");
      assert.match(frame.headers.server, /^RabbitMQ\/.*stomp-bridge/);
      const queue = `/queue/${PREFIX}receipts-${randomUUID()}`;
      const { all } = collect(client, queue, {}, 3);
      for (let i = 0; i < 3; i++) {
        const receipt = await publishWithReceipt(client, queue, `m${i}`, { persistent: "true" });
        assert.equal(receipt.command, "RECEIPT");
      }
      const messages = await all;
      assert.deepEqual(messages.map((m) => m.body), ["m0", "m1", "m2"]);
    } finally {
      await close(client);
    }
  });

  test(`${transport}: client-individual ACK and NACK; NACK requeues and redelivers`, async () => {
    const { client } = await open(transport);
    const queue = `/queue/${PREFIX}acks-${randomUUID()}`;
    try {
      const first = collect(client, queue, { ack: "client-individual" }, 3);
      for (const body of ["a", "b"]) await publishWithReceipt(client, queue, body);
      // a: ack; b: nack (requeued, comes back redelivered)
      const [a, b] = await first.first(2);
      assert.equal(a.headers.redelivered, "false");
      a.ack();
      b.nack();
      const messages = await first.all;
      assert.equal(messages[2].body, "b");
      assert.equal(messages[2].headers.redelivered, "true");
      messages[2].ack({ receipt: "acked" });
      await within(new Promise((resolve) => client.watchForReceipt("acked", resolve)), "ACK receipt");
    } finally {
      await close(client);
    }
  });

  test(`${transport}: ack:client settles every earlier message with one ACK`, async () => {
    const name = `${PREFIX}client-ack-${randomUUID()}`;
    const queue = `/queue/${name}`;
    let { client } = await open(transport);
    try {
      const first = collect(client, queue, { ack: "client", "prefetch-count": "10" }, 3);
      for (const body of ["1", "2", "3"]) await publishWithReceipt(client, queue, body);
      const messages = await first.all;
      const receipt = `ack-${randomUUID()}`;
      const acked = new Promise((resolve) => client.watchForReceipt(receipt, resolve));
      messages[2].ack({ receipt }); // cumulative: 1, 2 and 3
      await within(acked, "ACK receipt");
      await close(client);
      // Nothing comes back after a reconnect but what is sent now.
      ({ client } = await open(transport));
      const again = collect(client, queue, { ack: "auto" }, 1);
      await publishWithReceipt(client, queue, "marker");
      const [next] = await again.all;
      assert.equal(next.body, "marker");
    } finally {
      await close(client);
    }
  });

  test(`${transport}: a transaction's SENDs arrive at COMMIT, an aborted one's never`, async () => {
    const { client } = await open(transport);
    const queue = `/queue/${PREFIX}tx-${randomUUID()}`;
    try {
      const got = collect(client, queue, {}, 4);
      const committed = client.begin();
      client.publish({ destination: queue, body: "tx-1", headers: { transaction: committed.id } });
      client.publish({ destination: queue, body: "tx-2", headers: { transaction: committed.id } });
      await publishWithReceipt(client, queue, "before-commit"); // overtakes the held SENDs
      committed.commit();
      const aborted = client.begin();
      client.publish({ destination: queue, body: "aborted", headers: { transaction: aborted.id } });
      aborted.abort();
      await publishWithReceipt(client, queue, "after-abort");
      const messages = await got.all;
      assert.deepEqual(messages.map((m) => m.body), ["before-commit", "tx-1", "tx-2", "after-abort"]);
    } finally {
      await close(client);
    }
  });

  test(`${transport}: heart-beats flow both ways and keep the connection`, async () => {
    const { client, frame, log, lines, errors } = await open(transport, {
      config: { heartbeatIncoming: 1000, heartbeatOutgoing: 1000 },
    });
    try {
      assert.equal(frame.headers["heart-beat"], "1000,1000");
      // The server beats every half interval, as RabbitMQ's plugin does: six beats take about
      // three seconds; the client beats meanwhile, and the bridge (tolerance 2 intervals) would
      // drop a silent client before that. stompjs counts the newline after CONNECTED's NUL
      // (trailing_lf, as RabbitMQ sends it) as one more.
      await lines("<<< PONG", 7);
      const pings = log.filter((l) => l === ">>> PING").length;
      assert.ok(pings >= 2, `the client sent ${pings} heart-beats`);
      assert.equal(errors.length, 0);
      assert.ok(client.connected);
      await publishWithReceipt(client, `/topic/js-hb-${randomUUID()}`, "still here");
    } finally {
      await close(client);
    }
  });
}
