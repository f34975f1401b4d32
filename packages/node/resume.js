'use strict';
/**
 * Answers that suspend a task: a webhook's `202` with a checkpoint.
 *
 * A webhook whose work outlasts one delivery answers `202` with a JSON body, and event-bridge
 * releases the task without counting an attempt, then delivers it again with `resume`
 * (`checkpoint`, the last one answered, and `done`, the sleeps and waits so far) in its
 * envelope (the book's "Resumable tasks", docs/book/src/guides/resumable.md):
 *
 *   checkpoint({ row: 500 })                                  // again at once, in another run
 *   resumeIn('30s', { checkpoint: { row: 500 } })             // again in 30 s, holding no lease
 *   waitFor(['order-7'], '1h', { checkpoint: { row: 500 } })  // on a signal for order-7, or in 1 h
 *
 * Each returns `{ status: 202, headers, body }` (body: a JSON string): send it as it is. A
 * checkpoint left out keeps the last one. A span is a number of ms or a string with its unit
 * ('1500ms', '90s', '30m', '1h', '7d'). The checks here are the server's: an answer it would
 * refuse (a span with no unit, no key, more than 16 keys, a key too long for a znode name)
 * throws here instead of sending the task to the dead letters there.
 */

/** The most keys one wait may name. */
const MAX_WAIT_KEYS = 16;
/** The longest a signal's key may be as a znode name (other bytes than [A-Za-z0-9_-] take 3). */
const MAX_KEY_NAME_BYTES = 200;

const UNITS = [['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000], ['ms', 1]];

/**
 * `after` as event-bridge writes a span: a whole number and the largest unit that says it
 * exactly. Takes ms (a number, rounded up) or such a string.
 */
function span(after) {
  if (typeof after === 'string') {
    if (!/^[0-9]+(ms|s|m|h|d)$/.test(after)) {
      throw new RangeError(`${JSON.stringify(after)} is not a span: a whole number and ms, s, m, h or d`);
    }
    return after;
  }
  if (typeof after !== 'number' || !Number.isFinite(after)) {
    throw new RangeError(`${String(after)} is not a span: a number of ms or a string like '90s'`);
  }
  if (after < 0) throw new RangeError(`a span cannot be negative: ${after}`);
  const ms = Math.ceil(after);
  for (const [unit, scale] of UNITS) {
    if (ms % scale === 0 && (ms > 0 || unit === 'ms')) return `${ms / scale}${unit}`;
  }
  throw new Error('unreachable: every whole number is a number of ms');
}

function answer(fields, options = {}) {
  const body = options.checkpoint === undefined ? fields : { checkpoint: options.checkpoint, ...fields };
  return { status: 202, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}

/** Deliver the task again at once (in another run), with `value` as its checkpoint. */
function checkpoint(value) {
  return answer({}, { checkpoint: value === undefined ? null : value });
}

/** Deliver the task again `after` from now; it holds no lease meanwhile. */
function resumeIn(after, options = {}) {
  return answer({ resume_in: span(after) }, options);
}

function keyNameBytes(key) {
  let bytes = 0;
  for (const byte of Buffer.from(key, 'utf8')) {
    const plain = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) ||
      (byte >= 0x61 && byte <= 0x7a) || byte === 0x2d || byte === 0x5f;
    bytes += plain ? 1 : 3;
  }
  return bytes;
}

/**
 * Deliver the task again when any one of `keys` is signalled (or was, with a signal kept for
 * it), or once `timeout` passed. The next delivery's `waitOutcome` says which:
 * {by: 'signal', key, payload} or {by: 'timeout'}.
 */
function waitFor(keys, timeout, options = {}) {
  const list = typeof keys === 'string' ? [keys] : Array.from(keys || []);
  if (list.length === 0) throw new RangeError('a wait names no key');
  if (list.length > MAX_WAIT_KEYS) {
    throw new RangeError(`a wait names ${list.length} keys, over the ${MAX_WAIT_KEYS} it may`);
  }
  for (const key of list) {
    if (typeof key !== 'string' || key === '') {
      throw new RangeError(`a wait's key must be a non-empty string, not ${JSON.stringify(key)}`);
    }
    const name = keyNameBytes(key);
    if (name > MAX_KEY_NAME_BYTES) {
      throw new RangeError(`key ${JSON.stringify(key.slice(0, 40))}… is ${name} bytes as a znode ` +
        `name, over the ${MAX_KEY_NAME_BYTES} a signal's key may take`);
    }
  }
  return answer({ wait_for: list, timeout: span(timeout) }, options);
}

module.exports = { MAX_KEY_NAME_BYTES, MAX_WAIT_KEYS, checkpoint, resumeIn, span, waitFor };
