#!/usr/bin/env python3
"""Checks the internal links of a built book: every relative href or src of its HTML pages must
name a file of the book, and every #fragment an id (or a name) in the page it points to.
Links with a scheme (https:, mailto:) are not followed. Exit 1 naming each broken link.

    links.py BOOK_DIR     check the book built in BOOK_DIR
    links.py --self-test  check a small book with one good and two broken links, and fail
                          unless exactly the two broken ones are reported
"""
import os
import sys
import tempfile
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

# The attributes that point somewhere, by tag.
POINTERS = {"a": "href", "link": "href", "img": "src", "script": "src", "iframe": "src"}


class Page(HTMLParser):
    """The ids a page defines and the links it makes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []
        self.base = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key) and (key == "id" or tag == "a"):
                self.ids.add(attrs[key])
        if tag == "base" and attrs.get("href"):
            self.base = attrs["href"]
        target = attrs.get(POINTERS.get(tag, ""))
        if target is not None:
            self.links.append(target)


def read(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    return page


def broken_links(root):
    """(page, link, what is wrong) for every broken internal link under root."""
    root = os.path.abspath(root)
    pages = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                pages[path] = read(path)
    broken = []
    for path, page in sorted(pages.items()):
        for link in page.links:
            problem = judge(root, path, page, link, pages)
            if problem:
                broken.append((os.path.relpath(path, root), link, problem))
    return broken


def judge(root, path, page, link, pages):
    parts = urlsplit(link)
    if parts.scheme or link.startswith("//"):
        return None
    if parts.path:
        if parts.path.startswith("/"):
            base = root
            rel = parts.path.lstrip("/")
        else:
            # A page with <base href="/..."> (mdBook's 404 page) resolves from the book's root.
            base = root if (page.base or "").startswith("/") else os.path.dirname(path)
            rel = parts.path
        target = os.path.normpath(os.path.join(base, unquote(rel)))
        if os.path.isdir(target):
            target = os.path.join(target, "index.html")
        if not target.startswith(root + os.sep) and target != root:
            return "points outside the book"
        if not os.path.exists(target):
            return "no such file: " + os.path.relpath(target, root)
    else:
        target = path
    if parts.fragment and target.endswith(".html"):
        ids = pages[target].ids if target in pages else read(target).ids
        if unquote(parts.fragment) not in ids:
            return "no id %r in %s" % (unquote(parts.fragment), os.path.relpath(target, root))
    return None


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "guide"))
        with open(os.path.join(root, "index.html"), "w") as f:
            f.write('<h1 id="top">t</h1><a href="guide/a.html#here">good</a>'
                    '<a href="guide/missing.html">no file</a><a href="https://example.com/x">out</a>')
        with open(os.path.join(root, "guide", "a.html"), "w") as f:
            f.write('<h2 id="here">h</h2><a href="../index.html#top">good</a>'
                    '<a href="#nowhere">no anchor</a>')
        found = sorted((page, link) for page, link, _ in broken_links(root))
    expected = [("guide/a.html", "#nowhere"), ("index.html", "guide/missing.html")]
    if found != expected:
        print("links.py self-test: expected %s, found %s" % (expected, found), file=sys.stderr)
        return 1
    print("links.py self-test: the two broken links of the sample were found, and only they")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    broken = broken_links(argv[1])
    for page, link, problem in broken:
        print("%s: broken link %s (%s)" % (page, link, problem), file=sys.stderr)
    if broken:
        print("links.py: %d broken link(s) in %s" % (len(broken), argv[1]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
