'use strict';
/**
 * Kicks from Node: once tasks landed, start a drain of process_events through its HTTP
 * trigger, unless one is due already (the book's "Kicks: a task starts soon after its
 * publish").
 *
 * Off unless `EVENT_BRIDGE_KICK=on`. `event-bridge-publish` kicks once after its tasks landed;
 * from code, after publishing:
 *
 *   const { Kick } = require('event-bridge');
 *   const kick = Kick.fromEnv();          // null when kicks are off
 *   if (kick) await kick.afterPublish(client, '/event-bridge');
 *
 * Kicks coalesce through the znode `ROOT/kick` (`{"at_ms": MS}`, ZooKeeper's time when the kick
 * was sent), shared with the Rust and Python publishers: the publisher that creates it kicks,
 * the others find it standing and do not; one older than `KICK_STALE_MS` (30 s) is a lost
 * kick, taken over (written at the version read) by the next publisher, which kicks again; a
 * kicked drain deletes it. The trigger is POSTed with `Authorization: Bearer $CRON_SECRET`; its
 * answer comes when the drain ends, so a publisher waits `KICK_WAIT_MS` (1 s) at most and
 * takes a request still unanswered then as sent. Only HTTP triggers are served here. A kick
 * that fails never fails the publish: `afterPublish` resolves to what happened.
 */

const zookeeper = require('node-zookeeper-client');

const STALE_MS = 30000;
const WAIT_MS = 1000;

const call = (fn) => new Promise((resolve, reject) =>
  fn((err, ...rest) => (err ? reject(err) : resolve(rest))));
const codeOf = (err) => (err && err.getCode ? err.getCode() : undefined);
const { NO_NODE, NODE_EXISTS, BAD_VERSION } = zookeeper.Exception;

function millis(env, name, fallback, low, high) {
  const raw = (env[name] || '').trim();
  if (!raw) return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value < low || value > high) {
    throw new Error(`${name}=${JSON.stringify(raw)}: set whole milliseconds, ${low} to ${high}`);
  }
  return value;
}

/** ZooKeeper's time in ms, as our consumers read it: the mtime of a write to `ROOT/clock`. */
async function serverTime(client, root, acls) {
  const path = `${root}/clock`;
  const write = async () => {
    const [stat] = await call((cb) => client.setData(path, Buffer.alloc(0), -1, cb));
    return Number(stat.mtime.readBigInt64BE());
  };
  try {
    return await write();
  } catch (err) {
    if (codeOf(err) !== NO_NODE) throw err;
  }
  await call((cb) => client.mkdirp(root, cb));
  try {
    await call((cb) => client.create(path, Buffer.alloc(0), acls, cb));
  } catch (err) {
    if (codeOf(err) !== NODE_EXISTS) throw err;
  }
  return write();
}

class Kick {
  constructor(url, { secret, staleMs = STALE_MS, waitMs = WAIT_MS } = {}) {
    if (!/^https?:\/\//.test(url)) {
      throw new Error(`EVENT_BRIDGE_KICK_URL=${JSON.stringify(url)}: this producer kicks an ` +
        "http(s) trigger only (process_events' …?drain=1)");
    }
    Object.assign(this, { url, secret, staleMs, waitMs });
  }

  /** The kicks the environment asks for, or null when `EVENT_BRIDGE_KICK` is not on. */
  static fromEnv(env = process.env) {
    const sw = (env.EVENT_BRIDGE_KICK || '').trim().toLowerCase();
    if (['', 'off', 'false', '0', 'no'].includes(sw)) return null;
    if (!['on', 'true', '1', 'yes'].includes(sw)) {
      throw new Error(`EVENT_BRIDGE_KICK=${JSON.stringify(sw)}: set on or off`);
    }
    const url = (env.EVENT_BRIDGE_KICK_URL || '').trim();
    if (!url) throw new Error('EVENT_BRIDGE_KICK_URL: required with EVENT_BRIDGE_KICK=on');
    return new Kick(url, {
      secret: (env.CRON_SECRET || '').trim() || undefined,
      staleMs: millis(env, 'KICK_STALE_MS', STALE_MS, 1000, 86400000),
      waitMs: millis(env, 'KICK_WAIT_MS', WAIT_MS, 10, 600000),
    });
  }

  /** Kicks when due; resolves to 'standing', 'kicked' or 'failed: <why>'; never rejects. */
  async afterPublish(client, root = '/event-bridge', acls = zookeeper.ACL.OPEN_ACL_UNSAFE) {
    try {
      if (await this.due(client, root, acls) === 'standing') return 'standing';
      await this.send();
      return 'kicked';
    } catch (err) {
      return `failed: ${err.message || err}`;
    }
  }

  /** 'made' or 'taken_over' when this publisher kicks, else 'standing'. */
  async due(client, root, acls) {
    const path = `${root}/kick`;
    const now = await serverTime(client, root, acls);
    const data = Buffer.from(JSON.stringify({ at_ms: now }));
    for (let i = 0; i < 2; i++) { // a node deleted between the create and the read is made again
      try {
        await call((cb) => client.create(path, data, acls, cb));
        return 'made';
      } catch (err) {
        if (codeOf(err) !== NODE_EXISTS) throw err;
      }
      let old;
      let stat;
      try {
        [old, stat] = await call((cb) => client.getData(path, cb));
      } catch (err) {
        if (codeOf(err) === NO_NODE) continue;
        throw err;
      }
      let at;
      try {
        at = Number(JSON.parse(old.toString('utf8')).at_ms);
      } catch (err) {
        at = NaN; // unreadable: a lost kick
      }
      if (Number.isFinite(at) && now - at < this.staleMs) return 'standing';
      try {
        await call((cb) => client.setData(path, data, stat.version, cb));
        return 'taken_over';
      } catch (err) {
        if (codeOf(err) === BAD_VERSION || codeOf(err) === NO_NODE) return 'standing';
        throw err;
      }
    }
    return 'standing';
  }

  /** POSTs the trigger; an answer must be a success, none within the wait means sent. */
  async send() {
    const headers = this.secret ? { Authorization: `Bearer ${this.secret}` } : {};
    let answer;
    try {
      answer = await fetch(this.url, {
        method: 'POST', headers, signal: AbortSignal.timeout(this.waitMs),
      });
    } catch (err) {
      if (err.name === 'TimeoutError') return; // sent; the drain it started is still running
      throw new Error(`cannot reach the trigger: ${err.cause ? err.cause.message : err.message}`);
    }
    if (!answer.ok) throw new Error(`the trigger answered ${answer.status}`);
  }
}

module.exports = { Kick, serverTime };
