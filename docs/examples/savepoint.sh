#!/usr/bin/env bash
# Savepoints of the page-view counts (stateful.py's complete query, checkpoint under
# $WORK/chk/pv_complete): create one, list them, show one, fork it into a new checkpoint.
set -euo pipefail
WORK=${WORK:-/tmp/spark-chkpt-examples}

# --8<-- [start:create]
spark-chkpt savepoint create "$WORK/chk/pv_complete" --dir "$WORK/savepoints"
spark-chkpt savepoint list "$WORK/savepoints"
# --8<-- [end:create]
# the newest savepoint's folder: $WORK/savepoints/savepoint-<batch>-<time>-<id>
NAME=$(spark-chkpt savepoint list "$WORK/savepoints" --json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)[-1]["savepoint"])')
SAVEPOINT="$WORK/savepoints/$NAME"
# --8<-- [start:show]
spark-chkpt savepoint show "$SAVEPOINT"
# --8<-- [end:show]
# --8<-- [start:fork]
spark-chkpt savepoint restore "$SAVEPOINT" --mode fork \
    --checkpoint "$WORK/chk/pv_complete_fork" --table "$WORK/tables/pv_complete_fork"
# --8<-- [end:fork]
