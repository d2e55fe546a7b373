"""A page of a workspace's files as folders: well nested, bounded, paged."""

from __future__ import annotations

from projections.workspace import WorkspaceFile
from projections.workspace_files import CLOSE, FILE, OPEN, files_page


def manifest(*paths: str) -> dict[str, WorkspaceFile]:
    return {path: WorkspaceFile("0" * 64, len(path)) for path in paths}


def shape(rows: object) -> list[str]:
    return [
        f"{r.kind}:{r.path}" if r.kind != CLOSE else "close"
        for r in rows  # type: ignore[attr-defined]
    ]


def test_folders_open_around_their_files_and_close_after_them() -> None:
    page = files_page(manifest("b.txt", "src/a/x.py", "src/a/y.py", "src/z.py", "a.txt"))
    assert shape(page.rows) == [
        "file:a.txt",
        "file:b.txt",
        "open:src",
        "open:src/a",
        "file:src/a/x.py",
        "file:src/a/y.py",
        "close",
        "file:src/z.py",
        "close",
    ]
    assert page.total == 5 and page.next_offset is None and page.after == 0


def test_a_page_that_starts_inside_a_folder_opens_it_again() -> None:
    files = manifest(*(f"deep/dir/{n:03}.txt" for n in range(10)))
    first = files_page(files, offset=0, limit=4)
    assert (first.shown, first.next_offset, first.after) == (4, 4, 6)
    second = files_page(files, offset=4, limit=4)
    assert shape(second.rows)[:3] == ["open:deep", "open:deep/dir", "file:deep/dir/004.txt"]
    assert [r.kind for r in second.rows].count(OPEN) == [r.kind for r in second.rows].count(CLOSE)
    assert [r.kind for r in second.rows].count(FILE) == 4


def test_an_offset_past_the_end_is_an_empty_last_page() -> None:
    page = files_page(manifest("a"), offset=10**9)
    assert page.rows == () and page.next_offset is None and page.offset == 1
