#!/usr/bin/env node
'use strict';
/**
 * Publish event-bridge tasks from Node, with node-zookeeper-client.
 *
 * A task is a persistent sequential znode `ROOT/tasks/task-NNNNNNNNNN` holding an
 * `event-bridge/1` envelope (docs/ARCHITECTURE.md, "The task envelope"):
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
const CONSUMER_FIELDS = ['attempts', 'last_error', 'retry_at'];

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

/**
 * An `event-bridge/1` envelope: a fresh uuid id and the time now (UTC, RFC 3339).
 * `fields` adds optional fields (`group`, `idempotency_key`, or your own) and may give `id`
 * (your event's id, kept across retries) or `time`.
 */
function envelope(eventType, payload, fields = {}) {
  for (const name of CONSUMER_FIELDS) {
    if (name in fields) throw new Error(`'${name}' is written by consumers, not producers`);
  }
  return {
    format: FORMAT,
    id: crypto.randomUUID(),
    type: eventType,
    time: new Date().toISOString(),
    payload,
    ...fields,
  };
}

/** Creates ROOT/tasks and ROOT/leases (and ROOT) when missing. */
function ensurePaths(client, root = '/event-bridge', acls = zookeeper.ACL.OPEN_ACL_UNSAFE) {
  const base = root.replace(/\/+$/, '');
  const mkdirp = (path) =>
    new Promise((resolve, reject) =>
      client.mkdirp(path, null, acls, zookeeper.CreateMode.PERSISTENT,
        (err) => (err ? reject(err) : resolve())));
  return Promise.all([mkdirp(`${base}/tasks`), mkdirp(`${base}/leases`)]);
}

/**
 * Publishes one task; resolves to its name (`task-0000000042`).
 *
 * `client` is a connected node-zookeeper-client (a chroot in its connection string is
 * honoured); `payload` any JSON value; `options.root` the queue's root, `options.acls` the task's
 * ACL (open to anyone unless given; `zookeeper.ACL.CREATOR_ALL_ACL` on an authenticated
 * session); every other option is an envelope field as for `envelope`.
 */
async function publish(client, eventType, payload, options = {}) {
  const { root = '/event-bridge', acls = zookeeper.ACL.OPEN_ACL_UNSAFE, ...fields } = options;
  const data = Buffer.from(JSON.stringify(envelope(eventType, payload, fields)), 'utf8');
  if (data.length > MAX_BODY_BYTES) {
    throw new Error(
      `task body is ${data.length} bytes, over ${MAX_BODY_BYTES}: ` +
        'put large data in object storage and a reference in the payload');
  }
  const prefix = `${root.replace(/\/+$/, '')}/tasks/task-`;
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
  return path.slice(path.lastIndexOf('/') + 1);
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
      help: { type: 'boolean', short: 'h' },
    },
  });
  const usage =
    'usage: producer.js [--zookeeper HOST:PORT[/chroot]] [--root /event-bridge] --type T ' +
    '[--payload JSON] [--count N] [--group G] [--idempotency-key K]';
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

  const auth = process.env.ZOOKEEPER_AUTH || undefined;
  const acls = auth ? zookeeper.ACL.CREATOR_ALL_ACL : zookeeper.ACL.OPEN_ACL_UNSAFE;
  const client = await connect(values.zookeeper, { auth });
  try {
    for (let i = 0; i < count; i++) {
      const id = crypto.randomUUID();
      const options = { root: values.root, acls, id, ...fields };
      const task = await publish(client, values.type, payload, options);
      process.stdout.write(`${JSON.stringify({ task, id })}\n`);
    }
  } finally {
    client.close();
  }
  return 0;
}

module.exports = { FORMAT, connect, envelope, ensurePaths, publish };

if (require.main === module) {
  main().then(
    (code) => { process.exitCode = code; },
    (err) => {
      console.error(`producer.js: ${err.message || err}`);
      process.exitCode = 1;
    });
}
