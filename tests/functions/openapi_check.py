#!/usr/bin/env python3
"""Checks HTTP replies against the OpenAPI 3.1 document that describes them.

Usage: openapi_check.py SPEC < samples.json
       openapi_check.py SPEC --documented

samples.json is a JSON list of replies, each
  {"label": "...", "path": "/", "method": "post", "status": 202,
   "content_type": "application/json", "body": {...}, "headers": {"allow": "..."}}
For each, the script finds the response the spec names for that path, method and status
(following a response's $ref), the schema of that media type, and validates the body with
openapi-schema-validator's OAS 3.1 validator (JSON Schema 2020-12 and the OAS dialect),
formats included. $refs are resolved in the spec and in files beside it. When a sample has
"headers" (names in lower case), the headers the response documents are checked too: a
required one must be there, and each one there must match its schema. A reply to HEAD may come
without "body" (over HTTP it carries none); any other reply must have one. A response the spec
marks `x-answered-by` (the Function URL's 403, AWS's own) is never the function's: a sample of
one is a problem.

Prints a JSON list, one entry a sample:
  {"label": "...", "problems": ["...", ...], "variants": ["PublishAnswer:Duplicate", ...]}
no problems means the reply matches the spec. "variants" names each oneOf branch the body (or
a part of it) matched, as "<site>:<branch>": the site is the nearest named component (a schema,
or the response whose schema it is), the branch its $ref's name, else the value its `state`
takes (const or enum), else "null" for a null branch, else its index.

With --documented, prints what the spec documents instead:
  {"responses": [{"path", "method", "status", "answered_by"}...],
   "variants": {"<site>": ["<branch>", ...]}}
`answered_by` is the response's `x-answered-by` (null: the function answers it).
"""

import json
import pathlib
import sys

import yaml
from openapi_schema_validator import OAS31Validator, oas31_format_checker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


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


def at(spec, pointer):
    """The node at a JSON pointer (`/a/b`) of the spec."""
    node = spec
    for segment in pointer.strip("/").split("/"):
        segment = segment.replace("~1", "/").replace("~0", "~")
        node = node[int(segment)] if isinstance(node, list) else node[segment]
    return node


def response_of(spec, path, method, status):
    """The response the spec names, the pointer it is at (after a local $ref) and its name
    (the component's, or None), or a problem."""
    operation = spec.get("paths", {}).get(path, {}).get(method)
    if operation is None:
        return None, f"{method.upper()} {path} is not in the spec"
    response = operation.get("responses", {}).get(str(status))
    if response is None:
        return None, f"{method.upper()} {path} {status}: the spec documents no such status"
    pointer = f"/paths/{escape(path)}/{method}/responses/{status}"
    name = None
    if "$ref" in response:
        ref = response["$ref"]
        if not ref.startswith("#/"):
            return None, f"{method.upper()} {path} {status}: only local $refs, not {ref}"
        pointer = ref[1:]
        name = pointer.rsplit("/", 1)[-1]
        response = at(spec, pointer)
    return (response, pointer, name), None


class Checker:
    def __init__(self, spec_path):
        self.spec = load(spec_path)
        self.base = spec_path.as_uri()
        self.registry = registry_for(spec_path).with_resource(
            self.base, Resource.from_contents(self.spec, default_specification=DRAFT202012)
        )

    def validator(self, pointer):
        return OAS31Validator(
            {"$ref": f"{self.base}#{pointer}"},
            registry=self.registry,
            format_checker=oas31_format_checker,
        )

    def check(self, sample):
        """The problems of one sample (an undocumented reply, its headers' and body's schema
        errors) and the oneOf branches its body matched."""
        method, path, status = sample["method"], sample["path"], sample["status"]
        where = f"{method.upper()} {path} {status}"
        found, problem = response_of(self.spec, path, method, status)
        if problem:
            return [problem], []
        response, pointer, name = found
        if "x-answered-by" in response:
            who = response["x-answered-by"]
            return [f"{where}: answered by {who}, never by the function"], []
        problems = self.headers(where, response, pointer, sample)
        content = response.get("content")
        if content is None:
            return problems + [f"{where}: the spec describes no body for it"], []
        media = sample["content_type"].split(";")[0].strip()
        if media not in content:
            return problems + [f"{where}: content type {media} is not one of {sorted(content)}"], []
        if sample.get("body") is None:
            if method != "head":
                problems.append(f"{where}: no body")
            return problems, []
        pointer += f"/content/{escape(media)}/schema"
        errors = self.validator(pointer).iter_errors(sample["body"])
        problems += [describe(where, error) for error in errors]
        variants = set()
        if not problems:
            self.variants(pointer, sample["body"], name or "", variants)
        return problems, sorted(variants)

    def headers(self, where, response, pointer, sample):
        if "headers" not in sample:
            return []
        sent = {k.lower(): v for k, v in sample["headers"].items()}
        problems = []
        for header, described in response.get("headers", {}).items():
            value = sent.get(header.lower())
            if value is None:
                if described.get("required"):
                    problems.append(f"{where}: no {header} header")
                continue
            schema = f"{pointer}/headers/{escape(header)}/schema"
            for error in self.validator(schema).iter_errors(value):
                problems.append(describe(f"{where}: header {header}", error))
        return problems

    def variants(self, pointer, instance, site, out):
        """Records the oneOf branches `instance` matches below the schema at `pointer`."""
        node = at(self.spec, pointer)
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target = ref[1:]
            self.variants(target, instance, target.rsplit("/", 1)[-1], out)
        for i, _ in enumerate(node.get("allOf", [])):
            self.variants(f"{pointer}/allOf/{i}", instance, site, out)
        for i, branch in enumerate(node.get("oneOf", [])):
            branch_pointer = f"{pointer}/oneOf/{i}"
            if self.validator(branch_pointer).is_valid(instance):
                out.add(f"{site}:{matched_label(branch, i, instance)}")
                self.variants(branch_pointer, instance, site, out)
        if isinstance(instance, dict):
            for key, value in instance.items():
                if key in node.get("properties", {}):
                    self.variants(f"{pointer}/properties/{escape(key)}", value, site, out)
        if isinstance(instance, list) and isinstance(node.get("items"), dict):
            for value in instance:
                self.variants(f"{pointer}/items", value, site, out)

    def documented(self):
        responses = []
        for path, item in self.spec.get("paths", {}).items():
            for method in METHODS:
                for status in item.get(method, {}).get("responses", {}):
                    found, problem = response_of(self.spec, path, method, status)
                    if problem:
                        raise SystemExit(problem)
                    responses.append(
                        {
                            "path": path,
                            "method": method,
                            "status": int(status),
                            "answered_by": found[0].get("x-answered-by"),
                        }
                    )
        variants = {}
        components = self.spec.get("components", {})
        for name, schema in components.get("schemas", {}).items():
            one_of_labels(schema, variants.setdefault(name, []))
        for name, response in components.get("responses", {}).items():
            for media in response.get("content", {}).values():
                one_of_labels(media.get("schema", {}), variants.setdefault(name, []))
        return {
            "responses": responses,
            "variants": {site: labels for site, labels in variants.items() if labels},
        }


def labels_of(branch, i):
    """The names a oneOf branch's matches are recorded under."""
    if "$ref" in branch:
        return [branch["$ref"].rsplit("/", 1)[-1]]
    state = branch.get("properties", {}).get("state", {})
    if "const" in state:
        return [state["const"]]
    if "enum" in state:
        return list(state["enum"])
    if branch.get("type") == "null":
        return ["null"]
    return [str(i)]


def matched_label(branch, i, instance):
    labels = labels_of(branch, i)
    if len(labels) > 1 and isinstance(instance, dict) and instance.get("state") in labels:
        return instance["state"]
    return labels[0]


def one_of_labels(node, labels):
    """Every branch name of the oneOfs in a component (not following $refs)."""
    if isinstance(node, dict):
        for i, branch in enumerate(node.get("oneOf", [])):
            labels.extend(label for label in labels_of(branch, i) if label not in labels)
        for key, value in node.items():
            if key != "oneOf" or not isinstance(value, list):
                one_of_labels(value, labels)
        for branch in node.get("oneOf", []):
            one_of_labels(branch, labels)
    elif isinstance(node, list):
        for value in node:
            one_of_labels(value, labels)


def depth(error):
    """How deep into the body an error, or any of its branches, got."""
    return max([len(error.absolute_path)] + [depth(e) for e in error.context])


def describe(where, error):
    """An error, down to the branch that got deepest into the body when it is a oneOf's."""
    while error.context:
        error = max(error.context, key=depth)
    at_ = "/".join(map(str, error.absolute_path)) or "the root"
    return f"{where}: at {at_}: {error.message}"


def main():
    checker = Checker(pathlib.Path(sys.argv[1]).resolve())
    if sys.argv[2:] == ["--documented"]:
        json.dump(checker.documented(), sys.stdout, indent=1)
        return
    results = []
    for sample in json.load(sys.stdin):
        problems, variants = checker.check(sample)
        results.append({"label": sample["label"], "problems": problems, "variants": variants})
    json.dump(results, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
