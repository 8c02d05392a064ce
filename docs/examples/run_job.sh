#!/usr/bin/env bash
# The Kafka -> Delta job of the wheel, run once over what the topic holds, then its
# snapshot records. Settings not given here come from conf/kafka_to_delta.properties
# (./conf/ when it exists, else the copy installed with the wheel).
set -euo pipefail
WORK=${WORK:-/tmp/spark-chkpt-examples}

# --8<-- [start:run]
spark-chkpt-kafka-to-delta --bootstrap-servers "$BOOTSTRAP_SERVERS" --topic "$TOPIC" \
    --table "$WORK/tables/page_views" --checkpoint "$WORK/chk/page_views" \
    --trigger availableNow --master "local[2]"
spark-chkpt snapshots "$WORK/chk/page_views"
# --8<-- [end:run]
