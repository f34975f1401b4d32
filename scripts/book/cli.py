#!/usr/bin/env python3
"""Writes the book's CLI reference from the command itself: `event-bridge --help`, and the
--help of every subcommand it lists (and of theirs), as clap renders them. Run by
scripts/book/build.sh before mdBook, so the page cannot drift from the code.

    cli.py BINARY OUT.md
"""
import subprocess
import sys


def help_of(binary, path):
    out = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "NO_COLOR": "1"})
    return out.stdout.rstrip() + "\n"


def subcommands(text):
    """The names under `Commands:` in a help text (clap indents them by two spaces)."""
    names, inside = [], False
    for line in text.splitlines():
        if line.strip() == "Commands:":
            inside = True
        elif inside and line.startswith("  ") and not line.startswith("   "):
            name = line.split()[0]
            if name != "help":
                names.append(name)
        elif inside and line.strip() and not line.startswith(" "):
            inside = False
    return names


def render(binary, path, out):
    text = help_of(binary, path)
    title = " ".join(["event-bridge", *path])
    out.append("%s `%s`\n\n```text\n%s```\n" % ("#" * min(len(path) + 2, 4), title, text))
    for name in subcommands(text):
        render(binary, [*path, name], out)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    out = []
    render(argv[1], [], out)
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
