"""An OTLP/HTTP trace receiver for the tests: decodes each export with the official
opentelemetry-proto definitions and writes every span as one JSON line to stdout: its
service, name, kind, ids, links, attributes and status (`{"code": "UNSET" | "OK" | "ERROR",
"message"}`).

Usage: python3 otlp_receiver.py  (prints "listening <port>" first, then one line per span)

A GET of /mark prints the line {"mark": true} before it answers: every span of an export
answered before it was printed before it.
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}

# Exports are served on threads of their own: one writes its lines at a time, whole.
PRINTING = threading.Lock()


def write_lines(lines):
    with PRINTING:
        sys.stdout.write("".join(json.dumps(line) + "\n" for line in lines))
        sys.stdout.flush()


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "service": resource.get("service.name"),
                        "name": span.name,
                        "kind": KINDS.get(span.kind, str(span.kind)),
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex() or None,
                        "links": [
                            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
                            for link in span.links
                        ],
                        "attributes": attributes(span.attributes),
                        "status": {
                            "code": STATUS_CODES.get(span.status.code, str(span.status.code)),
                            "message": span.status.message,
                        },
                    }
                    lines.append(line)
        write_lines(lines)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        if self.path != "/mark":
            self.send_response(404)
            self.end_headers()
            return
        write_lines([{"mark": True}])
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
