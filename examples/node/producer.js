#!/usr/bin/env node
'use strict';
/**
 * Publish event-bridge tasks from Node, with node-zookeeper-client.
 *
 * A task is a persistent sequential znode `ROOT/tasks/task-NNNNNNNNNN` holding an
 * `event-bridge/1` envelope (docs/ARCHITECTURE.md, "The task envelope"). A task with
 * `priority: 'high'` (or `'low'`) waits in a lane of its own instead,
 * `ROOT/lanes/high/high-NNNNNNNNNN` (`ROOT/lanes/low/low-…`): consumers take high before normal
 * before low (docs/WIRE-FORMAT.md, "Priority lanes"):
 *
 *   const zookeeper = require('node-zookeeper-client');
 *   const { connect, publish } = require('./producer');
 *
 *   const client = await connect('127.0.0.1:2181');   // "host:port[,host:port…][/chroot]"
 *   const name = await publish(client, 'user.signup', { user_id: 42 },
 *                              { idempotency_key: 'signup-42' });
 *   client.close();
 *
 * From the shell (one JSON line per task created: {"task": "task-…", "id": "…"}):
 *
 *   npm ci
 *   node producer.js --type user.signup --payload '{"user_id": 42}' [--count N]
 *   node producer.js --type report.build --priority low   # high, normal (the default) or low
 *
 * --zookeeper and --root default to ZOOKEEPER_CONNECTION_STRING and EVENT_BRIDGE_ROOT, then to
 * 127.0.0.1:2181 and /event-bridge, as for the functions. When ZOOKEEPER_AUTH (`user:password`)
 * is set, the CLI authenticates with it (digest) and creates the tasks readable by that user
 * only, as the functions do with the same variable; from code: `connect(hosts, { auth })` and
 * `publish(…, { acls: zookeeper.ACL.CREATOR_ALL_ACL })`.
 */

const crypto = require('node:crypto');
const { parseArgs } = require('node:util');
const zookeeper = require('node-zookeeper-client');

const FORMAT = 'event-bridge/1';
// ZooKeeper refuses requests over jute.maxbuffer (1 MiB by default); consumers need some room
// to add their bookkeeping to the envelope, so stay under the limit our own producers use.
const MAX_BODY_BYTES = 1000000;
// Written by consumers only; a producer must never set them.
const CONSUMER_FIELDS = ['attempts', 'last_error', 'retry_at', 'keyed'];
// How long an idempotency key stays taken after its task completed (DEDUP_WINDOW_MS).
const DEDUP_WINDOW_MS = Number(process.env.DEDUP_WINDOW_MS || 24 * 3600 * 1000);

/**
 * Connects, with digest authentication when `auth` (`user:password`) is given; rejects after
 * `timeoutMs` instead of retrying forever.
 */
function connect(connectionString, { auth, timeoutMs = 10000 } = {}) {
  const client = zookeeper.createClient(connectionString, { sessionTimeout: 10000, retries: 2 });
  if (auth) client.addAuthInfo('digest', Buffer.from(auth, 'utf8'));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.close();
      reject(new Error(
        `cannot connect to ZooKeeper at ${connectionString} within ${timeoutMs} ms`));
    }, timeoutMs);
    client.once('connected', () => {
      clearTimeout(timer);
      resolve(client);
    });
    client.connect();
  });
}

// The longest a concurrency key may be as a znode name (bytes other than ASCII letters,
// digits, - and _ take three).
const MAX_CONCURRENCY_KEY_NAME_BYTES = 1024;

/** Throws naming `concurrency_key` unless it is a non-empty string whose znode name fits. */
function checkConcurrencyKey(key) {
  if (typeof key !== 'string') {
    throw new Error(`'concurrency_key' must be a string, not ${JSON.stringify(key)}`);
  }
  if (key === '') throw new Error("'concurrency_key' is empty: give one of at least one character, or none");
  const raw = Buffer.from(key, 'utf8');
  let name = 0;
  for (const b of raw) name += /[A-Za-z0-9_-]/.test(String.fromCharCode(b)) && b < 128 ? 1 : 3;
  if (name > MAX_CONCURRENCY_KEY_NAME_BYTES) {
    throw new Error(`'concurrency_key' is ${raw.length} bytes, ${name} as a znode name, ` +
      `over the ${MAX_CONCURRENCY_KEY_NAME_BYTES} a key may take`);
  }
}

// The priorities a task may have; normal, the default, is left out of the body.
const PRIORITIES = ['high', 'normal', 'low'];

/** Throws naming `priority` unless it is high, normal or low. */
function checkPriority(priority) {
  if (!PRIORITIES.includes(priority)) {
    throw new Error(`'priority' must be high, normal or low, not ${JSON.stringify(priority)}`);
  }
}

/**
 * Where a task of `priority` is created: `ROOT/tasks/task-` for normal,
 * `ROOT/lanes/high/high-` or `ROOT/lanes/low/low-` for the two others.
 */
function taskPrefix(root, priority = 'normal') {
  const base = root.replace(/\/+$/, '');
  if (priority === 'normal') return `${base}/tasks/task-`;
  return `${base}/lanes/${priority}/${priority}-`;
}

/**
 * An `event-bridge/1` envelope: a fresh uuid id and the time now (UTC, RFC 3339).
 * `fields` adds optional fields (`group`, `idempotency_key`, `concurrency_key`, `priority`, or
 * your own) and may give `id` (your event's id, kept across retries) or `time`.
 */
function envelope(eventType, payload, fields = {}) {
  for (const name of CONSUMER_FIELDS) {
    if (name in fields) throw new Error(`'${name}' is written by consumers, not producers`);
  }
  if ('concurrency_key' in fields) checkConcurrencyKey(fields.concurrency_key);
  if ('priority' in fields) checkPriority(fields.priority);
  const body = {
    format: FORMAT,
    id: crypto.randomUUID(),
    type: eventType,
    time: new Date().toISOString(),
    payload,
    ...fields,
  };
  // Normal is the default: left out of the body, as consumers expect.
  if (body.priority === 'normal') delete body.priority;
  return body;
}

/**
 * Creates ROOT/tasks, ROOT/lanes/high, ROOT/lanes/low, ROOT/leases and ROOT/keys (and ROOT)
 * when missing.
 */
function ensurePaths(client, root = '/event-bridge', acls = zookeeper.ACL.OPEN_ACL_UNSAFE) {
  const base = root.replace(/\/+$/, '');
  const mkdirp = (path) =>
    new Promise((resolve, reject) =>
      client.mkdirp(path, null, acls, zookeeper.CreateMode.PERSISTENT,
        (err) => (err ? reject(err) : resolve())));
  const paths = ['tasks', 'lanes/high', 'lanes/low', 'leases', 'keys'];
  return Promise.all(paths.map((path) => mkdirp(`${base}/${path}`)));
}

/** `key` as one znode name: bytes other than ASCII letters, digits, `-`, `_` as %XX. */
function keyNode(key) {
  let out = '';
  for (const byte of Buffer.from(key, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9_-]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out || '%';
}

const call = (fn) => new Promise((resolve, reject) =>
  fn((err, ...rest) => (err ? reject(err) : resolve(rest))));
const codeOf = (err) => (err && err.getCode ? err.getCode() : undefined);

/**
 * The task that has the key at `keyPath`; `false` when the key is free (gone, or past its
 * window after completion, in which case it is deleted); `null` when its name is unknown.
 */
async function existing(client, keyPath) {
  for (let i = 0; i < 20; i++) {
    let data;
    let stat;
    try {
      [data, stat] = await call((cb) => client.getData(keyPath, cb));
    } catch (err) {
      if (codeOf(err) === zookeeper.Exception.NO_NODE) return false;
      throw err;
    }
    const key = JSON.parse(data.toString('utf8'));
    const completed = key.completed_at;
    if (completed !== undefined && completed + DEDUP_WINDOW_MS <= Date.now()) {
      try {
        await call((cb) => client.remove(keyPath, stat.version, cb));
      } catch (err) {
        const code = codeOf(err);
        if (code !== zookeeper.Exception.NO_NODE && code !== zookeeper.Exception.BAD_VERSION) {
          throw err;
        }
      }
      return false;
    }
    if (key.task || completed !== undefined) return key.task || null;
    // The winner writes its task's name right after its create.
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return null;
}

/**
 * Creates `keys/<key>` and the task, in the lane of `priority`, in one transaction
 * (docs/WIRE-FORMAT.md, "Idempotency keys"). Resolves to `{ task, created }`: `created` is
 * false when the key was taken and nothing was created (`task` is then the task that has it,
 * or null if unknown).
 */
async function publishKeyed(client, data, key, id, root, acls, priority = 'normal') {
  const base = root.replace(/\/+$/, '');
  const keyPath = `${base}/keys/${keyNode(key)}`;
  const prefix = taskPrefix(base, priority);
  for (let i = 0; i < 5; i++) {
    const keyData = Buffer.from(JSON.stringify({ id }), 'utf8');
    let failed;
    let results;
    try {
      [results] = await call((cb) => client.transaction()
        .create(keyPath, keyData, acls, zookeeper.CreateMode.PERSISTENT)
        .create(prefix, data, acls, zookeeper.CreateMode.PERSISTENT_SEQUENTIAL)
        .commit(cb));
    } catch (err) {
      failed = err;
    }
    if (!failed) {
      const path = results[1].path;
      const task = path.slice(path.lastIndexOf('/') + 1);
      const named = Buffer.from(JSON.stringify({ id, task }), 'utf8');
      await call((cb) => client.setData(keyPath, named, 0, cb));
      return { task, created: true };
    }
    const code = codeOf(failed);
    if (code === zookeeper.Exception.NO_NODE) {
      await ensurePaths(client, root, acls);
    } else if (code === zookeeper.Exception.NODE_EXISTS) {
      const task = await existing(client, keyPath);
      if (task !== false) return { task, created: false };
    } else {
      throw failed;
    }
  }
  throw new Error(`idempotency key ${JSON.stringify(key)} kept changing; try again`);
}

/**
 * Publishes one task; resolves to its name (`task-0000000042`, or `high-…` / `low-…` in those
 * lanes).
 *
 * `client` is a connected node-zookeeper-client (a chroot in its connection string is
 * honoured); `payload` any JSON value; `options.root` the queue's root, `options.acls` the task's
 * ACL (open to anyone unless given; `zookeeper.ACL.CREATOR_ALL_ACL` on an authenticated
 * session); every other option is an envelope field as for `envelope`.
 */
async function publish(client, eventType, payload, options = {}) {
  return (await publishDetailed(client, eventType, payload, options)).task;
}

/**
 * As `publish`, resolving to `{ task, created }`: `created` is false when the task's
 * idempotency key was taken and nothing was created (`task` is the one that has it).
 */
async function publishDetailed(client, eventType, payload, options = {}) {
  const { root = '/event-bridge', acls = zookeeper.ACL.OPEN_ACL_UNSAFE, ...fields } = options;
  const body = envelope(eventType, payload, fields);
  if (body.idempotency_key !== undefined) body.keyed = true;
  const data = Buffer.from(JSON.stringify(body), 'utf8');
  if (data.length > MAX_BODY_BYTES) {
    throw new Error(
      `task body is ${data.length} bytes, over ${MAX_BODY_BYTES}: ` +
        'put large data in object storage and a reference in the payload');
  }
  const priority = body.priority || 'normal';
  if (body.keyed) {
    return publishKeyed(client, data, body.idempotency_key, body.id, root, acls, priority);
  }
  const prefix = taskPrefix(root, priority);
  const create = () =>
    new Promise((resolve, reject) =>
      client.create(prefix, data, acls, zookeeper.CreateMode.PERSISTENT_SEQUENTIAL,
        (err, path) => (err ? reject(err) : resolve(path))));
  let path;
  try {
    path = await create();
  } catch (err) {
    if (err.getCode === undefined || err.getCode() !== zookeeper.Exception.NO_NODE) throw err;
    // First task under this root: create the base paths, then try again.
    await ensurePaths(client, root, acls);
    path = await create();
  }
  return { task: path.slice(path.lastIndexOf('/') + 1), created: true };
}

async function main() {
  const { values } = parseArgs({
    options: {
      zookeeper: {
        type: 'string',
        default: process.env.ZOOKEEPER_CONNECTION_STRING || '127.0.0.1:2181',
      },
      root: { type: 'string', default: process.env.EVENT_BRIDGE_ROOT || '/event-bridge' },
      type: { type: 'string' },
      payload: { type: 'string', default: '{}' },
      count: { type: 'string', default: '1' },
      group: { type: 'string' },
      'idempotency-key': { type: 'string' },
      'concurrency-key': { type: 'string' },
      priority: { type: 'string' },
      traceparent: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const usage =
    'usage: producer.js [--zookeeper HOST:PORT[/chroot]] [--root /event-bridge] --type T ' +
    '[--payload JSON] [--count N] [--group G] [--idempotency-key K] [--concurrency-key K] ' +
    '[--priority high|normal|low] [--traceparent 00-…]';
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const fail = (msg) => {
    console.error(`producer.js: ${msg}\n${usage}`);
    return 2;
  };
  if (!values.type) return fail('--type is required');
  let payload;
  try {
    payload = JSON.parse(values.payload);
  } catch (err) {
    return fail(`--payload is not JSON: ${err.message}`);
  }
  const count = Number(values.count);
  if (!Number.isInteger(count) || count < 1) return fail('--count must be a whole number >= 1');
  const fields = {};
  if (values.group !== undefined) fields.group = values.group;
  if (values['idempotency-key'] !== undefined) fields.idempotency_key = values['idempotency-key'];
  if (values['concurrency-key'] !== undefined) {
    try {
      checkConcurrencyKey(values['concurrency-key']);
    } catch (err) {
      return fail(`--concurrency-key: ${err.message}`);
    }
    fields.concurrency_key = values['concurrency-key'];
  }
  if (values.priority !== undefined) {
    try {
      checkPriority(values.priority);
    } catch (err) {
      return fail(`--priority: ${err.message}`);
    }
    fields.priority = values.priority;
  }
  if (values.traceparent !== undefined) {
    if (!/^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(values.traceparent)) {
      return fail('--traceparent is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)');
    }
    fields.traceparent = values.traceparent;
  }

  const auth = process.env.ZOOKEEPER_AUTH || undefined;
  const acls = auth ? zookeeper.ACL.CREATOR_ALL_ACL : zookeeper.ACL.OPEN_ACL_UNSAFE;
  const client = await connect(values.zookeeper, { auth });
  try {
    for (let i = 0; i < count; i++) {
      const id = crypto.randomUUID();
      const options = { root: values.root, acls, id, ...fields };
      const { task, created } = await publishDetailed(client, values.type, payload, options);
      const line = created ? { task, id } : { task, duplicate: true };
      process.stdout.write(`${JSON.stringify(line)}\n`);
    }
  } finally {
    client.close();
  }
  return 0;
}

module.exports = { FORMAT, connect, envelope, ensurePaths, keyNode, publish, publishDetailed };

if (require.main === module) {
  main().then(
    (code) => { process.exitCode = code; },
    (err) => {
      console.error(`producer.js: ${err.message || err}`);
      process.exitCode = 1;
    });
}
