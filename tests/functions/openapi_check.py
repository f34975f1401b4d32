#!/usr/bin/env python3
"""Checks HTTP replies against the OpenAPI 3.1 document that describes them.

Usage: openapi_check.py SPEC < samples.json

samples.json is a JSON list of replies, each
  {"label": "...", "path": "/", "method": "post", "status": 202,
   "content_type": "application/json", "body": {...}}
For each, the script finds the response the spec names for that path, method and status
(following a response's $ref), the schema of that media type, and validates the body with
openapi-schema-validator's OAS 3.1 validator (JSON Schema 2020-12 and the OAS dialect),
formats included. $refs are resolved in the spec and in files beside it.

Prints a JSON list, one entry a sample: {"label": "...", "problems": ["...", ...]};
no problems means the reply matches the spec.
"""

import json
import pathlib
import sys

import yaml
from openapi_schema_validator import OAS31Validator, oas31_format_checker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012


def load(path):
    text = pathlib.Path(path).read_text()
    return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)


def registry_for(spec_path):
    def retrieve(uri):
        if not uri.startswith("file://"):
            raise LookupError(f"only files beside the spec are resolved, not {uri}")
        contents = load(pathlib.Path(uri[len("file://"):]))
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    return Registry(retrieve=retrieve)


def escape(segment):
    return segment.replace("~", "~0").replace("/", "~1")


def check(spec, base, registry, sample):
    """The problems of one sample: an undocumented reply, or its body's schema errors."""
    where = f"{sample['method'].upper()} {sample['path']} {sample['status']}"
    operation = spec.get("paths", {}).get(sample["path"], {}).get(sample["method"])
    if operation is None:
        return [f"{sample['method'].upper()} {sample['path']} is not in the spec"]
    status = str(sample["status"])
    response = operation.get("responses", {}).get(status)
    pointer = f"/paths/{escape(sample['path'])}/{sample['method']}/responses/{status}"
    if response is None:
        return [f"{where}: the spec documents no such status"]
    if "$ref" in response:
        ref = response["$ref"]
        if not ref.startswith("#/"):
            return [f"{where}: only local response $refs are followed, not {ref}"]
        pointer = ref[1:]
        response = spec
        for segment in pointer.strip("/").split("/"):
            response = response[segment.replace("~1", "/").replace("~0", "~")]
    content = response.get("content")
    if content is None:
        return [f"{where}: the spec describes no body for it"]
    media = sample["content_type"].split(";")[0].strip()
    if media not in content:
        return [f"{where}: content type {media} is not one of {sorted(content)}"]
    pointer += f"/content/{escape(media)}/schema"
    validator = OAS31Validator(
        {"$ref": f"{base}#{pointer}"},
        registry=registry,
        format_checker=oas31_format_checker,
    )
    return [describe(where, error) for error in validator.iter_errors(sample["body"])]


def depth(error):
    """How deep into the body an error, or any of its branches, got."""
    return max([len(error.absolute_path)] + [depth(e) for e in error.context])


def describe(where, error):
    """An error, down to the branch that got deepest into the body when it is a oneOf's."""
    while error.context:
        error = max(error.context, key=depth)
    at = "/".join(map(str, error.absolute_path)) or "the root"
    return f"{where}: at {at}: {error.message}"


def main():
    spec_path = pathlib.Path(sys.argv[1]).resolve()
    spec = load(spec_path)
    base = spec_path.as_uri()
    registry = registry_for(spec_path).with_resource(
        base, Resource.from_contents(spec, default_specification=DRAFT202012)
    )
    samples = json.load(sys.stdin)
    results = [
        {"label": s["label"], "problems": check(spec, base, registry, s)} for s in samples
    ]
    json.dump(results, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
