#!/usr/bin/env python3
"""Writes the book's HTTP reference from docs/openapi.yaml: the API's description, each
operation (its parameters, body and replies), the webhook the HTTP sink calls, the security
schemes and every schema with its fields. Run by scripts/book/build.sh before mdBook, so the
page says what the spec says; the spec itself is checked against the functions' real replies
by tests/functions/openapi.rs.

    openapi.py docs/openapi.yaml OUT.md
"""
import json
import sys

import yaml

METHODS = ("get", "post", "put", "patch", "delete", "head", "options")


def anchor(name):
    """The id mdBook gives a heading that is just this name."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_")


class Spec:
    def __init__(self, spec):
        self.spec = spec

    def resolve(self, node):
        """A $ref's target, and the name of the schema it names (or None)."""
        ref = node.get("$ref") if isinstance(node, dict) else None
        if not ref or not ref.startswith("#/"):
            return node, None
        target = self.spec
        for part in ref[2:].split("/"):
            target = target[part]
        name = ref.rsplit("/", 1)[1] if "/schemas/" in ref else None
        return target, name

    def type_of(self, schema):
        """A short description of a schema's type, linking to named schemas."""
        if not isinstance(schema, dict):
            return ""
        ref = schema.get("$ref")
        if ref:
            if ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[1]
                return "[%s](#%s)" % (name, anchor(name))
            return "`%s`" % ref
        for key in ("oneOf", "anyOf", "allOf"):
            if key in schema:
                joiner = " and " if key == "allOf" else " or "
                return joiner.join(self.type_of(s) for s in schema[key])
        kind = schema.get("type", "")
        if isinstance(kind, list):
            kind = " or ".join(kind)
        if kind == "array":
            return "array of " + (self.type_of(schema.get("items", {})) or "any")
        if "enum" in schema:
            return " \\| ".join("`%s`" % json.dumps(v) for v in schema["enum"])
        if "const" in schema:
            return "`%s`" % json.dumps(schema["const"])
        return kind and "`%s`" % kind

    def operation(self, path, method, op, out):
        out.append("### %s `%s`\n" % (method.upper(), path))
        if op.get("summary"):
            out.append("**%s**\n" % op["summary"].strip())
        if op.get("description"):
            out.append(op["description"].strip() + "\n")
        security = [name for item in op.get("security", []) for name in item]
        if security:
            out.append("Security: " + ", ".join("[%s](#%s)" % (s, anchor(s)) for s in security) + "\n")
        params = [self.resolve(p)[0] for p in op.get("parameters", [])]
        if params:
            out.append("Parameters:\n")
            for p in params:
                text = " ".join(p.get("description", "").split())
                out.append("- `%s` (%s, %s%s): %s" % (
                    p["name"], p.get("in", ""), self.type_of(p.get("schema", {})),
                    ", required" if p.get("required") else "", text))
            out.append("")
        if "requestBody" in op:
            body, _ = self.resolve(op["requestBody"])
            text = " ".join(body.get("description", "").split())
            out.append("Body: %s%s\n" % (text + " " if text else "", self.content(body)))
        out.append("Replies:\n")
        for status, reply in op.get("responses", {}).items():
            reply, _ = self.resolve(reply)
            text = " ".join(reply.get("description", "").split())
            content = self.content(reply)
            out.append("- `%s`: %s%s" % (status, text, (" " + content) if content else ""))
        out.append("")

    def content(self, node):
        """What a body or reply carries: its schema, per media type."""
        parts = []
        for mime, media in node.get("content", {}).items():
            schema = media.get("schema", {})
            parts.append("`%s`: %s." % (mime, self.type_of(schema) or "any"))
        return " ".join(parts)

    def schema(self, name, schema, out):
        out.append("### %s\n" % name)
        if schema.get("description"):
            out.append(schema["description"].strip() + "\n")
        kind = self.type_of({k: v for k, v in schema.items() if k != "description"})
        props = schema.get("properties", {})
        if kind and not props:
            out.append("Type: %s\n" % kind)
        required = set(schema.get("required", []))
        for field, sub in props.items():
            text = " ".join(sub.get("description", "").split()) if isinstance(sub, dict) else ""
            out.append("- `%s` (%s%s)%s" % (field, self.type_of(sub) or "any",
                                             ", required" if field in required else "",
                                             ": " + text if text else ""))
        if props:
            out.append("")
        if "example" in schema:
            out.append("Example:\n\n```json\n%s\n```\n" % json.dumps(schema["example"], indent=2))

    def render(self):
        spec, out = self.spec, []
        info = spec["info"]
        out.append("## %s (version %s)\n" % (info["title"], info["version"]))
        if info.get("summary"):
            out.append(info["summary"].strip() + "\n")
        out.append(info.get("description", "").strip() + "\n")
        out.append("## Operations\n")
        for path, item in spec.get("paths", {}).items():
            for server in item.get("servers", []):
                out.append("`%s` is served at %s: %s\n" % (
                    path, server["url"], " ".join(server.get("description", "").split())))
            if item.get("description"):
                out.append(item["description"].strip() + "\n")
            for method in METHODS:
                if method in item:
                    self.operation(path, method, item[method], out)
        out.append("## Webhooks\n")
        for name, item in spec.get("webhooks", {}).items():
            for method in METHODS:
                if method in item:
                    self.operation(name, method, item[method], out)
        components = spec.get("components", {})
        out.append("## Security schemes\n")
        for name, scheme in components.get("securitySchemes", {}).items():
            out.append("### %s\n" % name)
            out.append(scheme.get("description", "").strip() + "\n")
        out.append("## Schemas\n")
        for name, schema in components.get("schemas", {}).items():
            self.schema(name, schema, out)
        return "\n".join(out)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(Spec(spec).render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
