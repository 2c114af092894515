#!/usr/bin/env bash
# Copy a source tree as a clean checkout of it holds: tracked and untracked files,
# uncommitted edits included, not the .gitignore'd ones (an in-place .so, _core.c,
# .venv, build/, node_modules). Outside git, the same left out by name.
#
#   tools/copy-tree.sh SRC DEST
#
# The scripts in tools/ that build somewhere else than the checkout copy the tree with
# it, as cibuildwheel copies the project.
set -euo pipefail
(( $# == 2 )) || { echo "usage: $0 SRC DEST" >&2; exit 2; }
src=$1
dest=$2
mkdir -p "$dest"
if git -c safe.directory='*' -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    (cd "$src" && git -c safe.directory='*' ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done \
        | tar --null -T - -cf -) | tar -xf - -C "$dest"
else
    tar -C "$src" --exclude=.git --exclude=.venv --exclude=build --exclude=dist \
        --exclude='*.so' --exclude=node_modules --exclude=__pycache__ --exclude=.hypothesis \
        --exclude=.pytest_cache --exclude=_core.c -cf - . | tar -xf - -C "$dest"
fi
