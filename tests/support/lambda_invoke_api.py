"""Lambda's Invoke API on loopback, for the kick tests: it checks each request's SigV4
signature with botocore (the AWS SDK for Python, which moto brings: `make tools`), independently
of the Rust signer that made it, and answers as Lambda does.

    python3 lambda_invoke_api.py ACCESS_KEY SECRET_KEY REGION

Prints `listening PORT`, then one JSON line per request:
`{"function", "invocation_type", "payload", "signed"}`, `signed` true when the Authorization
header is the one botocore computes for the same request with the same credentials, date and
region. A signed `Event` invocation is answered 202 (queued, as Lambda answers an asynchronous
invocation), a bad signature 403 with Lambda's error type, anything else 400.
"""

import datetime
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import botocore.auth
from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

PREFIX = "/2015-03-31/functions/"
SUFFIX = "/invocations"
# The headers a signer adds, which botocore adds again itself.
SIGNING_HEADERS = {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}

ACCESS_KEY, SECRET_KEY, REGION = sys.argv[1:4]
CLOCK = threading.Lock()


def expected_authorization(method, url, headers, body):
    """The Authorization header botocore signs the request with: over the headers the request
    says it signed (as Lambda checks it), at the request's own date."""
    signed = headers.get("authorization", "").split("SignedHeaders=", 1)[-1].split(",", 1)[0]
    names = set(signed.split(";")) - SIGNING_HEADERS - {"host"}
    kept = {k: v for k, v in headers.items() if k.lower() in names}
    request = AWSRequest(method=method, url=url, data=body, headers=kept)
    stamp = datetime.datetime.strptime(headers.get("x-amz-date", ""), SIGV4_TIMESTAMP)
    signer = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "lambda", REGION)
    with CLOCK:
        # botocore signs at the clock's time: the request's own date stands in for it.
        botocore.auth.get_current_datetime = lambda: stamp
        signer.add_auth(request)
    return request.headers["Authorization"]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
            return self.answer(400, {"Type": "User", "message": f"no such path {path}"})
        function = unquote(path[len(PREFIX) : -len(SUFFIX)])
        host = self.headers.get("host", "")
        headers = {k: v for k, v in self.headers.items()}
        try:
            wanted = expected_authorization("POST", f"http://{host}{self.path}", headers, body)
        except Exception as e:  # a request botocore cannot sign is not signed right
            wanted = f"unsignable: {e}"
        signed = self.headers.get("authorization") == wanted
        invocation_type = self.headers.get("x-amz-invocation-type", "RequestResponse")
        try:
            payload = json.loads(body or b"null")
        except ValueError:
            payload = None
        line = {
            "function": function,
            "invocation_type": invocation_type,
            "payload": payload,
            "signed": signed,
        }
        print(json.dumps(line), flush=True)
        if not signed:
            return self.answer(403, {"Type": "User", "message": "InvalidSignatureException"})
        if invocation_type != "Event":
            return self.answer(400, {"Type": "User", "message": "only Event is served here"})
        self.answer(202, None)

    def answer(self, status, body):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
