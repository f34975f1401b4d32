'use strict';
/**
 * A webhook written with the installed npm package's helpers, for tests/interop/packages.rs
 * (run with NODE_PATH at the npm project `make packages` installs the package into).
 *
 * Listens on 127.0.0.1 (any free port; prints {"listening": PORT} first). Each POST is checked
 * with Delivery.verified and the secret in $WEBHOOK_SECRET (401 when it fails), then answered by
 * where its checkpoint says the work is:
 *
 *   no checkpoint   checkpoint({ step: 1 })                                again at once
 *   step 1          resumeIn(30000, { checkpoint: { step: 2 } })           again in 30 s
 *   step 2          waitFor([$WAIT_KEY], '1h', { checkpoint: { step: 3 } }) again on a signal
 *   step 3          200 {"outcome": <the wait's outcome>}
 *
 * Each request is appended to $RECORD as a JSON line: what the delivery said and what was
 * answered, or {"refused": why}.
 */

const fs = require('node:fs');
const http = require('node:http');
const { Delivery, WebhookVerificationError, checkpoint, resumeIn, waitFor } = require('event-bridge');

const { WEBHOOK_SECRET: SECRET, WAIT_KEY, RECORD } = process.env;

const record = (line) => fs.appendFileSync(RECORD, `${JSON.stringify(line)}\n`);

function answerFor(delivery) {
  const step = (delivery.checkpoint || {}).step;
  if (step === undefined) return checkpoint({ step: 1 });
  if (step === 1) return resumeIn(30000, { checkpoint: { step: 2 } });
  if (step === 2) return waitFor([WAIT_KEY], '1h', { checkpoint: { step: 3 } });
  return null;
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    let delivery;
    try {
      delivery = Delivery.verified(SECRET, Buffer.concat(chunks), req.headers);
    } catch (err) {
      if (!(err instanceof WebhookVerificationError)) throw err;
      record({ refused: err.message });
      res.writeHead(401).end('bad signature');
      return;
    }
    const answer = answerFor(delivery) || {
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outcome: delivery.waitOutcome }),
    };
    const left = delivery.timeLeftMs();
    record({
      task: delivery.task, attempt: delivery.attempt, fencing_token: delivery.fencingToken,
      idempotency_key: delivery.idempotencyKey, payload: delivery.payload,
      checkpoint: delivery.checkpoint, outcome: delivery.waitOutcome,
      time_left_ok: left !== null && left > 0 && left <= 60000,
      status: answer.status, answer: JSON.parse(answer.body),
    });
    res.writeHead(answer.status, answer.headers).end(answer.body);
  });
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ listening: server.address().port })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
