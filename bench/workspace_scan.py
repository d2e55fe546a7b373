"""The workspace recorder's disk work, in one process (not yet through the server):
`python -m bench.workspace_scan`. A folder of 5,000 files; the first scan (hashing all),
a scan that finds nothing changed, one after a one-file change, writing 500 files back,
and the pure fold at a leaf after 10,000 snapshots."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from projections.workspace import Snapshot, WorkspaceFile, fold_workspace
from runtime.tools import WorkspaceQuota
from runtime.workspace import materialize, scan

FILES, FOLDERS, SIZE = 5_000, 50, 4_096


def _ms(start: float) -> str:
    return f"{(time.perf_counter() - start) * 1000:.1f} ms"


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="strand-bench-ws-"))
    other = Path(tempfile.mkdtemp(prefix="strand-bench-ws-"))
    try:
        for index in range(FILES):
            folder = root / f"d{index % FOLDERS}"
            folder.mkdir(exist_ok=True)
            (folder / f"f{index}.txt").write_bytes(os.urandom(SIZE))
        quota = WorkspaceQuota(max_bytes=0, max_entries=0)
        start = time.perf_counter()
        first = scan(root, {}, quota)
        print(f"first scan of {FILES} files ({FILES * SIZE // 1_000_000} MB): {_ms(start)}")
        start = time.perf_counter()
        scan(root, first.manifest, quota)
        print(f"scan that finds nothing changed: {_ms(start)}")
        (root / "d3" / "f3.txt").write_text("changed")
        start = time.perf_counter()
        scan(root, first.manifest, quota)
        print(f"scan after a one-file change: {_ms(start)}")
        some = dict(sorted(first.manifest.items())[:500])
        start = time.perf_counter()
        materialize(other, {}, some, first.blobs)
        print(f"writing 500 files back (contents in memory): {_ms(start)}")
        path = [f"e{i}" for i in range(2_000)]
        snaps, manifest = [], {}
        for seq in range(10_000):
            files = {f"p{seq % 300}": WorkspaceFile("a" * 64, seq)}
            manifest.update(files)
            full = dict(manifest) if seq % 32 == 31 else None
            snaps.append(Snapshot(seq, path[min(seq // 5, 1_999)], "tool", files, (), full))
        start = time.perf_counter()
        fold_workspace(path, snaps)
        print(f"fold at a leaf after 10,000 snapshots: {_ms(start)}")
    finally:
        shutil.rmtree(root)
        shutil.rmtree(other)


if __name__ == "__main__":
    main()
