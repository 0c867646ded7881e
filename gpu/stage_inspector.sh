#!/usr/bin/env bash
# Stage NCCL Inspector's public source for gpu/nccl_inspector.sh (the GPU machine has no network).
#   bash gpu/stage_inspector.sh NCCL_GIT_DIR [REV]
# copies plugins/profiler/inspector (or ext-profiler/inspector in older trees) of NCCL's repository
# at REV (default HEAD) into third_party_src/nccl-inspector/, untracked and not ignored, so that it
# travels with the working tree; it is never committed (remove it after the run).
set -euo pipefail
cd "$(dirname "$0")/.."
git_dir=${1:?usage: gpu/stage_inspector.sh NCCL_GIT_DIR [REV]}
rev=${2:-HEAD}
dest=third_party_src/nccl-inspector
for sub in plugins/profiler/inspector ext-profiler/inspector; do
  if git --git-dir "$git_dir" cat-file -e "$rev:$sub" 2>/dev/null; then
    rm -rf "$dest" && mkdir -p "$dest"
    git --git-dir "$git_dir" archive "$rev" "$sub" | tar -x -C "$dest" --strip-components=$(echo "$sub" | tr -cd / | wc -c | awk '{print $1+1}')
    echo "staged $sub of $(git --git-dir "$git_dir" rev-parse "$rev") into $dest ($(find "$dest" -type f | wc -l) files)"
    exit 0
  fi
done
echo "stage_inspector: no Inspector source in $git_dir at $rev" >&2
exit 1
