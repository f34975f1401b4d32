"""A webhook written with the installed Python package's helpers, for tests/interop/packages.rs.

Listens on 127.0.0.1 (any free port; prints {"listening": PORT} first). Each POST is checked
with event_bridge.webhooks.Delivery.verified and the secret in $WEBHOOK_SECRET (401 when it
fails), then answered by where its checkpoint says the work is, with event_bridge.resume:

    no checkpoint   checkpoint({"step": 1})                            again at once
    step 1          resume_in(timedelta(seconds=30), {"step": 2})      again in 30 s
    step 2          wait_for($WAIT_KEY, timedelta(hours=1), {"step": 3})   again on a signal
    step 3          200 {"outcome": <the wait's outcome>}

Each request is appended to $RECORD as a JSON line: what the delivery said and what was
answered, or {"refused": why}.
"""

import json
import os
import sys
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from event_bridge.resume import checkpoint, resume_in, wait_for
from event_bridge.webhooks import Delivery, WebhookVerificationError

SECRET = os.environ["WEBHOOK_SECRET"]
WAIT_KEY = os.environ["WAIT_KEY"]
RECORD = os.environ["RECORD"]


def record(line):
    with open(RECORD, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def answer_for(delivery):
    step = (delivery.checkpoint or {}).get("step")
    if step is None:
        return checkpoint({"step": 1})
    if step == 1:
        return resume_in(timedelta(seconds=30), checkpoint={"step": 2})
    if step == 2:
        return wait_for(WAIT_KEY, timedelta(hours=1), checkpoint={"step": 3})
    return None


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            delivery = Delivery.verified(SECRET, body, self.headers)
        except WebhookVerificationError as e:
            record({"refused": str(e)})
            return self.send(401, b"bad signature", {})
        answer = answer_for(delivery)
        if answer is None:
            status, payload = 200, json.dumps({"outcome": delivery.wait_outcome}).encode()
            headers = {"Content-Type": "application/json"}
        else:
            status, payload, headers = answer.status, answer.body, answer.headers
        left = delivery.time_left()
        record({
            "task": delivery.task, "attempt": delivery.attempt,
            "fencing_token": delivery.fencing_token, "idempotency_key": delivery.idempotency_key,
            "payload": delivery.payload, "checkpoint": delivery.checkpoint,
            "outcome": delivery.wait_outcome, "time_left_ok": left is not None and 0 < left <= 60,
            "status": status, "answer": json.loads(payload),
        })
        self.send(status, payload, headers)

    def send(self, status, payload, headers):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
print(json.dumps({"listening": server.server_address[1]}), flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    sys.exit(0)
