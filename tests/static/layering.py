#!/usr/bin/env python3
"""The libraries' dependencies point one way: a file of a library includes only
headers of that library or of the libraries it links (directly or through
them). Read from the CMakeLists.txt files themselves, so a new library or a
new link is checked without editing this script.

A header belongs to the library that lists it among its sources, else to the
first library of the CMakeLists.txt in the nearest folder above it; generated headers belong to ktune_messages (ktune/v1/ktune.pb.h) or ktune_proto (the rest of ktune/v1/), the
embedded template texts to ktune_kernel_texts. tests/ and bench/ link what
they test and are not checked. Exits 1 listing each include that crosses a
missing link, and fails its own canary: a file that includes what its
library does not link must be reported.
"""
import argparse, os, re, sys

SKIP_DIRS = {'tests', 'bench', 'build', '.git', '.gpu'}
# First match wins: ktune.pb.h (the messages alone) before the rest of ktune/v1/.
GENERATED = {'ktune/v1/ktune.pb.h': 'ktune_messages', 'ktune/v1/': 'ktune_proto', 'grpc/health/': 'ktune_health_proto',
             'kernel_templates/embedded.h': 'ktune_kernel_texts'}

def strip_comments(text):
    return re.sub(r'#[^\n]*', '', text)

def parse_cmake(source):
    """-> (libs: name -> folder, links: name -> set(ktune deps), owned: name -> set(files))"""
    libs, links, owned = {}, {}, {}
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(('build', '.'))]
        if 'CMakeLists.txt' not in files:
            continue
        rel = os.path.relpath(root, source)
        text = strip_comments(open(os.path.join(root, 'CMakeLists.txt')).read())
        for m in re.finditer(r'add_(library|executable)\(\s*([\w-]+)([^)]*)\)', text):
            name, args = m.group(2), m.group(3).split()
            libs[name] = rel
            links.setdefault(name, set())
            owned.setdefault(name, set()).update(
                os.path.normpath(os.path.join(rel, a)) for a in args if a.endswith(('.cc', '.h')))
            # A library made of another's objects ($<TARGET_OBJECTS:x>) offers x's headers.
            links[name].update(re.findall(r'\$<TARGET_OBJECTS:(ktune_\w+)>', m.group(3)))
        for m in re.finditer(r'target_sources\(\s*([\w-]+)([^)]*)\)', text):
            owned.setdefault(m.group(1), set()).update(
                os.path.normpath(os.path.join(rel, a)) for a in m.group(2).split() if a.endswith(('.cc', '.h')))
        for m in re.finditer(r'target_link_libraries\(\s*([\w-]+)([^)]*)\)', text):
            links.setdefault(m.group(1), set()).update(w for w in m.group(2).split() if w.startswith('ktune_'))
    return libs, links, owned

def closure(name, links):
    seen, stack = set(), [name]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(links.get(n, ()))
    return seen

def folder_owner(path, libs_by_folder):
    d = os.path.dirname(path)
    while True:
        if d in libs_by_folder:
            return libs_by_folder[d]
        if not d or d == '.':
            return None
        d = os.path.dirname(d)

def check(source):
    libs, links, owned = parse_cmake(source)
    # A folder's headers belong to its library (the first add_library there).
    libs_by_folder = {}
    for name, folder in libs.items():
        if name.startswith('ktune_') and folder not in libs_by_folder:
            libs_by_folder[folder] = name
    file_owner = {}
    for name, files in owned.items():
        for f in files:
            file_owner[f] = name
    def owner_of_header(inc):
        for prefix, lib in GENERATED.items():
            if inc.startswith(prefix):
                return lib
        if not os.path.isfile(os.path.join(source, inc)):
            return None  # a system or third-party header
        if inc in file_owner:  # listed in a library's sources: that library's
            return file_owner[inc]
        return folder_owner(inc, libs_by_folder)
    problems = []
    for name, files in owned.items():
        allowed = closure(name, links)
        # the library's sources and the headers of its folder
        folder = libs.get(name)
        candidates = set(files)
        if folder is not None and libs_by_folder.get(folder) == name:
            for f in os.listdir(os.path.join(source, folder)):
                header = os.path.normpath(os.path.join(folder, f))
                if f.endswith('.h') and file_owner.get(header, name) == name:
                    candidates.add(header)
        for f in sorted(candidates):
            path = os.path.join(source, f)
            if not os.path.isfile(path):
                continue
            for lineno, line in enumerate(open(path, encoding='utf-8'), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                lib = owner_of_header(m.group(1))
                if lib is not None and lib not in allowed:
                    problems.append(f'{f}:{lineno}: {name} includes {m.group(1)} of {lib}, which it does not link')
    return problems, libs

def canary():
    """A two-library tree where a's file includes b's header without linking b:
    the check must report exactly that include, and nothing in b."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            open(os.path.join(root, path), 'w').write(text)
        write('a/CMakeLists.txt', 'add_library(ktune_a STATIC a.cc)\n')
        write('a/a.h', '#pragma once\n')
        write('a/a.cc', '#include "a/a.h"\n#include "b/b.h"  // a does not link b\n')
        write('b/CMakeLists.txt', 'add_library(ktune_b STATIC b.cc)\ntarget_link_libraries(ktune_b PUBLIC ktune_a)\n')
        write('b/b.h', '#pragma once\n#include "a/a.h"\n')
        write('b/b.cc', '#include "b/b.h"\n')
        problems, _ = check(root)
        expected = ['a/a.cc:2: ktune_a includes b/b.h of ktune_b, which it does not link']
        if problems != expected:
            print(f'canary: expected {expected}, got {problems}', file=sys.stderr)
            return False
    return True

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--source', required=True)
    args = ap.parse_args()
    if not canary():
        return 1
    problems, libs = check(args.source)
    for p in problems:
        print(p)
    n = len([l for l in libs if l.startswith('ktune_')])
    if problems:
        print(f'{len(problems)} include(s) cross a missing link', file=sys.stderr)
        return 1
    print(f'ok: {n} libraries, every include within what its library links')
    return 0

if __name__ == '__main__':
    sys.exit(main())
