#!/usr/bin/env python3
"""README.md and the documentation may only point inside the repository:
a clone has nothing beside it. Fails (exit 1, saying file, line and link)
on a markdown link or reference whose target leaves the repository (an
absolute path, or ../ past its root), on a relative link to a file that
is not there, and on any mention of ../shared.

    check_links.py SOURCE_ROOT
"""
import os
import re
import sys

root = os.path.realpath(sys.argv[1])
# the pages a reader of the repository reads: README.md, docs/, and the
# README of each folder
pages = [os.path.join(root, "README.md")]
for folder, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if not d.startswith(".") and
               not os.path.exists(os.path.join(folder, d, "meson-private"))]
    for name in files:
        path = os.path.join(folder, name)
        if name.endswith(".md") and path not in pages:
            pages.append(path)

INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:
problems = []


def check_target(page, number, target):
    if EXTERNAL.match(target) or target.startswith("#"):
        return
    path = target.split("#")[0]
    if path.startswith("/"):
        problems.append((page, number, target, "an absolute path"))
        return
    full = os.path.realpath(os.path.join(os.path.dirname(page), path))
    if os.path.commonpath([full, root]) != root:
        problems.append((page, number, target, "outside the repository"))
    elif not os.path.exists(full):
        problems.append((page, number, target, "no such file in the repository"))


for page in pages:
    in_code = False
    for number, line in enumerate(open(page, encoding="utf-8"), 1):
        if "../shared" in line:
            problems.append((page, number, "../shared", "a folder outside the repository"))
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for target in INLINE.findall(line):
            check_target(page, number, target)
        m = REFERENCE.match(line)
        if m:
            check_target(page, number, m.group(1))

for page, number, target, why in problems:
    print("%s:%d: %s: %s" % (os.path.relpath(page, root), number, target, why))
print("%d pages checked, %d problem(s)" % (len(pages), len(problems)))
sys.exit(1 if problems else 0)
