"""Bytecode added to the zips Spark puts on its workers' path
(spark_chkpt.runtime.worker_bytecode): a process importing from the zip runs the added
bytecode, gets the same module, tracebacks naming the source as before; a second run
changes nothing; a Python of another version is not misled."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from spark_chkpt.runtime.worker_bytecode import add_bytecode, main, worker_zips

PACKAGE = {
    "pkg/__init__.py": "VALUE = 41\n",
    "pkg/mod.py": (
        "from pkg import VALUE\n\n"
        "def answer():\n    return VALUE + 1\n\n"
        "def fail():\n    raise ValueError('from the zip')\n"
    ),
    "pkg/data.txt": "not code\n",
}

PROBE = r"""
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import pkg.mod
try:
    pkg.mod.fail()
except ValueError:
    frame = traceback.extract_tb(sys.exc_info()[2])[-1]
print(json.dumps({
    "file": pkg.mod.__file__, "init": sys.modules["pkg"].__file__,
    "answer": pkg.mod.answer(), "frame": [frame.filename, frame.line],
}))
"""


def make_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in PACKAGE.items():
            archive.writestr(name, text)
    return path


def probe(path: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True
    )
    out: dict[str, object] = json.loads(done.stdout)
    return out


def test_the_zip_gains_bytecode_that_imports_the_same_code(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "pyspark.zip")
    before = probe(path)
    assert str(before["file"]).endswith("pkg/mod.py")

    done = add_bytecode(path=path)
    assert (done.compiled, done.present) == (2, 0)
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        assert archive.read("pkg/data.txt") == b"not code\n"
    assert names == set(PACKAGE) | {"pkg/__init__.pyc", "pkg/mod.pyc"}

    after = probe(path)
    assert str(after["file"]).endswith("pkg/mod.pyc")
    assert str(after["init"]).endswith("pkg/__init__.pyc")
    assert after["answer"] == before["answer"] == 42
    # the traceback names the source in the zip, as zipimport's own compile does
    assert after["frame"] == before["frame"]
    assert after["frame"] == [str(path / "pkg" / "mod.py"), "raise ValueError('from the zip')"]

    again = add_bytecode(path=path)
    assert (again.compiled, again.present) == (0, 2)


def test_bytecode_of_another_python_is_ignored(tmp_path: Path) -> None:
    """A worker Python of another version reads a magic number it does not know and
    compiles the source, as it did before."""
    path = make_zip(tmp_path / "pyspark.zip")
    add_bytecode(path=path)
    with zipfile.ZipFile(path) as archive:
        entries = {n: archive.read(n) for n in archive.namelist()}
    foreign = {
        n: (b"\x00\x00\r\n" + d[4:] if n.endswith(".pyc") else d) for n, d in entries.items()
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in foreign.items():
            archive.writestr(name, data)
    out = probe(path)
    assert str(out["file"]).endswith("pkg/mod.py") and out["answer"] == 42


def test_the_command_finds_the_spark_homes_zips(tmp_path: Path) -> None:
    lib = tmp_path / "python" / "lib"
    lib.mkdir(parents=True)
    make_zip(lib / "pyspark.zip")
    make_zip(lib / "py4j-0.10.9.9-src.zip")
    (lib / "other.zip").write_bytes(b"")
    assert worker_zips(spark_home=tmp_path) == [lib / "py4j-0.10.9.9-src.zip", lib / "pyspark.zip"]
    assert main(["--spark-home", str(tmp_path)]) == 0
    assert main(["--spark-home", str(tmp_path / "none")]) == 1
