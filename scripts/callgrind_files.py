#!/usr/bin/env python3
"""The project's source files a callgrind profile says ran, each with the functions that ran
in it: `callgrind_files.py <callgrind.out> <checkout>`. A file counts when instructions of its
own (self cost, at a real line) ran; code at line 0 (generics of other crates compiled into
ours) does not. Used by scripts/trace-run.sh."""
import collections
import re
import sys


def files_run(path, roots):
    tables = {"fl": {}, "fn": {}}

    def name(kind, value):
        # Callgrind compresses names: "(7) name" the first time, "(7)" after.
        m = re.match(r"\((\d+)\)(?: (.*))?$", value)
        if not m:
            return value
        table = tables["fn" if kind in ("fn", "cfn") else "fl"]
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table[m.group(1)]

    file = function = None
    inlined = None
    after_calls = False
    line_no = 0
    ran = collections.defaultdict(collections.Counter)
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(fl|fi|fe|fn|cfl|cfi|cfn|ob|cob)=(.*)$", line)
        if m:
            kind, value = m.group(1), name(m.group(1), m.group(2))
            if kind == "fl":
                file, inlined = value, None
            elif kind in ("fi", "fe"):
                inlined = value
            elif kind == "fn":
                function, inlined = value, None
            continue
        if line.startswith("calls="):
            after_calls = True
            continue
        if line[0].isdigit() or line[0] in "+-*":
            fields = line.split()
            pos = fields[0]
            line_no = line_no if pos == "*" else (line_no + int(pos) if pos[0] in "+-" else int(pos))
            if after_calls:  # the cost of a call: the callee's, not this line's
                after_calls = False
                continue
            cost = sum(int(x) for x in fields[1:] if x.isdigit())
            where = inlined or file
            if cost and line_no and where and where.startswith(roots):
                ran[where][re.sub(r"::h[0-9a-f]{16}", "", function)] += cost
    return ran


if __name__ == "__main__":
    profile, checkout = sys.argv[1], sys.argv[2].rstrip("/") + "/"
    ran = files_run(profile, (checkout + "shared/src/", checkout + "functions/"))
    print(f"{len(ran)} files of the project ran")
    for file in sorted(ran):
        print(f"{file[len(checkout):]}: {', '.join(sorted(ran[file]))}")
