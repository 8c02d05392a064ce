"""Stop with savepoint (Flink's ``stop --savepointPath``): finish the running batch, stop
the query, savepoint its last snapshot.

Spark has no graceful stop: ``StreamingQuery.stop()`` interrupts a running batch. So
:func:`stop_with_savepoint`

1. waits until no trigger is active (the running batch has committed: its snapshot is
   complete, in the sink and in Spark's commit log);
2. stops the query;
3. savepoints the newest completed snapshot (Spark's newest ``commits/N``).

If a batch started between 1 and 2 its interrupted attempt is not in the savepoint:
nothing of it is lost, the restored query runs it again (the sink's idempotency covers
an attempt that reached the table).

From another process (``spark-chkpt savepoint stop``): :func:`request_stop` writes
``<checkpoint>/chkpt/stop-request.json`` and waits for the answer in
``stop-result.json``; the program running the query watches for the request with
:class:`StopRequests` (the project's jobs do). A request carries a deadline: one that
nobody answered in time is ignored, never acted on later.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from spark_chkpt.deadline import Deadline
from spark_chkpt.fs import Location, qualify, resolve
from spark_chkpt.savepoint.manifest import (
    Savepoint,
    SavepointError,
    create_savepoint,
    load_savepoint,
)
from spark_chkpt.state.operators import committed_batches

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

REQUEST_FILE = "chkpt/stop-request.json"
RESULT_FILE = "chkpt/stop-result.json"


def checkpoint_of(query: StreamingQuery) -> str:
    """The query's resolved checkpoint location (Spark keeps it on the JVM side only)."""
    from spark_chkpt.runtime.connect import is_connect

    if is_connect(query):
        raise SavepointError(
            "cannot tell a Spark Connect query's checkpoint location (Spark keeps it in "
            "the server's JVM): pass checkpoint_location="
        )
    try:
        return qualify(str(query._jsq.streamingQuery().resolvedCheckpointRoot()))
    except Exception as e:  # a query of a stopped session
        raise SavepointError(
            "cannot tell this query's checkpoint location: pass checkpoint_location="
        ) from e


def stop_with_savepoint(
    query: StreamingQuery,
    *,
    savepoint_dir: str,
    checkpoint_location: str | None = None,
    table: str | None = None,
    timeout_s: float = 600.0,
) -> Savepoint:
    """Let the running batch finish, stop ``query`` and savepoint its last snapshot into
    ``savepoint_dir`` (see the module docstring). ``timeout_s`` bounds the wait for the
    batch; past it the query is stopped anyway (the interrupted batch runs again after
    a restore)."""
    location = qualify(checkpoint_location) if checkpoint_location else checkpoint_of(query)
    # Step 1
    deadline = Deadline.after(seconds=timeout_s)
    while query.isActive and query.status.get("isTriggerActive") and not deadline.expired():
        time.sleep(0.05)
    # Step 2
    query.stop()
    committed = committed_batches(checkpoint_location=location)
    planned = sorted(
        int(i.base_name) for i in resolve(location).child("offsets").list() if i.base_name.isdigit()
    )
    if committed and planned and planned[-1] > committed[-1]:
        log.warning(
            "stop with savepoint: batch %d had started and was interrupted; it is not in the "
            "savepoint and runs again after a restore",
            planned[-1],
        )
    # Step 3
    return create_savepoint(
        checkpoint_location=location, savepoint_dir=savepoint_dir, table=table, reason="stop"
    )


class StopRequests:
    """Watches a running query's checkpoint for ``spark-chkpt savepoint stop`` requests
    and answers one with :func:`stop_with_savepoint` (a daemon thread)."""

    def __init__(
        self,
        query: StreamingQuery,
        *,
        checkpoint_location: str,
        table: str | None = None,
        poll_s: float = 1.0,
    ) -> None:
        self.query = query
        self.location = qualify(checkpoint_location)
        self.table = table
        self.poll_s = poll_s
        self.root: Location = resolve(self.location)
        self._thread = threading.Thread(target=self._run, name="chkpt-stop-requests", daemon=True)

    def start(self) -> StopRequests:
        self._thread.start()
        return self

    def join(self, timeout_s: float = 900.0) -> None:
        """Wait for the watcher once the query has ended: a savepoint it is writing
        (after stopping the query) must be finished before the program exits."""
        self._thread.join(timeout_s)

    def _run(self) -> None:
        request_path = self.root.child(*REQUEST_FILE.split("/"))
        while self.query.isActive:
            time.sleep(self.poll_s)
            try:
                request = json.loads(request_path.read_text())
            except (FileNotFoundError, ValueError):
                continue
            request_path.delete()
            if int(request.get("deadline_ms", 0)) < time.time() * 1000:
                log.warning("ignoring an expired stop request: %s", request)
                continue
            answer: dict[str, Any] = {"id": request.get("id")}
            try:
                point = stop_with_savepoint(
                    self.query,
                    savepoint_dir=str(request["savepoint_dir"]),
                    checkpoint_location=self.location,
                    table=self.table,
                )
                answer["savepoint"] = point.location
            except Exception as e:  # the requester prints it; the query is stopped or not
                log.exception("stop with savepoint failed")
                answer["error"] = str(e)
            self.root.child(*RESULT_FILE.split("/")).write_atomic(json.dumps(answer) + "\n")
            return


def request_stop(
    *, checkpoint_location: str, savepoint_dir: str, timeout_s: float = 600.0
) -> Savepoint:
    """Ask the program running the query at ``checkpoint_location`` to stop it with a
    savepoint into ``savepoint_dir``; wait for the answer."""
    location = qualify(checkpoint_location)
    root = resolve(location)
    if not root.child("metadata").exists():
        raise SavepointError(f"{location} is not a Spark streaming checkpoint location")
    request_id = uuid.uuid4().hex
    deadline = Deadline.after(seconds=timeout_s)
    request = {
        "id": request_id,
        "savepoint_dir": qualify(savepoint_dir),
        "requested_ms": int(time.time() * 1000),
        "deadline_ms": int((time.time() + timeout_s) * 1000),
    }
    request_path = root.child(*REQUEST_FILE.split("/"))
    result_path = root.child(*RESULT_FILE.split("/"))
    request_path.write_atomic(json.dumps(request) + "\n")
    while not deadline.expired():
        time.sleep(0.5)
        try:
            answer = json.loads(result_path.read_text())
        except (FileNotFoundError, ValueError):
            continue
        if answer.get("id") != request_id:
            continue
        result_path.delete()
        if "error" in answer:
            raise SavepointError(f"stop with savepoint of {location} failed: {answer['error']}")
        return load_savepoint(location=str(answer["savepoint"]))
    request_path.delete()
    raise SavepointError(
        f"no running query answered the stop request on {location} within {timeout_s:.0f} s. "
        "The program running it must watch for requests (spark_chkpt.savepoint.stop"
        ".StopRequests; the project's jobs do); or call stop_with_savepoint(query, ...) in "
        "it, or stop the query and run spark-chkpt savepoint create."
    )
