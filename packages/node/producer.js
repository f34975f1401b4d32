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
 *   const { connect, publish } = require('event-bridge');
 *
 *   const client = await connect('127.0.0.1:2181');   // "host:port[,host:port…][/chroot]"
 *   const name = await publish(client, 'user.signup', { user_id: 42 },
 *                              { idempotency_key: 'signup-42' });
 *   client.close();
 *
 * From the shell, with the package installed (one JSON line per task created:
 * {"task": "task-…", "id": "…"}):
 *
 *   npx event-bridge-publish --type user.signup --payload '{"user_id": 42}' [--count N]
 *   npx event-bridge-publish --type report.build --priority low   # high, normal (the default) or low
 *
 * A debounced publish (`--debounce-key K --debounce 30s [--debounce-max 5m]`, or
 * `{ debounce: { key: K, period_ms: 30000 } }` from code) creates no task: it writes the
 * envelope to `ROOT/debounce/<K>`, replacing what is pending there, and prints
 * {"published": "debounced", "id": "…", "key": K, "replaced": <the id replaced, or null>}.
 * Our consumers make it a task, with the last payload, a period after the key's last publish
 * (and no later than the maximum after its first) (docs/WIRE-FORMAT.md, "Debounce").
 *
 * With `EVENT_BRIDGE_KICK=on` (and `EVENT_BRIDGE_KICK_URL`, `CRON_SECRET`), the command kicks a
 * drain once its tasks landed, as our other doors do (kick.js).
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
const { Kick } = require('./kick');

const FORMAT = 'event-bridge/1';
// ZooKeeper refuses requests over jute.maxbuffer (1 MiB by default); consumers need some room
// to add their bookkeeping to the envelope, so stay under the limit our own producers use.
const MAX_BODY_BYTES = 1000000;
// Written by consumers only; a producer must never set them.
const CONSUMER_FIELDS = ['attempts', 'last_error', 'retry_at', 'keyed'];

// Fields whose publish writes more than the task: `after` registers a child with its parents
// (it waits under after/<id>), `batch` counts a member in its batch. This producer writes only
// the task, so it refuses them; the HTTP publish and `event-bridge publish` offer them.
const NOT_OFFERED = ['after', 'on_parent_dead', 'batch'];
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

// The longest a debounce key may be as a znode name, and the longest period or maximum wait
// (a week, in ms).
const MAX_DEBOUNCE_KEY_NAME_BYTES = 1024;
const MAX_DEBOUNCE_MS = 7 * 24 * 3600 * 1000;
// What a duration's unit is worth in ms.
const SPAN_UNITS = { ms: 1, s: 1000, m: 60000, h: 3600000 };

/**
 * `text` (a whole number and ms, s, m or h: `30s`, `5m`) in ms; throws naming `field`
 * otherwise.
 */
function parseSpan(field, text) {
  const match = typeof text === 'string' ? /^([0-9]+)(ms|s|m|h)$/.exec(text.trim()) : null;
  if (!match) {
    throw new Error(`'${field}' must be a number with a unit (ms, s, m or h), not '${text}'`);
  }
  return Number(match[1]) * SPAN_UNITS[match[2]];
}

/**
 * The `debounce` field for a key, a period and an optional maximum as the CLI takes them
 * (`'30s'`, `'5m'`); undefined when none is given. Throws naming the field when one is missing
 * or a duration is not one.
 */
function debounceOf(key, period, max) {
  if (key === undefined) {
    if (period !== undefined || max !== undefined) {
      const field = period !== undefined ? 'debounce' : 'debounce_max';
      throw new Error(`'${field}' needs a 'debounce_key'`);
    }
    return undefined;
  }
  if (period === undefined) {
    throw new Error("'debounce_key' needs a 'debounce' period, such as '30s'");
  }
  const debounce = { key, period_ms: parseSpan('debounce', period) };
  if (max !== undefined) debounce.max_ms = parseSpan('debounce_max', max);
  return debounce;
}

/**
 * Throws naming the field unless `debounce` has a non-empty `key` that fits
 * MAX_DEBOUNCE_KEY_NAME_BYTES as a znode name, a `period_ms` from 1 to a week and, if any, a
 * `max_ms` from the period to a week; or when the task also has an idempotency key (a
 * debounced publish replaces the pending task, a keyed one refuses a second).
 */
function checkDebounce(debounce, idempotencyKey) {
  if (typeof debounce !== 'object' || debounce === null) {
    throw new Error(
      `'debounce' must be an object with key and period_ms, not ${JSON.stringify(debounce)}`);
  }
  const { key, period_ms: period, max_ms: max } = debounce;
  if (typeof key !== 'string') {
    throw new Error(`'debounce_key' must be a string, not ${JSON.stringify(key)}`);
  }
  if (key === '') throw new Error("'debounce_key' is empty: give one of at least one character");
  const name = keyNode(key).length;
  if (name > MAX_DEBOUNCE_KEY_NAME_BYTES) {
    throw new Error(`'debounce_key' is ${Buffer.byteLength(key, 'utf8')} bytes, ${name} as a ` +
      `znode name, over the ${MAX_DEBOUNCE_KEY_NAME_BYTES} a key may take`);
  }
  if (!Number.isInteger(period) || period < 1 || period > MAX_DEBOUNCE_MS) {
    throw new Error(`'debounce' must be at least 1 ms and at most ${MAX_DEBOUNCE_MS} ms, ` +
      `not ${JSON.stringify(period)}`);
  }
  if (max !== undefined && max !== null &&
      (!Number.isInteger(max) || max < period || max > MAX_DEBOUNCE_MS)) {
    throw new Error(`'debounce_max' must be at least the period (${period} ms) and at most ` +
      `${MAX_DEBOUNCE_MS} ms, not ${JSON.stringify(max)}`);
  }
  if (idempotencyKey !== undefined && idempotencyKey !== null) {
    throw new Error("'debounce_key' and 'idempotency_key' do not go together: a debounced " +
      'publish replaces the pending task, a keyed one refuses a second');
  }
}

/**
 * Where a task of `priority` is created: `ROOT/tasks/task-` for normal,
 * `ROOT/lanes/high/high-` or `ROOT/lanes/low/low-` for the two others; a normal task with a
 * concurrency key and no group in its key's lane, `ROOT/lanes/keys/<key>/key.<key>.`.
 */
function taskPrefix(root, priority = 'normal', concurrencyKey = undefined, group = undefined) {
  const base = root.replace(/\/+$/, '');
  if (priority === 'normal' && concurrencyKey && group === undefined) {
    const node = keyNode(concurrencyKey);
    return `${base}/lanes/keys/${node}/key.${node}.`;
  }
  if (priority === 'normal') return `${base}/tasks/task-`;
  return `${base}/lanes/${priority}/${priority}-`;
}

/**
 * An `event-bridge/1` envelope: a fresh uuid id and the time now (UTC, RFC 3339).
 * `fields` adds optional fields (`group`, `idempotency_key`, `concurrency_key`, `priority`,
 * `debounce`, or your own; not `after`, `on_parent_dead` or `batch`) and may give `id` (your
 * event's id, kept across retries) or `time`.
 */
function envelope(eventType, payload, fields = {}) {
  for (const name of CONSUMER_FIELDS) {
    if (name in fields) throw new Error(`'${name}' is written by consumers, not producers`);
  }
  for (const name of NOT_OFFERED) {
    if (name in fields) {
      throw new Error(`'${name}' is not offered by this producer: its publish writes more than `
        + 'the task; publish it through the HTTP publish or `event-bridge publish`');
    }
  }
  if ('concurrency_key' in fields) checkConcurrencyKey(fields.concurrency_key);
  if ('priority' in fields) checkPriority(fields.priority);
  if ('debounce' in fields) checkDebounce(fields.debounce, fields.idempotency_key);
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
  if ('debounce' in fields) {
    // A copy with the three fields consumers read; no maximum is left out, not null.
    const { key, period_ms, max_ms } = fields.debounce;
    body.debounce = max_ms === undefined || max_ms === null
      ? { key, period_ms } : { key, period_ms, max_ms };
  }
  checkTextFields(body);
  return body;
}

// Fields a delivery sends as HTTP headers, or the queue names znodes after: one holding a
// control character (C0, which takes CR, LF and NUL in, or DEL) could never be delivered.
const TEXT_FIELDS = ['id', 'type', 'group', 'idempotency_key', 'concurrency_key'];
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;
// The most of a bad value a message quotes, in bytes.
const SHOWN_BYTES = 100;

/** `value` quoted for a message: whole when short, else its first bytes and its length. */
function shown(value) {
  const raw = Buffer.from(value, 'utf8');
  if (raw.length <= SHOWN_BYTES) return JSON.stringify(value);
  const head = raw.subarray(0, SHOWN_BYTES).toString('utf8').replace(/\uFFFD$/, '');
  return `${JSON.stringify(head)}… (${raw.length} bytes)`;
}

/**
 * Throws naming the field when a text field of the envelope `body` holds a control character,
 * or `group` or `type` is empty.
 */
function checkTextFields(body) {
  const texts = TEXT_FIELDS.map((name) => [name, body[name]]);
  texts.push(['debounce_key', body.debounce ? body.debounce.key : undefined]);
  for (const [name, value] of texts) {
    if (typeof value !== 'string') continue;
    if (value === '' && (name === 'type' || name === 'group')) {
      throw new Error(`'${name}' is empty: give one of at least one character`);
    }
    const bad = CONTROL.exec(value);
    if (bad) {
      const code = bad[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, '0');
      throw new Error(`'${name}' holds a control character (U+${code}), which no header or ` +
        `znode name can carry: ${shown(value)}`);
    }
  }
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

/**
 * Creates the base paths and the parent of `prefix` (a key's lane is made by the first
 * publish of its key) when missing.
 */
async function ensureLane(client, root, prefix, acls) {
  await ensurePaths(client, root, acls);
  const parent = prefix.slice(0, prefix.lastIndexOf('/'));
  await new Promise((resolve, reject) =>
    client.mkdirp(parent, null, acls, zookeeper.CreateMode.PERSISTENT,
      (err) => (err ? reject(err) : resolve())));
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
async function publishKeyed(client, data, key, id, root, acls, priority = 'normal', lane = undefined) {
  const base = root.replace(/\/+$/, '');
  const keyPath = `${base}/keys/${keyNode(key)}`;
  const prefix = lane || taskPrefix(base, priority);
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
      await ensureLane(client, root, prefix, acls);
    } else if (code === zookeeper.Exception.NODE_EXISTS) {
      const task = await existing(client, keyPath);
      if (task !== false) return { task, created: false };
    } else {
      throw failed;
    }
  }
  throw new Error(`idempotency key ${JSON.stringify(key)} kept changing; try again`);
}

// The due index's bucket for keys no consumer has filed yet (docs/WIRE-FORMAT.md, "Debounce").
const UNFILED_BUCKET = '0000000000000';
// A place's due time, 9999-12-31T23:59:59Z in ms (docs/WIRE-FORMAT.md, "Places").
const PLACE_DUE_MS = 253402300799000;

/**
 * Writes the envelope `data` to `ROOT/debounce/<key>` (docs/WIRE-FORMAT.md, "Debounce"):
 * created when nothing is pending for the key, with the key's entry in the due index's
 * unfiled bucket (and, for a grouped task, its place in its lane) in the same transaction;
 * else rewritten at the version read (with the entry too when the rewrite may make the key due
 * sooner). Resolves to the id of the envelope it replaced, or null when it created the node.
 * A key pending in another group than `data`'s is refused.
 */
async function writeDebounced(client, data, key, root = '/event-bridge',
  acls = zookeeper.ACL.OPEN_ACL_UNSAFE) {
  const base = root.replace(/\/+$/, '');
  const node = keyNode(key);
  const path = `${base}/debounce/${node}`;
  const entry = `${base}/debounce-due/${UNFILED_BUCKET}/${node}`;
  const body = JSON.parse(data.toString('utf8'));
  for (let i = 0; i < 5; i++) {
    let pending = null;
    let stat;
    try {
      [pending, stat] = await call((cb) => client.getData(path, cb));
    } catch (err) {
      if (codeOf(err) !== zookeeper.Exception.NO_NODE) throw err;
    }
    const [filed] = await call((cb) => client.exists(entry, cb));
    if (pending === null) {
      if (await createDebounced(client, base, path, filed ? null : entry, body, acls)) return null;
      continue;
    }
    const old = pendingEnvelope(pending);
    if ((old.group ?? null) !== (body.group ?? null)) {
      throw new Error(`debounce_key ${JSON.stringify(key)} is pending in ` +
        `${groupName(old.group)}: a publish of it keeps that group until it fires`);
    }
    const rewrite = old.placed === undefined ? body : { ...body, placed: old.placed };
    const tx = client.transaction().setData(path, bodyBytes(rewrite), stat.version);
    if (!filed && fallsDueSooner(body.debounce || {}, old.debounce)) {
      tx.create(entry, Buffer.alloc(0), acls, zookeeper.CreateMode.PERSISTENT);
    }
    try {
      await call((cb) => tx.commit(cb));
      return pendingId(pending);
    } catch (err) {
      const code = codeOf(err);
      // Another publish, or a consumer firing the task, got in first: read again.
      if (code === zookeeper.Exception.NO_NODE) {
        await ensureDebouncePaths(client, base, acls);
      } else if (code !== zookeeper.Exception.BAD_VERSION &&
        code !== zookeeper.Exception.NODE_EXISTS) {
        throw err;
      }
    }
  }
  throw new Error(
    `debounce key ${JSON.stringify(key)} kept changing while it was published; try again`);
}

/**
 * Creates the pending node `path` with the key's unfiled `entry` (null: one is there already)
 * and, for a grouped task, its place; false when another publish created it first, or when a
 * parent was missing (created now): look again.
 */
async function createDebounced(client, base, path, entry, body, acls) {
  const grouped = body.group !== undefined && body.group !== null;
  const task = grouped ? { ...body, placed: body.id } : body;
  const tx = client.transaction().create(path, bodyBytes(task), acls,
    zookeeper.CreateMode.PERSISTENT);
  if (entry !== null) tx.create(entry, Buffer.alloc(0), acls, zookeeper.CreateMode.PERSISTENT);
  if (grouped) {
    const place = placeBody(body, { debounce: { key: body.debounce.key } });
    const prefix = taskPrefix(base, body.priority || 'normal', undefined, body.group);
    tx.create(prefix, bodyBytes(place), acls, zookeeper.CreateMode.PERSISTENT_SEQUENTIAL);
  }
  try {
    await call((cb) => tx.commit(cb));
    return true;
  } catch (err) {
    const code = codeOf(err);
    if (code === zookeeper.Exception.NODE_EXISTS) return false;
    if (code !== zookeeper.Exception.NO_NODE) throw err;
  }
  await ensureDebouncePaths(client, base, acls);
  return false;
}

/** Creates the base paths and the parents a debounced publish writes under. */
async function ensureDebouncePaths(client, base, acls) {
  await ensurePaths(client, base, acls);
  for (const parent of ['debounce', `debounce-due/${UNFILED_BUCKET}`]) {
    await call((cb) => client.mkdirp(`${base}/${parent}`, null, acls,
      zookeeper.CreateMode.PERSISTENT, cb));
  }
}

/**
 * The place that keeps grouped `task`'s turn in its lane while it waits elsewhere
 * (docs/WIRE-FORMAT.md, "Places").
 */
function placeBody(task, standsFor) {
  const place = {
    format: FORMAT, id: task.id, type: task.type, time: task.time, payload: null,
    group: task.group, retry_at: PLACE_DUE_MS, place: standsFor,
  };
  if (task.on_dead !== undefined) place.on_dead = task.on_dead;
  return place;
}

/** The pending envelope `data` as an object ({} when it is not one). */
function pendingEnvelope(data) {
  try {
    const body = JSON.parse(data.toString('utf8'));
    return body && typeof body === 'object' ? body : {};
  } catch {
    return {};
  }
}

function groupName(group) {
  return group === undefined || group === null ? 'no group' : `group ${JSON.stringify(group)}`;
}

/**
 * Whether a publish asking for `debounce` may make a key pending with `pending` (its debounce,
 * undefined when unreadable) due sooner: a shorter period, or a maximum shorter or new.
 */
function fallsDueSooner(debounce, pending) {
  if (!pending || typeof pending !== 'object') return true;
  const mine = debounce.max_ms;
  const theirs = pending.max_ms;
  const shorterMax = mine !== undefined && mine !== null &&
    (theirs === undefined || theirs === null || mine < theirs);
  return (debounce.period_ms || 0) < (pending.period_ms || 0) || shorterMax;
}

/** The `id` of the pending envelope `data` ('' when it is not one). */
function pendingId(data) {
  try {
    const body = JSON.parse(data.toString('utf8'));
    return body && body.id !== undefined ? String(body.id) : '';
  } catch {
    return '';
  }
}

/** The envelope `body` as its znode's data; throws when ZooKeeper would refuse it. */
function bodyBytes(body) {
  const data = Buffer.from(JSON.stringify(body), 'utf8');
  if (data.length > MAX_BODY_BYTES) {
    throw new Error(
      `task body is ${data.length} bytes, over ${MAX_BODY_BYTES}: ` +
        'put large data in object storage and a reference in the payload');
  }
  return data;
}

/**
 * Publishes one task debounced by `options.debounce` (as `debounceOf` makes it): no task is
 * created now; its envelope waits under `ROOT/debounce/<key>`, replacing the one pending
 * there. Resolves to the id of the envelope it replaced, or null. Options as for `publish`.
 */
async function publishDebounced(client, eventType, payload, options = {}) {
  const { root = '/event-bridge', acls = zookeeper.ACL.OPEN_ACL_UNSAFE, ...fields } = options;
  if (!('debounce' in fields)) {
    throw new Error("'debounce' is missing: give a key and a period (see debounceOf)");
  }
  const body = envelope(eventType, payload, fields);
  return writeDebounced(client, bodyBytes(body), body.debounce.key, root, acls);
}

/**
 * Publishes one task; resolves to its name (`task-0000000042`, or `high-…` / `low-…` in those
 * lanes; `debounce/<key>`, where it waits, for a debounced one: `publishDebounced` says what
 * it replaced).
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
  if ('debounce' in fields) {
    await publishDebounced(client, eventType, payload, options);
    return { task: `debounce/${fields.debounce.key}`, created: true };
  }
  const body = envelope(eventType, payload, fields);
  if (body.idempotency_key !== undefined) body.keyed = true;
  const data = bodyBytes(body);
  const priority = body.priority || 'normal';
  const prefix = taskPrefix(root, priority, body.concurrency_key, body.group);
  if (body.keyed) {
    return publishKeyed(client, data, body.idempotency_key, body.id, root, acls, priority, prefix);
  }
  const create = () =>
    new Promise((resolve, reject) =>
      client.create(prefix, data, acls, zookeeper.CreateMode.PERSISTENT_SEQUENTIAL,
        (err, path) => (err ? reject(err) : resolve(path))));
  let path;
  try {
    path = await create();
  } catch (err) {
    if (err.getCode === undefined || err.getCode() !== zookeeper.Exception.NO_NODE) throw err;
    // First task under this root, or of this key: create the paths, then try again.
    await ensureLane(client, root, prefix, acls);
    path = await create();
  }
  return { task: path.slice(path.lastIndexOf('/') + 1), created: true };
}

/**
 * Publishes one task with a fresh id; resolves to the line the CLI prints for it, as the Rust
 * CLI does: {task, id}, {task, duplicate: true} for a taken key, or
 * {published: 'debounced', id, key, replaced}.
 */
async function publishOne(client, eventType, payload, options) {
  const id = crypto.randomUUID();
  if (options.debounce !== undefined) {
    const replaced = await publishDebounced(client, eventType, payload, { ...options, id });
    return { published: 'debounced', id, key: options.debounce.key, replaced };
  }
  const { task, created } = await publishDetailed(client, eventType, payload, { ...options, id });
  return created ? { task, id } : { task, duplicate: true };
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
      'debounce-key': { type: 'string' },
      debounce: { type: 'string' },
      'debounce-max': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const usage =
    'usage: event-bridge-publish [--zookeeper HOST:PORT[/chroot]] [--root /event-bridge] --type T ' +
    '[--payload JSON] [--count N] [--group G] [--idempotency-key K] [--concurrency-key K] ' +
    '[--priority high|normal|low] [--traceparent 00-…] ' +
    '[--debounce-key K --debounce 30s [--debounce-max 5m]]';
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const fail = (msg) => {
    console.error(`event-bridge-publish: ${msg}\n${usage}`);
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
  try {
    const debounce = debounceOf(values['debounce-key'], values.debounce, values['debounce-max']);
    if (debounce !== undefined) {
      checkDebounce(debounce, fields.idempotency_key);
      fields.debounce = debounce;
    }
  } catch (err) {
    return fail(err.message);
  }

  let kick;
  try {
    kick = Kick.fromEnv();
  } catch (err) {
    return fail(err.message);
  }

  const auth = process.env.ZOOKEEPER_AUTH || undefined;
  const acls = auth ? zookeeper.ACL.CREATOR_ALL_ACL : zookeeper.ACL.OPEN_ACL_UNSAFE;
  const client = await connect(values.zookeeper, { auth });
  try {
    for (let i = 0; i < count; i++) {
      const options = { root: values.root, acls, ...fields };
      const line = await publishOne(client, values.type, payload, options);
      process.stdout.write(`${JSON.stringify(line)}\n`);
    }
    if (kick) {
      const kicked = await kick.afterPublish(client, values.root, acls);
      if (kicked.startsWith('failed')) {
        console.error(`event-bridge-publish: kick ${kicked}; the publish stands`);
      }
    }
  } finally {
    client.close();
  }
  return 0;
}

module.exports = {
  FORMAT,
  connect,
  debounceOf,
  envelope,
  ensurePaths,
  keyNode,
  parseSpan,
  publish,
  publishDebounced,
  publishDetailed,
};

if (require.main === module) {
  main().then(
    (code) => { process.exitCode = code; },
    (err) => {
      console.error(`event-bridge-publish: ${err.message || err}`);
      process.exitCode = 1;
    });
}
