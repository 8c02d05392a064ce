"""JVM artifacts from Maven Central: fetched once by ``make setup``, found at run time.

Each set is a ``pom.xml`` under ``jvm/<set>/`` that lists artifacts; ``make setup`` runs
``python -m spark_chkpt.runtime.jars fetch``, which copies each set's artifacts and their runtime
dependencies with ``mvn dependency:copy-dependencies`` into ``.cache/jars/<set>/``
(git-ignored), and prints what it fetched. A set whose folder holds the jars of the
pom as it is now (a stamp records the pom's hash) is not fetched again. The Spark
connectors are built per Spark line: their folder is ``spark-connectors-<line>`` of the
running pyspark, fetched with that line's Maven properties (``runtime/spark_version.py``).

More: docs/concepts/runtime.md (spark_chkpt/runtime/jars.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TextIO

from spark_chkpt.errors import JvmArtifactError

SETS = ("kafka-broker", "spark-connectors", "hadoop-aws")
# The sets handed to Spark: artifacts pyspark ships are left out of them.
_SPARK_SETS = ("spark-connectors", "hadoop-aws")
ENV = "SPARK_CHKPT_JARS_DIR"
STAMP = ".pom-sha256"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
# artifactId-version[-classifier].jar, the names copy-dependencies and pyspark's jars use
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*)(?:-[A-Za-z][\w.]*)?\.jar$")


def checkout_root() -> Path:
    """The checkout this package runs from (an editable install): the folder with ``jvm/``."""
    return Path(__file__).resolve().parents[2]


def pom_path(name: str) -> Path:
    return checkout_root() / "jvm" / name / "pom.xml"


def _properties(name: str) -> dict[str, str]:
    """The Maven properties a set is fetched with: the running Spark line's artifacts."""
    if name != "spark-connectors":
        return {}
    from spark_chkpt.runtime.spark_version import connector_coordinates

    return connector_coordinates()


def set_folder(name: str) -> Path:
    """Where a set's jars are: ``spark-connectors-<line>`` for the running Spark line."""
    if name != "spark-connectors":
        return cache_root() / name
    from spark_chkpt.runtime.spark_version import running_line

    return cache_root() / f"{name}-{running_line().line}"


def cache_root() -> Path:
    configured = os.environ.get(ENV)
    return Path(configured) if configured else checkout_root() / ".cache" / "jars"


def artifacts(name: str) -> list[str]:
    """``group:artifact:version`` of each dependency a set's pom lists."""
    pom = pom_path(name)
    if not pom.is_file():
        return [f"<the artifacts of jvm/{name}/pom.xml>"]
    root = ET.parse(pom).getroot()
    properties = _properties(name)

    def text(dep: ET.Element, field: str) -> str:
        value = dep.findtext(f"m:{field}", "", _POM_NS)
        return re.sub(r"\$\{([^}]+)\}", lambda m: properties.get(m[1], m[0]), value)

    return [
        f"{text(dep, 'groupId')}:{text(dep, 'artifactId')}:{text(dep, 'version')}"
        for dep in root.findall("m:dependencies/m:dependency", _POM_NS)
    ]


def jars(name: str) -> list[str]:
    """The jar paths of a fetched set, sorted; one clear error when it is not there."""
    folder = set_folder(name)
    found = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    if not found or not (folder / STAMP).is_file():
        raise JvmArtifactError(
            f"the jars of {', '.join(artifacts(name))} are not in {folder}: run `make setup` "
            f"(it fetches them with `python -m spark_chkpt.runtime.jars fetch`, which needs java "
            f"and mvn), or set {ENV} to a folder that holds '{name}/'"
        )
    return found


def spark_jars() -> str:
    """``spark.jars`` for a session with Spark's Kafka connector and delta-spark."""
    return ",".join(jars("spark-connectors"))


def s3a_jars() -> str:
    """``spark.jars`` entries for Hadoop's S3A filesystem (hadoop-aws, the AWS SDK bundle)."""
    return ",".join(jars("hadoop-aws"))


def _pom_digest(name: str) -> str:
    digest = hashlib.sha256(pom_path(name).read_bytes())
    for key, value in sorted(_properties(name).items()):
        digest.update(f"\n{key}={value}".encode())
    return digest.hexdigest()


def _pyspark_artifacts() -> set[str]:
    import pyspark

    folder = Path(pyspark.__file__).parent / "jars"
    names = set()
    for jar in folder.glob("*.jar"):
        match = _JAR_NAME.match(jar.name)
        if match:
            names.add(match["artifact"])
    return names


def _require(command: str) -> str:
    path = shutil.which(command)
    if not path:
        raise JvmArtifactError(
            f"fetching the JVM artifacts needs `{command}` on PATH (Java 17 and Maven 3.8): "
            "install it (Debian: apt-get install openjdk-17-jdk-headless maven) and run "
            "`make setup` again"
        )
    return path


def fetch(name: str, *, out: TextIO = sys.stdout) -> list[str]:
    """Copy a set's artifacts into the cache unless it already holds them; the jar names."""
    folder = set_folder(name)
    digest = _pom_digest(name)
    stamp = folder / STAMP
    if stamp.is_file() and stamp.read_text().strip() == digest and any(folder.glob("*.jar")):
        names = sorted(p.name for p in folder.glob("*.jar"))
        print(f"[jars] {name}: {len(names)} jars already in {folder}, nothing fetched", file=out)
        return names
    _require("java")
    mvn = _require("mvn")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}-") as tmp:
        command = [
            mvn, "-q", "-B", "-f", str(pom_path(name)), "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}", "-DincludeScope=runtime",
        ] + [f"-D{key}={value}" for key, value in _properties(name).items()]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise JvmArtifactError(
                f"could not fetch {', '.join(artifacts(name))}: `{' '.join(command)}` "
                f"exited {done.returncode}:\n{tail}"
            )
        fetched = sorted(p.name for p in Path(tmp).glob("*.jar"))
        skipped: list[str] = []
        if name in _SPARK_SETS:
            shipped = _pyspark_artifacts()
            for jar in list(fetched):
                match = _JAR_NAME.match(jar)
                if match and match["artifact"] in shipped:
                    (Path(tmp) / jar).unlink()
                    fetched.remove(jar)
                    skipped.append(jar)
        Path(tmp, STAMP).write_text(digest + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    print(f"[jars] {name}: fetched {', '.join(artifacts(name))} into {folder}:", file=out)
    for jar in fetched:
        print(f"[jars]   {jar}", file=out)
    if skipped:
        print(f"[jars]   left out (pyspark ships them): {', '.join(skipped)}", file=out)
    return fetched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_chkpt.runtime.jars", description="Fetch the project's JVM artifacts."
    )
    parser.add_argument("command", choices=["fetch", "path"])
    parser.add_argument("--set", dest="sets", action="append", choices=SETS)
    args = parser.parse_args(argv)
    try:
        for name in args.sets or SETS:
            if args.command == "fetch":
                fetch(name)
            else:
                print("\n".join(jars(name)))
    except JvmArtifactError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
