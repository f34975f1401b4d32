'use strict';
/**
 * Receiving event-bridge's webhooks: the signature check and what a delivery carries.
 *
 * An HTTP route with `"signature": "standard"` signs each delivery as Standard Webhooks do
 * (`webhook-id`, `webhook-timestamp`, `webhook-signature`). `verify` checks them with the
 * reference verifier (npm `standardwebhooks`) and returns the task's envelope; `Delivery` adds
 * what event-bridge's own headers say about this attempt:
 *
 *   const { Delivery, WebhookVerificationError } = require('event-bridge');
 *   let delivery;
 *   try {
 *     delivery = Delivery.verified(SECRET, rawBody, req.headers);   // SECRET: 'whsec_…'
 *   } catch (err) {
 *     if (err instanceof WebhookVerificationError) return res.writeHead(401).end();
 *     throw err;
 *   }
 *   delivery.payload, delivery.attempt, delivery.fencingToken, delivery.checkpoint
 *
 * Pass the raw body (a Buffer or string) before any JSON parsing: the signature covers it.
 */

const { Webhook, WebhookVerificationError } = require('standardwebhooks');

/** The headers as a plain object with lowercase names (from an object, a Map or a Headers). */
function plainHeaders(headers) {
  const entries = typeof headers.entries === 'function' && !(headers.constructor === Object)
    ? Array.from(headers.entries())
    : Object.entries(headers);
  const plain = {};
  for (const [name, value] of entries) {
    plain[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value;
  }
  return plain;
}

/**
 * The envelope (parsed JSON) of a delivery whose Standard Webhooks headers sign `body` with
 * `secret` (the route's `whsec_…`), stamped within 5 minutes of this clock.
 *
 * Throws `WebhookVerificationError` for anything else, a malformed header or body included.
 * A secret that is not `whsec_` and base64 throws at once, as the configuration error it is.
 */
function verify(secret, body, headers) {
  const webhook = new Webhook(secret);
  try {
    return webhook.verify(body, plainHeaders(headers));
  } catch (err) {
    if (err instanceof WebhookVerificationError) throw err;
    // The reference verifier lets a body that is not JSON escape as JSON.parse threw it: a
    // refusal all the same.
    throw new WebhookVerificationError(`malformed delivery: ${err.message}`);
  }
}

function numberOf(text) {
  if (text === undefined || text === null || !/^[0-9]+$/.test(String(text))) return null;
  return Number(text);
}

/** One attempt of one task, as the HTTP sink sent it (the book's "Webhooks: the HTTP sink", docs/book/src/integrations/webhooks.md). */
class Delivery {
  constructor(envelope, headers = {}) {
    const h = plainHeaders(headers);
    /** The task's envelope: format, id, type, time, payload, and resume once suspended. */
    this.envelope = envelope;
    /** X-Event-Bridge-Task: the task znode's name. */
    this.task = h['x-event-bridge-task'] ?? null;
    /**
     * X-Event-Bridge-Fencing-Token: grows with every claim of the task. Refuse to write for a
     * token lower than the highest you stored for the idempotency key.
     */
    this.fencingToken = numberOf(h['x-event-bridge-fencing-token']);
    /** X-Event-Bridge-Attempt: the claim's number, 1 on the first; a 202 counts none. */
    this.attempt = numberOf(h['x-event-bridge-attempt']);
    /** Idempotency-Key: the same on every attempt of the task. */
    this.idempotencyKey = h['idempotency-key'] ?? null;
    /** X-Event-Bridge-Deadline: answer by then (ms since the Unix epoch, sender's clock). */
    this.deadlineMs = numberOf(h['x-event-bridge-deadline']);
  }

  /** The delivery of a request whose signature `verify` accepts (it throws otherwise). */
  static verified(secret, body, headers) {
    return new Delivery(verify(secret, body, headers), headers);
  }

  get payload() {
    return this.envelope ? this.envelope.payload : undefined;
  }

  /** The envelope's `resume` record (checkpoint, done); {} on a first delivery. */
  get resume() {
    const resume = this.envelope && this.envelope.resume;
    return resume && typeof resume === 'object' ? resume : {};
  }

  /** What the last 202 answered as its checkpoint; null before any. */
  get checkpoint() {
    return this.resume.checkpoint ?? null;
  }

  /**
   * How the last wait ended, when this delivery follows one: {by: 'signal', key, payload} or
   * {by: 'timeout'}; null otherwise.
   */
  get waitOutcome() {
    const done = Array.isArray(this.resume.done) ? this.resume.done : [];
    const last = done[done.length - 1];
    return last && last.kind === 'wait' ? last.outcome ?? null : null;
  }

  /** Ms left before the deadline (0 once passed), null without one. */
  timeLeftMs(now = Date.now()) {
    return this.deadlineMs === null ? null : Math.max(this.deadlineMs - now, 0);
  }
}

module.exports = { Delivery, WebhookVerificationError, verify };
