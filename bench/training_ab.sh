#!/bin/sh
# Two checkouts of fpemu compared on the training sweep, alternated (old, new, old, new), one process each,
# each with its own bench/training_sweep.py (since e0871e7 that is `fpemu sweep`; before, the same
# measurement and models in the script itself: the same programs). Prints the sweep's tables.
#
#   bench/training_ab.sh OLD_CHECKOUT [NEW_CHECKOUT] [sweep options...]
#   e.g. git worktree add --detach /tmp/old 0e31360 && bench/training_ab.sh /tmp/old . --model mlp --rounds 7
#
# Run it on a quiet machine: the step and compile times are as noisy as the load.
set -eu
old=$(cd "$1" && pwd)
new=$(cd "${2:-.}" && pwd)
[ $# -ge 2 ] && shift 2 || shift 1
python=${PYTHON:-python3}
for i in 1 2; do
  for side in old new; do
    tree=$old; [ "$side" = new ] && tree=$new
    echo "=== $side ($tree), run $i"
    PYTHONPATH="$tree" timeout 1800 "$python" "$tree/bench/training_sweep.py" "$@" 2>/dev/null
  done
done
