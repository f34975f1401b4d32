#!/usr/bin/env node
'use strict';
/**
 * A consumer that behaves as the original (000) design's Node function does, for the interop
 * tests (tests/integration/interop.rs): it shares a queue with our consumers, the way a team's
 * not yet migrated Vercel function would. It is a test fixture, not something to deploy: the
 * differences it keeps on purpose (no sorting, two separate deletes, no fencing, lease age by
 * the holder's wall clock) are the ones docs/ARCHITECTURE.md lists under "Compared with the 000
 * design".
 *
 * Each cycle, as one invocation of the design's function would:
 *   1. frees leases whose `timestamp` is older than the lease timeout (by this machine's clock);
 *   2. lists ROOT/tasks and ROOT/leases, and takes the tasks without a lease, in list order;
 *   3. creates the persistent lease ROOT/leases/<task> with {"consumerId", "timestamp"};
 *      NodeExists means another consumer was faster: it moves on to the next task;
 *   4. reads the task (gone: deletes its own lease and ends the cycle, as the design's failed
 *      invocation does: the listing is stale), "processes" it, i.e. prints
 *      {"processed": "<task>", "by": "<consumer id>"} on stdout,
 *   5. deletes the task, then the lease: two requests, not one transaction.
 * A task whose body is not JSON fails: its lease is deleted and the task left for a retry.
 *
 * Once connected it prints {"ready": "<consumer id>"} on stdout. It stops after --duration-ms,
 * or once no unleased task has been seen for --idle-ms, and then writes a summary line on
 * stderr. Any ZooKeeper error other than the expected races ends it with exit code 1.
 *
 * Usage:
 *   node tests/interop/consumer-000.js --zookeeper 127.0.0.1:2181/chroot --root /event-bridge \
 *     [--duration-ms 60000] [--idle-ms 2000] [--lease-timeout-ms 300000] \
 *     [--consumer-id vercel-func-x] [--work-ms 0] [--poll-ms 50]
 *
 * Its one dependency, node-zookeeper-client, comes from the npm project `make packages`
 * installs the event-bridge package into (target/packages/node), or from NODE_PATH.
 */

const path = require('node:path');
const { createRequire } = require('node:module');
const { parseArgs } = require('node:util');

function loadZookeeper() {
  const installed = path.join(__dirname, '..', '..', 'target', 'packages', 'node', 'package.json');
  const fromInstalled = createRequire(installed);
  try {
    return fromInstalled('node-zookeeper-client');
  } catch (first) {
    try {
      return require('node-zookeeper-client');
    } catch (_) {
      console.error(
        'consumer-000.js: node-zookeeper-client not found: run `make packages` ' +
          `or set NODE_PATH (${first.message.split('\n')[0]})`);
      process.exit(3);
    }
  }
}

const zookeeper = loadZookeeper();
const { NO_NODE, NODE_EXISTS } = zookeeper.Exception;

const { values: opts } = parseArgs({
  options: {
    zookeeper: {
      type: 'string',
      default: process.env.ZOOKEEPER_CONNECTION_STRING || '127.0.0.1:2181',
    },
    root: { type: 'string', default: process.env.EVENT_BRIDGE_ROOT || '/event-bridge' },
    'duration-ms': { type: 'string', default: '60000' },
    'idle-ms': { type: 'string', default: '2000' },
    'lease-timeout-ms': { type: 'string', default: String(5 * 60 * 1000) },
    'consumer-id': {
      type: 'string',
      default: `vercel-func-${Math.random().toString(36).slice(2, 10)}`,
    },
    'work-ms': { type: 'string', default: '0' },
    'poll-ms': { type: 'string', default: '50' },
  },
});

function number(name) {
  const n = Number(opts[name]);
  if (!Number.isFinite(n) || n < 0) {
    console.error(`consumer-000.js: --${name} must be a number of ms, not ${opts[name]}`);
    process.exit(2);
  }
  return n;
}

const ROOT = opts.root.replace(/\/+$/, '');
const TASKS = `${ROOT}/tasks`;
const LEASES = `${ROOT}/leases`;
const CONSUMER_ID = opts['consumer-id'];
const DURATION_MS = number('duration-ms');
const IDLE_MS = number('idle-ms');
const LEASE_TIMEOUT_MS = number('lease-timeout-ms');
const WORK_MS = number('work-ms');
const POLL_MS = number('poll-ms');
// Not the design's (it had no authentication): ZOOKEEPER_AUTH as our functions read it, so the
// fixture can share a queue whose nodes are readable by one user only.
const AUTH = process.env.ZOOKEEPER_AUTH || '';
const LEASE_ACL = AUTH ? zookeeper.ACL.CREATOR_ALL_ACL : zookeeper.ACL.OPEN_ACL_UNSAFE;

const stats = {
  consumer: CONSUMER_ID, processed: 0, conflicts: 0, gone: 0, failed: 0, reaped: 0, cycles: 0,
};

const code = (err) => (err && typeof err.getCode === 'function' ? err.getCode() : undefined);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let client;
const call = (method, ...args) =>
  new Promise((resolve, reject) =>
    client[method](...args, (err, result) => (err ? reject(err) : resolve(result))));
const zk = {
  getChildren: (p) => call('getChildren', p),
  getData: (p) => call('getData', p),
  create: (p, data) => call('create', p, data, LEASE_ACL, zookeeper.CreateMode.PERSISTENT),
  remove: (p) => call('remove', p, -1),
};

function connect() {
  client = zookeeper.createClient(opts.zookeeper,
    { sessionTimeout: 30000, spinDelay: 1000, retries: 2 });
  if (AUTH) client.addAuthInfo('digest', Buffer.from(AUTH, 'utf8'));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`cannot connect to ZooKeeper at ${opts.zookeeper}`)), 10000);
    client.once('connected', () => {
      clearTimeout(timer);
      resolve();
    });
    client.connect();
  });
}

/** Children of `p`; a missing parent is an empty queue. */
async function children(p) {
  try {
    return await zk.getChildren(p);
  } catch (err) {
    if (code(err) === NO_NODE) return [];
    throw err;
  }
}

/** Step 1: leases older than the timeout, by their `timestamp` and this machine's clock. */
async function reapStaleLeases() {
  for (const name of await children(LEASES)) {
    const leasePath = `${LEASES}/${name}`;
    try {
      const lease = JSON.parse((await zk.getData(leasePath)).toString('utf8'));
      if (Date.now() - lease.timestamp > LEASE_TIMEOUT_MS) {
        await zk.remove(leasePath);
        stats.reaped++;
        console.error(
          `consumer-000.js: ${CONSUMER_ID}: stale lease of ${name} (${lease.consumerId}) removed`);
      }
    } catch (err) {
      if (code(err) === NO_NODE) continue; // settled between the list and the read
      if (err instanceof SyntaxError) continue; // not a lease this design can judge
      throw err;
    }
  }
}

/**
 * Steps 3 to 5 for one task: 'taken' if another consumer holds it, 'done' when this cycle is
 * over (processed, gone or failed).
 */
async function tryTask(name) {
  const leasePath = `${LEASES}/${name}`;
  const taskPath = `${TASKS}/${name}`;
  const lease = Buffer.from(JSON.stringify({ consumerId: CONSUMER_ID, timestamp: Date.now() }));
  try {
    await zk.create(leasePath, lease);
  } catch (err) {
    if (code(err) === NODE_EXISTS) {
      stats.conflicts++;
      return 'taken';
    }
    throw err;
  }
  let body;
  try {
    body = JSON.parse((await zk.getData(taskPath)).toString('utf8'));
  } catch (err) {
    if (code(err) !== NO_NODE && !(err instanceof SyntaxError)) throw err;
    // Gone (someone finished it after our listing) or not JSON (left for a retry): drop the lease.
    if (code(err) === NO_NODE) stats.gone++;
    else stats.failed++;
    await removeLease(leasePath);
    return 'done';
  }
  if (WORK_MS > 0) await sleep(WORK_MS);
  const record = { processed: name, by: CONSUMER_ID, type: body && body.type };
  process.stdout.write(`${JSON.stringify(record)}\n`);
  stats.processed++;
  try {
    await zk.remove(taskPath);
  } catch (err) {
    if (code(err) !== NO_NODE) throw err;
    // Someone else deleted the task we held: with this design, the sign of a double run.
    console.error(
      `consumer-000.js: ${CONSUMER_ID}: ${name} was deleted by someone else while we held it`);
  }
  await removeLease(leasePath);
  return 'done';
}

/** Deletes a lease at any version; already gone (a reaper took the orphan) is fine. */
async function removeLease(leasePath) {
  try {
    await zk.remove(leasePath);
  } catch (err) {
    if (code(err) !== NO_NODE) throw err;
  }
}

async function main() {
  await connect();
  process.stdout.write(`${JSON.stringify({ ready: CONSUMER_ID })}\n`);
  const started = Date.now();
  let lastWork = Date.now();
  while (Date.now() - started < DURATION_MS) {
    stats.cycles++;
    await reapStaleLeases();
    const [tasks, leases] = await Promise.all([children(TASKS), children(LEASES)]);
    const leased = new Set(leases);
    const available = tasks.filter((t) => !leased.has(t));
    if (available.length === 0) {
      if (Date.now() - lastWork >= IDLE_MS) break;
      await sleep(POLL_MS);
      continue;
    }
    lastWork = Date.now();
    for (const name of available) {
      if ((await tryTask(name)) === 'done') break; // one task per cycle, then list again
    }
  }
}

main().then(
  () => {
    console.error(JSON.stringify(stats));
    client.close();
  },
  (err) => {
    console.error(`consumer-000.js: ${CONSUMER_ID}: ${err.stack || err}`);
    console.error(JSON.stringify(stats));
    if (client) client.close();
    process.exitCode = 1;
  });
